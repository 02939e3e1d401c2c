"""Read-side queries over the event store itself (the audit log is the store: every row
carries its facts, so nothing is rebuilt to answer them)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from sqlalchemy import Connection, select

from chatledger.adapters.codec import PAYLOAD_COLUMNS, add_summaries
from chatledger.adapters.fact_reads import event_type_of, fill_rows
from chatledger.adapters.mapper import TimedStoredEvent
from chatledger.adapters.schema import events_table, orders_by_transaction, stored_uuid


def query_audit(
    connection: Connection,
    *,
    account_id: str | None,
    session_id: UUID | None,
    since_us: int | None,
    until_us: int | None,
    types: Iterable[str] | None,
    limit: int,
    offset: int,
) -> list[dict[str, Any]]:
    """The audit log: stored events with their facts, in log order, filtered; ``until`` exclusive.

    Every event row carries its audit facts (actor, type, summary, the
    session's account and key), written in the same statement as the event,
    so the audit log is the store itself: never behind, nothing to rebuild.
    Slim rows are filled in from their sessions' first rows (``fact_reads``).
    An account's events are found through its sessions (the session
    directory index, then each session's stream). On PostgreSQL the newest
    entries may still be joined, in between, by an older transaction that
    commits late (see ``LogCursor``).
    """
    t = events_table
    query = select(
        t.c.id.label("position"),
        t.c.originator_id.label("session_id"),
        t.c.tenant.label("account_id"),
        t.c.session_key,
        t.c.originator_version.label("version"),
        event_type_of(t).label("event_type"),
        t.c.actor_account,
        t.c.actor_user,
        t.c.actor_agent,
        t.c.actor_role,
        t.c.trace_id,
        t.c.timestamp_us,
        t.c.summary,
        t.c.topic.label(PAYLOAD_COLUMNS[0]),
        t.c.state.label(PAYLOAD_COLUMNS[1]),
    )
    if session_id is not None:
        query = query.where(t.c.originator_id == session_id)
    if account_id is not None:
        sessions = events_table.alias("sessions")
        query = query.where(
            t.c.originator_id.in_(
                select(sessions.c.originator_id).where(
                    sessions.c.tenant == account_id, sessions.c.originator_version == 1
                )
            )
        )
    if since_us is not None:
        query = query.where(t.c.timestamp_us >= since_us)
    if until_us is not None:
        query = query.where(t.c.timestamp_us < until_us)
    if types is not None:
        query = query.where(event_type_of(t).in_(list(types)))
    order = (t.c.tx_id, t.c.id) if orders_by_transaction(connection.dialect.name) else (t.c.id,)
    rows = connection.execute(query.order_by(*order).limit(limit).offset(offset))
    return add_summaries(fill_rows(connection, [dict(row) for row in rows.mappings()]))


def query_rows_at(connection: Connection, positions: Iterable[int]) -> list[StoredEvent]:
    """The stored events at these log positions (undecoded), in position order."""
    wanted = sorted(set(positions))
    if not wanted:
        return []
    t = events_table
    query = (
        select(
            t.c.id,
            t.c.originator_id,
            t.c.originator_version,
            t.c.topic,
            t.c.state,
            t.c.timestamp_us,
        )
        .where(t.c.id.in_(wanted))
        .order_by(t.c.id)
    )
    return [
        TimedStoredEvent(
            originator_id=stored_uuid(oid),
            originator_version=int(version),
            topic=topic,
            state=bytes(state),
            timestamp_us=int(timestamp_us),
        )
        for _, oid, version, topic, state, timestamp_us in connection.execute(query)
    ]
