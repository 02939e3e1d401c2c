"""Reading the whole store for ``verify``: stored rows in chain order, as plain tuples.

``verify`` reads every stored event, so this read skips what an ordinary
query costs per row (SQLAlchemy's result rows, one object per event): it runs
one statement on a DB-API cursor -- a server-side one on PostgreSQL, so a
large store is streamed, not loaded -- and hands over the rows in batches,
each a tuple of position, session id (as stored: text on SQLite), version,
topic, state, timestamp and hash, followed by the first ``facts`` stored
facts (``chatledger.projections.facts.FACT_COLUMNS``) -- or every fact, packed
(``packed=True``, for the deep check): the nine facts most rows hold at their
usual value (``USUAL_FACTS``: a slim row's actor, status, summary and usage
counts) come as one column that is NULL where all nine are usual, so a row
costs eight columns fewer to read (Python's sqlite3 pays for each column of
each row); ``whole_facts`` and ``fact_columns`` give them back in the form of
``FACT_COLUMNS``. What a row holds is not checked here: a row edited by hand
may hold anything, and it is for the chain check to find it broken
(``chain.first_break``) and for the deep check to compare its facts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any
from uuid import UUID

from chatledger.adapters.recorders import SqlEventRecorder, SqlSnapshotRecorder
from chatledger.adapters.schema import stored_uuid
from chatledger.projections.facts import FACT_COLUMNS

_BATCH = 2000
_CHAINED = ("id", "originator_id", "originator_version", "topic", "state", "timestamp_us", "hash")
_FACTS_AT = len(_CHAINED)
USUAL_FACTS = (
    "actor_account", "actor_user", "actor_agent", "actor_role", "trace_id", "status", "summary",
    "tool_calls", "tool_failures",
)  # fmt: skip
"""The facts a packed scan reads as one column: usual where a slim row leaves them."""
_USUAL_VALUES: tuple[object, ...] = ("",) * 7 + (None, None)
_TEXT_USUAL, _NUMBER_USUAL = USUAL_FACTS[:7], USUAL_FACTS[7:]
_OTHER_FACTS = tuple(c for c in FACT_COLUMNS[3:] if c not in USUAL_FACTS)
_PACKED_ROW = _FACTS_AT + 4 + len(_OTHER_FACTS)  # chained, naming facts, usual, the others
assert FACT_COLUMNS[3:8] == USUAL_FACTS[:5] and _OTHER_FACTS == (
    "message_count", "pending_tokens", "turn_count", "commit_count", "archive_count",
    "last_commit_us", "tool_name", "tool_status", "prompt_tokens", "completion_tokens",
    "idempotency_key",
)  # fmt: skip
_UNREADABLE = ("(unreadable)",) * len(USUAL_FACTS)


def _usual_column(sqlite: bool) -> str:
    """NULL where every usual fact holds its usual value, else all nine as a JSON array.

    On SQLite a column may hold a value of any type (a row edited by hand): a blob,
    or anything but an integer among the numbers, is written as an object naming its
    type, which equals no fact -- so the array reads back exactly what the columns
    hold, or something that differs from every fact."""
    usual = " AND ".join(
        [f"{c} = ''" for c in _TEXT_USUAL] + [f"{c} IS NULL" for c in _NUMBER_USUAL]
    )
    if not sqlite:  # typed columns
        return (
            f"CASE WHEN {usual} THEN NULL ELSE json_build_array({', '.join(USUAL_FACTS)})::text END"
        )
    values = [
        f"CASE WHEN typeof({c}) = 'blob' THEN json_object('blob', hex({c})) ELSE {c} END"
        for c in _TEXT_USUAL
    ] + [
        f"CASE WHEN typeof({c}) IN ('integer', 'null') THEN {c} "
        f"ELSE json_object(typeof({c}), hex({c})) END"
        for c in _NUMBER_USUAL
    ]
    return f"CASE WHEN {usual} THEN NULL ELSE json_array({', '.join(values)}) END"


def whole_facts(row: Sequence[Any]) -> tuple[Any, ...]:
    """The facts of a scanned row, in the order of ``FACT_COLUMNS``, packed or not."""
    facts = tuple(row[_FACTS_AT:])
    if len(row) != _PACKED_ROW:
        return facts
    usual = _usual(facts[3])
    other = facts[4:]
    return (
        *facts[:3], *usual[:5], *other[:6], usual[5], *other[6:10], usual[6], other[10],
        *usual[7:],
    )  # fmt: skip


def _usual(packed: Any) -> tuple[Any, ...]:
    if packed is None:
        return _USUAL_VALUES
    try:
        values = json.loads(packed)
    except (TypeError, ValueError):
        return _UNREADABLE
    if not isinstance(values, list) or len(values) != len(USUAL_FACTS):
        return _UNREADABLE
    return tuple(values)


def fact_columns(rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """The facts of scanned rows as columns (one tuple per fact of ``FACT_COLUMNS``, one
    value per row), packed or not: a run of rows whose usual facts are all usual is
    filled in column by column."""
    count = len(rows)
    if not count:
        return [()] * len(FACT_COLUMNS)
    if len(rows[0]) != _PACKED_ROW:
        return list(zip(*rows, strict=True))[_FACTS_AT:]
    columns = list(zip(*rows, strict=True))[_FACTS_AT:]
    if columns[3].count(None) != count:  # some row's are not all usual
        return list(zip(*map(whole_facts, rows), strict=True))
    blank, none = ("",) * count, (None,) * count
    other = columns[4:]
    return [
        *columns[:3], blank, blank, blank, blank, blank, *other[:6], blank, *other[6:10], blank,
        other[10], none, none,
    ]  # fmt: skip


def scan_rows(
    recorder: SqlEventRecorder,
    originator_id: UUID | None = None,
    *,
    facts: int = 0,
    packed: bool = False,
) -> Iterator[list[tuple[Any, ...]]]:
    """Every stored event (of one session, if given) ordered by (session, version), in
    batches of tuples: the chained columns, then the first ``facts`` fact columns -- or,
    ``packed``, every fact: the three that name the event, the usual ones as one column
    (``USUAL_FACTS``), then the others (``whole_facts`` reads them)."""
    sqlite = recorder.dialect == "sqlite"
    params: tuple[Any, ...] = ()
    if originator_id is not None:
        params = (originator_id.hex if sqlite else originator_id,)
    try:
        connection: Any = recorder.engine.raw_connection()
        try:
            if packed and sqlite and not _has_json(connection, recorder.dbapi):
                packed, facts = False, len(FACT_COLUMNS)  # an SQLite built without JSON
            if packed:
                packing = _usual_column(sqlite)
                columns = ", ".join((*_CHAINED, *FACT_COLUMNS[:3], packing, *_OTHER_FACTS))
            else:
                columns = ", ".join(_CHAINED + FACT_COLUMNS[:facts])
            sql = f"SELECT {columns} FROM {recorder.table.name}"
            if originator_id is not None:
                sql += f" WHERE originator_id = {'?' if sqlite else '%s'}"
            sql += " ORDER BY originator_id, originator_version"
            cursor: Any
            if sqlite:
                connection.execute("BEGIN")  # one snapshot of the database for the whole read
                cursor = connection.cursor()
            else:
                dbapi: Any = connection.dbapi_connection
                cursor = dbapi.cursor(name="chatledger_verify")
                cursor.itersize = _BATCH
            cursor.execute(sql, params)
            while rows := cursor.fetchmany(_BATCH):
                yield rows  # a list of tuples, from either driver
            cursor.close()
        finally:
            connection.rollback()
            connection.close()
    except recorder.dbapi.Error as error:
        raise recorder.translate(error) from error


def _has_json(connection: Any, dbapi: Any) -> bool:
    """Whether this SQLite has its JSON functions (built in since 3.38, optional before)."""
    try:
        connection.execute("SELECT json_array(1)").fetchall()
    except dbapi.OperationalError:  # no such function
        return False
    return True


def snapshot_versions(
    recorder: SqlSnapshotRecorder, originator_id: UUID | None = None
) -> dict[UUID, list[int]]:
    """The versions of the stored snapshots of each session (of one, if given), ascending.
    Ids that are not ids (a row edited by hand) are left out: ``verify`` checks each
    session's snapshots against its events, and such a row belongs to no session."""
    sqlite = recorder.dialect == "sqlite"
    sql = f"SELECT originator_id, originator_version FROM {recorder.table.name}"
    params: tuple[Any, ...] = ()
    if originator_id is not None:
        sql += f" WHERE originator_id = {'?' if sqlite else '%s'}"
        params = (originator_id.hex if sqlite else originator_id,)
    sql += " ORDER BY originator_id, originator_version"
    found: dict[UUID, list[int]] = {}
    try:
        connection: Any = recorder.engine.raw_connection()
        try:
            cursor = connection.cursor()
            cursor.execute(sql, params)
            for oid, version in cursor.fetchall():
                try:
                    sid = stored_uuid(oid)
                except ValueError:
                    continue
                found.setdefault(sid, []).append(int(version))
            cursor.close()
        finally:
            connection.rollback()
            connection.close()
    except recorder.dbapi.Error as error:
        raise recorder.translate(error) from error
    return found


