"""Reading stored facts whole: slim rows filled in from their session's first row.

A row after a session's first may be slim (``chatledger.projections.facts``):
its tenant and key empty (the first row's), its event type empty when the
topic is the short name, its five actor columns empty when the actor is the
one who started the session (the first row's actor), its status empty when
it is live. Rows written before slim rows existed hold every column.
Everything that reads those facts -- the audit log, the timeline, the archive
history, tool usage, the projector's staging copy -- reads them through here,
so slim, full and mixed stores give the same answers. The fill is one query
per page of rows (the first rows of the sessions in it, through the stream
index), never one per row.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple
from uuid import UUID

from sqlalchemy import Connection, case, literal, select
from sqlalchemy.sql.elements import ColumnElement

from chatledger.adapters.schema import events_table, stored_uuid
from chatledger.domain.session import LIVE

_t = events_table
ACTOR_COLUMNS = ("actor_account", "actor_user", "actor_agent", "actor_role", "trace_id")
_LOOKUP_BATCH = 500  # session ids per IN list


class FirstRow(NamedTuple):
    """What a session's first row says for the slim rows after it."""

    tenant: str
    key: str
    actor: tuple[str, str, str, str, str]


def event_type_of(table: Any = _t) -> ColumnElement[str]:
    """The event type of a row, as an expression: the stored one, or (slim) the topic."""
    return case((table.c.event_type != "", table.c.event_type), else_=table.c.topic)


def event_type_sql(alias: str = "") -> str:
    """``event_type_of`` for hand-written SQL (``alias``: the events table's, if any)."""
    a = f"{alias}." if alias else ""
    return f"CASE WHEN {a}event_type <> '' THEN {a}event_type ELSE {a}topic END"


def status_of(table: Any = _t) -> ColumnElement[str]:
    """The session's status after a row, as an expression: the stored one, or (slim) live."""
    return case((table.c.status != "", table.c.status), else_=literal(LIVE))


def status_sql(alias: str = "") -> str:
    """``status_of`` for hand-written SQL (``alias``: the events table's, if any)."""
    a = f"{alias}." if alias else ""
    return f"CASE WHEN {a}status <> '' THEN {a}status ELSE '{LIVE}' END"


def first_rows(connection: Connection, session_ids: Iterable[UUID]) -> dict[UUID, FirstRow]:
    """The first rows of these sessions (those that have one), by session id."""
    wanted = sorted(set(session_ids))
    found: dict[UUID, FirstRow] = {}
    for start in range(0, len(wanted), _LOOKUP_BATCH):
        query = select(
            _t.c.originator_id, _t.c.tenant, _t.c.session_key, *(_t.c[c] for c in ACTOR_COLUMNS)
        ).where(
            _t.c.originator_version == 1,
            _t.c.originator_id.in_(wanted[start : start + _LOOKUP_BATCH]),
        )
        for oid, tenant, key, *actor in connection.execute(query):
            found[stored_uuid(oid)] = FirstRow(tenant, key, tuple(actor))
    return found


def fill_rows(
    connection: Connection,
    rows: list[dict[str, Any]],
    *,
    tenant: str = "account_id",
    key: str = "session_key",
) -> list[dict[str, Any]]:
    """Fill in slim fact rows (dicts with ``session_id``, the ``tenant`` and ``key``
    columns, and the actor columns if read) from their sessions' first rows; in place."""
    slim = [r for r in rows if r[tenant] == "" or r.get("actor_account") == ""]
    if not slim:
        return rows
    firsts = first_rows(connection, (stored_uuid(r["session_id"]) for r in slim))
    for row in slim:
        first = firsts.get(stored_uuid(row["session_id"]))
        if first is None:  # its first row is gone (verify reports that): leave it as stored
            continue
        if row[tenant] == "":
            row[tenant], row[key] = first.tenant, first.key
        if row.get("actor_account") == "":
            row.update(zip(ACTOR_COLUMNS, first.actor, strict=True))
    return rows


def fill_tuples(
    connection: Connection,
    rows: Sequence[Sequence[Any]],
    columns: Sequence[str],
) -> list[Sequence[Any]]:
    """``fill_rows`` for rows as tuples of ``columns`` (which name ``originator_id``, the
    tenant and key columns, and the actor columns)."""
    index = {name: i for i, name in enumerate(columns)}
    session, tenant, key = index["originator_id"], index["tenant"], index["session_key"]
    actors = [index[c] for c in ACTOR_COLUMNS]
    slim = [r for r in rows if r[tenant] == "" or r[actors[0]] == ""]
    if not slim:
        return list(rows)
    firsts = first_rows(connection, (stored_uuid(r[session]) for r in slim))
    filled: list[Sequence[Any]] = []
    for row in rows:
        first = firsts.get(stored_uuid(row[session])) if (
            row[tenant] == "" or row[actors[0]] == ""
        ) else None  # fmt: skip
        if first is None:
            filled.append(row)
            continue
        values = list(row)
        if values[tenant] == "":
            values[tenant], values[key] = first.tenant, first.key
        if values[actors[0]] == "":
            for at, value in zip(actors, first.actor, strict=True):
                values[at] = value
        filled.append(tuple(values))
    return filled
