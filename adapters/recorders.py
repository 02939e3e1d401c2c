"""The recorders: chatledger's tables behind the eventsourcing library's recorder interfaces.

``eventsourcing-sqlalchemy`` writes through the ORM and reaches about a tenth
of a raw insert rate, which would make the append path the bottleneck. These
recorders implement the library's ``ApplicationRecorder`` /
``AggregateRecorder`` interfaces on SQLAlchemy Core for reads and DDL, and
hand appends to the backend's own path on a DB-API connection
(``append_sqlite``, ``append_postgres``). Version conflicts surface as the
library's ``IntegrityError``; other driver errors as its ``OperationalError``
/ ``DatabaseError`` (translated to ``chatledger.errors`` by the service).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import Any, NamedTuple, TypeVar
from uuid import UUID

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    DatabaseError,
    IntegrityError,
    Notification,
    OperationalError,
    StoredEvent,
    Subscription,
)
from sqlalchemy import Engine, Table, Text, func, select, type_coerce

from chatledger.adapters.append_postgres import PostgresAppender
from chatledger.adapters.append_sqlite import SqliteAppender, SqliteWriter
from chatledger.adapters.chain import ChainRow, stored_chain_row
from chatledger.adapters.fact_reads import event_type_sql
from chatledger.adapters.mapper import TimedNotification, TimedStoredEvent
from chatledger.adapters.schema import position_sequence
from chatledger.adapters.store_errors import OutcomeUnknown
from chatledger.projections.facts import FACT_COLUMNS, StoredFacts

_T = TypeVar("_T")


class SqlRecorder:
    """Shared plumbing: the write transaction, stream reads, error translation."""

    def __init__(self, engine: Engine, table: Table) -> None:
        self.engine = engine
        self.table = table
        self.dialect = engine.dialect.name
        self.dbapi: Any = engine.dialect.loaded_dbapi
        self._sqlite = SqliteWriter(engine, self._translate) if self.dialect == "sqlite" else None

    def translate(self, error: Exception) -> Exception:
        """The library's exception for a driver error (``IntegrityError``, ...)."""
        return self._translate(error)

    def _translate(self, error: Exception) -> Exception:
        if isinstance(error, self.dbapi.IntegrityError):
            return IntegrityError(str(error))
        if isinstance(error, self.dbapi.OperationalError | self.dbapi.InterfaceError):
            return OperationalError(str(error))
        return DatabaseError(str(error))

    def _in_write_transaction(self, work: Callable[[Any], _T]) -> _T:
        """Run ``work(cursor)`` in one write transaction and commit it.

        SQLite: this process's one writer connection, ``BEGIN IMMEDIATE``, so
        the write lock is held from the start. PostgreSQL: a pooled connection.
        Driver errors come out as the library's exceptions.
        """
        if self._sqlite is not None:
            return self._sqlite.run(work)
        return self._in_postgres_transaction(work)

    def _in_postgres_transaction(self, work: Callable[[Any], _T]) -> _T:
        connection = self.engine.raw_connection()
        try:
            cursor = connection.cursor()
            try:
                result = work(cursor)
            except BaseException:
                connection.rollback()
                raise
            finally:
                cursor.close()
            try:
                connection.commit()
            except self.dbapi.Error as error:
                # The COMMIT was sent but its answer never came (the connection or the
                # server went away): the transaction may have committed, or not.
                connection.invalidate()
                raise OutcomeUnknown(str(error)) from error
        except self.dbapi.Error as error:
            raise self._translate(error) from error
        finally:
            connection.close()
        return result

    def close(self) -> None:
        if self._sqlite is not None:
            self._sqlite.close()

    def _stretch(
        self, originator_id: UUID, gt: int | None, lte: int | None
    ) -> tuple[str, str, list[Any]]:
        """The driver's parameter mark, and the WHERE clause and parameters selecting one
        session's rows after ``gt`` up to ``lte`` (the session id first)."""
        mark = "?" if self.dialect == "sqlite" else "%s"
        where = f"originator_id = {mark}"
        params: list[Any] = [originator_id.hex if self.dialect == "sqlite" else originator_id]
        if gt is not None:
            where += f" AND originator_version > {mark}"
            params.append(gt)
        if lte is not None:
            where += f" AND originator_version <= {mark}"
            params.append(lte)
        return mark, where, params

    def _select_stretch(
        self, originator_id: UUID, gt: int | None, lte: int | None
    ) -> tuple[str, str, list[Any]]:
        """``_stretch`` as a SELECT of the four columns a stored event is read from."""
        mark, where, params = self._stretch(originator_id, gt, lte)
        sql = (
            f"SELECT originator_version, topic, state, timestamp_us FROM {self.table.name} "
            f"WHERE {where}"
        )
        return mark, sql, params

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        """One stream's rows (events or snapshots) in version order, as the library reads them.

        Plain SQL on a pooled DB-API connection, like ``stream``: a statement built
        with SQLAlchemy is compiled again by every new engine, and a load (its newest
        snapshot) runs this first.
        """
        oid = originator_id if isinstance(originator_id, UUID) else UUID(str(originator_id))
        mark, sql, params = self._select_stretch(oid, gt, lte)
        sql += f" ORDER BY originator_version {'DESC' if desc else 'ASC'}"
        if limit is not None:
            sql += f" LIMIT {mark}"
            params.append(limit)
        return [
            TimedStoredEvent(
                originator_id=oid,
                originator_version=int(version),
                topic=topic,
                state=bytes(state),
                timestamp_us=int(timestamp_us),
            )
            for version, topic, state, timestamp_us in self._fetch_all(sql, params)
        ]

    def _fetch_all(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """The rows of one query, read on a pooled DB-API connection; errors translated."""
        try:
            connection = self.engine.raw_connection()
        except Exception as error:
            raise self._translate_any(error) from error
        try:
            cursor = connection.cursor()
            try:
                cursor.execute(sql, params)
                return list(cursor.fetchall())
            finally:
                cursor.close()
        except self.dbapi.Error as error:
            raise self._translate(error) from error
        finally:
            connection.close()

    def _translate_any(self, error: Exception) -> Exception:
        original = getattr(error, "orig", None)
        if isinstance(original, self.dbapi.Error):
            return self._translate(original)
        return OperationalError(str(error))


StreamRow = tuple[int, str, bytes, int]
"""A stored event as the load path reads it: (version, topic, state, timestamp_us)."""

_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_VERSIONS_PER_QUERY = 500
MESSAGE_TOPIC = "MessageAdded"
"""The topic of a format-2 ``MessageAdded`` row, which ``StreamColumns`` reads as None."""


class StreamColumns(NamedTuple):
    """Consecutive stored events of one session, column by column: what a load replays.

    ``topics`` holds None for a format-2 ``MessageAdded`` (nearly every row: no
    string is made for it), else the stored topic; ``versions`` is a ``range`` when
    the rows were read as a gap-free stretch (``SqlRecorder.stream_columns``).
    """

    versions: Sequence[int]
    topics: Sequence[str | None]
    states: Sequence[bytes]
    stamps: Sequence[int]

    @classmethod
    def of_rows(cls, rows: Sequence[StreamRow]) -> StreamColumns:
        """The columns of rows read by ``SqlRecorder.stream``."""
        if not rows:
            return EMPTY_STREAM
        versions, topics, states, stamps = zip(*rows, strict=True)
        return cls(versions, [None if t == MESSAGE_TOPIC else t for t in topics], states, stamps)

    def after_first(self) -> StreamColumns:
        """The columns without their first row."""
        return StreamColumns(self.versions[1:], self.topics[1:], self.states[1:], self.stamps[1:])


EMPTY_STREAM = StreamColumns(range(0), (), (), ())


def _positions_of_none(values: list[Any]) -> list[int]:
    """Where ``values`` holds None (searched in C: a long stretch holds few)."""
    found: list[int] = []
    at = -1
    for _ in range(values.count(None)):
        at = values.index(None, at + 1)
        found.append(at)
    return found


class KeyedRow(NamedTuple):
    """A stored event of a write made with an idempotency key, with what a retry returns."""

    position: int
    version: int
    stored: StoredEvent
    pending_tokens: int
    tx: int = 0  # the writing transaction (PostgreSQL; 0 on SQLite): rows of one write share it


class SqlSnapshotRecorder(SqlRecorder, AggregateRecorder):
    """Stores snapshots; a snapshot at a version already stored is ignored."""

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> None:
        mark = "?" if self.dialect == "sqlite" else "%s"
        sql = (
            f"INSERT INTO {self.table.name} (originator_id, originator_version, topic, state, "
            f"timestamp_us) VALUES ({mark}, {mark}, {mark}, {mark}, {mark})"
        )
        sqlite = self.dialect == "sqlite"

        def insert(cursor: Any) -> None:
            for row in stored_events:
                oid = row.originator_id
                oid = oid if isinstance(oid, UUID) else UUID(str(oid))
                cursor.execute(
                    sql,
                    (
                        oid.hex if sqlite else oid, row.originator_version, row.topic, row.state,
                        getattr(row, "timestamp_us", 0),
                    ),
                )  # fmt: skip

        # Another process may have stored the same snapshot: equal by construction.
        with contextlib.suppress(IntegrityError):
            self._in_write_transaction(insert)


class SqlEventRecorder(SqlRecorder, ApplicationRecorder):
    """The application sequence: per-session streams plus one global order.

    Appends go through the backend's append path (``append_sqlite`` or
    ``append_postgres``); everything else is shared.
    """

    def __init__(self, engine: Engine, table: Table, *, chain_key: bytes | None = None) -> None:
        super().__init__(engine, table)
        self.chain_key = chain_key
        # The backend's append path, public for tests that hold an append between its steps.
        self.sqlite = (
            SqliteAppender(self._sqlite, table, chain_key=chain_key)
            if self._sqlite is not None
            else None
        )
        self.postgres = (
            PostgresAppender(engine, table, position_sequence, chain_key=chain_key)
            if self.dialect == "postgresql"
            else None
        )

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> list[int]:
        """Append events, each hashed onto its session's chain; return their positions."""
        if not stored_events:
            return []
        if self.postgres is not None:
            return self.postgres.append(stored_events)
        assert self.sqlite is not None
        return self.sqlite.append(stored_events)

    def close(self) -> None:
        super().close()
        if self.postgres is not None:
            self.postgres.close()

    def insert_exported(self, rows: Sequence[ChainRow], facts: Sequence[StoredFacts]) -> None:
        """Insert rows with their original positions and hashes (and facts) into an empty store."""
        if self.postgres is not None:
            self.postgres.insert_exported(rows, facts)
            return
        assert self.sqlite is not None
        self.sqlite.insert_exported(rows, facts)

    def chain_rows(self, originator_id: UUID | None = None) -> Iterator[ChainRow]:
        """Stored rows ordered by (session, version), streamed, for verification and export."""
        t = self.table
        # The id column is read uncoerced: a row edited by hand may hold
        # anything, and must come out as a (broken) row, not a crash.
        raw_id = (
            type_coerce(t.c.originator_id, Text())
            if self.dialect == "sqlite"
            else t.c.originator_id
        )
        query = select(
            t.c.id, raw_id, t.c.originator_version, t.c.topic, t.c.state,
            t.c.timestamp_us, t.c.hash, *(t.c[c] for c in FACT_COLUMNS),
        ).order_by(t.c.originator_id, t.c.originator_version)  # fmt: skip
        if originator_id is not None:
            query = query.where(t.c.originator_id == originator_id)
        try:
            with self.engine.connect() as connection:
                result = connection.execution_options(yield_per=2000).execute(query)
                for values in result:
                    yield stored_chain_row(*values[:7], facts=tuple(values[7:]))
        except Exception as error:
            raise self._translate_any(error) from error

    def stream(
        self,
        originator_id: UUID,
        *,
        gt: int | None = None,
        lte: int | None = None,
        versions: Sequence[int] | None = None,
        types: Sequence[str] | None = None,
    ) -> list[StreamRow]:
        """One session's rows (after ``gt``, up to ``lte``, just ``versions``, of ``types``)
        in version order, as the driver returns them: the load path's read, with no object
        built per row beyond the driver's own tuple."""
        mark, sql, params = self._select_stretch(originator_id, gt, lte)
        if versions is not None:
            sql += f" AND originator_version IN ({', '.join([mark] * len(versions))})"
            params.extend(versions)
        if types is not None:
            sql += f" AND {event_type_sql()} IN ({', '.join([mark] * len(types))})"
            params.extend(types)
        rows: list[StreamRow] = self._fetch_all(sql + " ORDER BY originator_version", params)
        return rows

    def stream_columns(
        self, originator_id: UUID, *, gt: int | None = None, lte: int | None = None
    ) -> StreamColumns | None:
        """``stream`` (after ``gt``, up to ``lte``) as columns, for loads.

        The driver converts each value under its own release of the GIL, so a column
        costs about as much as the row itself: the stretch is read as two columns,
        each row's state and -- for a ``MessageAdded``, nearly every row -- its
        timestamp. A row's version follows from the stretch's first and last
        versions (read through the index; versions are unique, so the rows are
        exactly those when their count says so); the topic and timestamp of the few
        other rows are read by version afterwards. None if the stretch has a gap
        (``stream`` reads it row by row, and the replay reports it).
        """
        mark, where, params = self._stretch(originator_id, gt, lte)
        table, sid = self.table.name, params[0]
        connection = self.engine.raw_connection()
        try:
            cursor = connection.cursor()
            try:
                cursor.execute(
                    f"SELECT (SELECT min(originator_version) FROM {table} WHERE {where}), "
                    f"(SELECT max(originator_version) FROM {table} WHERE {where})",
                    params * 2,
                )
                low, high = cursor.fetchone() or (None, None)
                if low is None or high is None:
                    return EMPTY_STREAM
                # Up to the last version seen: a row appended meanwhile is not read.
                cursor.execute(
                    f"SELECT state, CASE WHEN topic = '{MESSAGE_TOPIC}' THEN timestamp_us END "
                    f"FROM {table} WHERE {where} AND originator_version <= {mark} "
                    "ORDER BY originator_version",
                    [*params, high],
                )
                rows = cursor.fetchall()
                if len(rows) != high - low + 1:
                    return None
                states: list[bytes] = list(map(_FIRST, rows))
                stamps: list[int] = list(map(_SECOND, rows))
                del rows
                topics: list[str | None] = [None] * len(stamps)
                positions = _positions_of_none(stamps)
                others = [low + at for at in positions]
                for first in range(0, len(others), _VERSIONS_PER_QUERY):
                    versions = others[first : first + _VERSIONS_PER_QUERY]
                    cursor.execute(
                        f"SELECT originator_version, topic, timestamp_us FROM {table} "
                        f"WHERE originator_id = {mark} AND originator_version IN "
                        f"({', '.join([mark] * len(versions))})",
                        [sid, *versions],
                    )
                    for version, topic, stamp in cursor.fetchall():
                        topics[version - low], stamps[version - low] = topic, stamp
            finally:
                cursor.close()
        except self.dbapi.Error as error:
            raise self._translate(error) from error
        finally:
            connection.close()
        if any(stamps[at] is None for at in positions):  # a row gone between the two reads
            return None  # (stream reads it row by row)
        return StreamColumns(range(low, high + 1), topics, states, stamps)

    def keyed_rows(self, originator_id: UUID, key: str, limit: int) -> list[KeyedRow]:
        """The write made with idempotency ``key`` in the session: its first event and up to
        ``limit - 1`` after it, in version order; empty if no such write was recorded."""
        t = self.table
        keyed = (
            select(t.c.originator_version)
            .where(t.c.originator_id == originator_id, t.c.idempotency_key == key)
            .scalar_subquery()
        )
        query = (
            select(
                t.c.id, t.c.originator_version, t.c.topic, t.c.state, t.c.timestamp_us,
                t.c.pending_tokens, t.c.tx_id,
            )
            .where(t.c.originator_id == originator_id, t.c.originator_version >= keyed)
            .order_by(t.c.originator_version)
            .limit(limit)
        )  # fmt: skip
        try:
            with self.engine.connect() as connection:
                rows = connection.execute(query).all()
        except Exception as error:
            raise self._translate_any(error) from error
        return [
            KeyedRow(
                int(position),
                int(version),
                TimedStoredEvent(
                    originator_id=originator_id,
                    originator_version=int(version),
                    topic=topic,
                    state=bytes(state),
                    timestamp_us=int(timestamp_us),
                ),
                int(pending),
                int(tx),
            )
            for position, version, topic, state, timestamp_us, pending, tx in rows
        ]

    def version_at(self, originator_id: UUID, timestamp_us: int) -> int | None:
        """The last version of a stream recorded at or before a moment, if any."""
        t = self.table
        query = (
            select(t.c.originator_version)
            .where(t.c.originator_id == originator_id, t.c.timestamp_us <= timestamp_us)
            .order_by(t.c.originator_version.desc())
            .limit(1)
        )
        try:
            with self.engine.connect() as connection:
                value = connection.execute(query).scalar()
        except Exception as error:
            raise self._translate_any(error) from error
        return None if value is None else int(value)

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        """The library's notification log: rows by position.

        On PostgreSQL positions are not the log order, and a position may be
        filled after a higher one is visible: chatledger's own projector
        follows ``chatledger.adapters.sql_projector.EventLog`` instead.
        """
        t = self.table
        query = select(
            t.c.id, t.c.originator_id, t.c.originator_version, t.c.topic, t.c.state,
            t.c.timestamp_us,
        )  # fmt: skip
        if start is not None:
            query = query.where(t.c.id >= start if inclusive_of_start else t.c.id > start)
        if stop is not None:
            query = query.where(t.c.id <= stop)
        if topics:
            query = query.where(t.c.topic.in_(list(topics)))
        query = query.order_by(t.c.id).limit(limit)
        try:
            with self.engine.connect() as connection:
                rows = connection.execute(query).all()
        except Exception as error:
            raise self._translate_any(error) from error
        return [
            TimedNotification(
                id=int(nid),
                originator_id=oid,
                originator_version=int(version),
                topic=topic,
                state=bytes(state),
                timestamp_us=int(timestamp_us),
            )
            for nid, oid, version, topic, state, timestamp_us in rows
        ]

    def max_notification_id(self) -> int | None:
        try:
            with self.engine.connect() as connection:
                value = connection.execute(select(func.max(self.table.c.id))).scalar()
        except Exception as error:
            raise self._translate_any(error) from error
        return None if value is None else int(value)

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        raise NotImplementedError(
            "chatledger follows the log by polling select_notifications(); "
            "subscriptions are not offered by this recorder."
        )
