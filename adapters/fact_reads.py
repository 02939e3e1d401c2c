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
index), never one per row. The commit counters of a row that does not change
archives are its session's newest archive-changing row's (``fill_counters``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple
from uuid import UUID

from sqlalchemy import Connection, bindparam, case, literal, select, text
from sqlalchemy.sql.elements import ColumnElement

from chatledger.adapters.schema import (
    SESSION_ARCHIVES_INDEX,
    carries_archives,
    events_table,
    stored_uuid,
)
from chatledger.domain.session import LIVE
from chatledger.projections.archive_events import ARCHIVE_EVENT_TYPES
from chatledger.projections.facts import COUNTER_COLUMNS

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


def fill_counters(connection: Connection, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give each fact row (a dict with ``session_id``, ``version``, ``event_type`` -- the
    type itself, see ``event_type_of`` -- and the ``COUNTER_COLUMNS``) that does not change
    archives the commit counters of its session's newest archive-changing row at or before
    it; in place.

    Only those events change them, so a slim row of any other event leaves them empty
    (``chatledger.projections.facts``), and a row written before holds those very values.
    One query per session in ``rows``, one lookup in the partial index on those rows per
    row: a page of a long session costs what it returns.
    """
    sessions: dict[UUID, list[dict[str, Any]]] = {}
    for row in rows:
        if row["event_type"] not in ARCHIVE_EVENT_TYPES:
            sessions.setdefault(stored_uuid(row["session_id"]), []).append(row)
    for session_id, mine in sessions.items():
        found = _archive_counters(connection, session_id, sorted({r["version"] for r in mine}))
        for row in mine:
            row.update(zip(COUNTER_COLUMNS, found.get(row["version"], _NONE_YET), strict=True))
    return rows


_NONE_YET = (0, 0, None)  # before a session's first archive-changing event


def _archive_counters(
    connection: Connection, session_id: UUID, versions: list[int]
) -> dict[int, tuple[Any, ...]]:
    """The commit counters after each of these versions of a session (those after which
    it has had an archive-changing event), by version."""
    dialect = connection.dialect.name
    table = _t.name
    # SQLite: else it may walk the stream index back row by row to the session's last commit.
    hint = f" INDEXED BY {SESSION_ARCHIVES_INDEX}" if dialect == "sqlite" else ""
    changes = carries_archives(dialect).replace("event_type", "b.event_type")
    query = text(
        f"SELECT e.originator_version, a.commit_count, a.archive_count, a.last_commit_us "
        f"FROM {table} e JOIN {table} a ON a.id = ("
        f"SELECT b.id FROM {table} b{hint} WHERE b.originator_id = e.originator_id "
        f"AND b.originator_version <= e.originator_version AND {changes} "
        "ORDER BY b.originator_version DESC LIMIT 1) "
        "WHERE e.originator_id = :sid AND e.originator_version IN :versions"
    ).bindparams(
        bindparam("sid", session_id, type_=_t.c.originator_id.type),
        bindparam("versions", versions, expanding=True),
    )
    return {int(row[0]): tuple(row[1:]) for row in connection.execute(query)}
