"""One session's events with their stored facts, read straight from the event store.

A timeline (a viewer's, or an embedder's) needs per event what the audit log
shows plus the session's counters right after it -- all of it stored facts
(``chatledger.projections.facts``; slim rows filled in from the session's first
row, ``fact_reads``), so nothing is decoded. Every query here
goes through the stream index ``(originator_id, originator_version)``: a page
or a sample costs what it returns, never the length of the session.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from sqlalchemy import Connection, Select, select, text

from chatledger.adapters.codec import PAYLOAD_COLUMNS, add_summaries
from chatledger.adapters.fact_reads import event_type_of, fill_rows, status_of
from chatledger.adapters.schema import events_table

_t = events_table
_COLUMNS = (
    _t.c.id.label("position"),
    _t.c.originator_id.label("session_id"),
    _t.c.tenant.label("account_id"),
    _t.c.session_key,
    _t.c.originator_version.label("version"),
    event_type_of(_t).label("event_type"),
    _t.c.actor_account,
    _t.c.actor_user,
    _t.c.actor_agent,
    _t.c.actor_role,
    _t.c.trace_id,
    _t.c.timestamp_us,
    _t.c.summary,
    _t.c.message_count,
    _t.c.pending_tokens,
    _t.c.turn_count,
    _t.c.commit_count,
    _t.c.archive_count,
    _t.c.last_commit_us,
    status_of(_t).label("status"),
    _t.c.tool_name,
    _t.c.tool_status,
    _t.c.prompt_tokens,
    _t.c.completion_tokens,
    _t.c.topic.label(PAYLOAD_COLUMNS[0]),
    _t.c.state.label(PAYLOAD_COLUMNS[1]),
)


def query_timeline(
    connection: Connection,
    *,
    session_id: UUID,
    after_version: int,
    before_version: int | None,
    limit: int,
    newest: bool,
) -> list[dict[str, Any]]:
    """Events of one session with versions in (after, before), oldest first.

    The first ``limit`` of them, or with ``newest`` the last ``limit``.
    """
    query = select(*_COLUMNS).where(
        _t.c.originator_id == session_id, _t.c.originator_version > after_version
    )
    if before_version is not None:
        query = query.where(_t.c.originator_version < before_version)
    version = _t.c.originator_version
    query = query.order_by(version.desc() if newest else version.asc()).limit(limit)
    rows = _rows(connection, query)
    if newest:
        rows.reverse()
    return rows


def query_versions(
    connection: Connection, *, session_id: UUID, versions: Sequence[int]
) -> list[dict[str, Any]]:
    """The events of one session at exactly these versions (those that exist), oldest first."""
    query = (
        select(*_COLUMNS)
        .where(_t.c.originator_id == session_id, _t.c.originator_version.in_(list(versions)))
        .order_by(_t.c.originator_version)
    )
    return _rows(connection, query)


def _rows(connection: Connection, query: Select[Any]) -> list[dict[str, Any]]:
    """The rows of a timeline query, filled in and with their summaries."""
    rows = [dict(row) for row in connection.execute(query).mappings()]
    return add_summaries(fill_rows(connection, rows))


def query_head_version(connection: Connection, *, session_id: UUID) -> int | None:
    """The newest version of one session, or ``None`` if it has no events."""
    query = (
        select(_t.c.originator_version)
        .where(_t.c.originator_id == session_id)
        .order_by(_t.c.originator_version.desc())
        .limit(1)
    )
    value = connection.execute(query).scalar()
    return None if value is None else int(value)


def query_forked_sessions(connection: Connection, *, account_id: str) -> list[dict[str, Any]]:
    """The sessions of an account whose first event is a ``Forked``, oldest first.

    Through the session directory (the partial index on creations by account and key),
    so the cost is the account's session count, not its event count.
    """
    query = (
        select(_t.c.session_key, _t.c.originator_id.label("session_id"))
        # Spelled as the partial index's condition, so the index serves it.
        .where(_t.c.tenant == account_id, text("originator_version = 1"))
        .where(_t.c.event_type == "Forked")
        .order_by(_t.c.id)
    )
    return [dict(row) for row in connection.execute(query).mappings()]
