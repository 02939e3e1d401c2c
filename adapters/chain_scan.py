"""Reading the whole store for ``verify``: stored rows in chain order, as plain tuples.

``verify`` reads every stored event, so this read skips what an ordinary
query costs per row (SQLAlchemy's result rows, one object per event): it runs
one statement on a DB-API cursor -- a server-side one on PostgreSQL, so a
large store is streamed, not loaded -- and hands over the rows in batches,
each a tuple of position, session id (as stored: text on SQLite), version,
topic, state, timestamp and hash, followed by the first ``facts`` stored
facts (``chatledger.projections.facts.FACT_COLUMNS``). What a row holds is
not checked here: a row edited by hand may hold anything, and it is for the
chain check to find it broken (``chain.first_break``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import UUID

from chatledger.adapters.recorders import SqlEventRecorder, SqlSnapshotRecorder
from chatledger.adapters.schema import stored_uuid
from chatledger.projections.facts import FACT_COLUMNS

_BATCH = 2000
_CHAINED = ("id", "originator_id", "originator_version", "topic", "state", "timestamp_us", "hash")


def scan_rows(
    recorder: SqlEventRecorder, originator_id: UUID | None = None, *, facts: int = 0
) -> Iterator[list[tuple[Any, ...]]]:
    """Every stored event (of one session, if given) ordered by (session, version), in
    batches of tuples: the chained columns, then the first ``facts`` fact columns."""
    sqlite = recorder.dialect == "sqlite"
    columns = ", ".join(_CHAINED + FACT_COLUMNS[:facts])
    sql = f"SELECT {columns} FROM {recorder.table.name}"
    params: tuple[Any, ...] = ()
    if originator_id is not None:
        sql += f" WHERE originator_id = {'?' if sqlite else '%s'}"
        params = (originator_id.hex if sqlite else originator_id,)
    sql += " ORDER BY originator_id, originator_version"
    try:
        connection: Any = recorder.engine.raw_connection()
        try:
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