class SnapshotReader:
    """Reads one session's stored snapshots at a time on one connection held for a whole
    ``verify`` (an ordinary read per session would check one out of the pool each time)."""

    def __init__(self, recorder: SqlSnapshotRecorder) -> None:
        self._recorder = recorder
        sqlite = recorder.dialect == "sqlite"
        self._sqlite = sqlite
        mark = "?" if sqlite else "%s"
        self._sql = (
            f"SELECT originator_version, topic, state FROM {recorder.table.name} "
            f"WHERE originator_id = {mark} ORDER BY originator_version"
        )
        self._connection: Any = None

    def rows(self, originator_id: UUID) -> list[tuple[int, str, bytes]]:
        """(version, topic, state) of each stored snapshot of the session, oldest first."""
        try:
            if self._connection is None:
                self._connection = self._recorder.engine.raw_connection()
            cursor = self._connection.cursor()
            cursor.execute(self._sql, (originator_id.hex if self._sqlite else originator_id,))
            found = [(int(v), str(t), bytes(s)) for v, t, s in cursor.fetchall()]
            cursor.close()
        except self._recorder.dbapi.Error as error:
            raise self._recorder.translate(error) from error
        return found

    def close(self) -> None:
        if self._connection is not None:
            self._connection.rollback()
            self._connection.close()
            self._connection = None
