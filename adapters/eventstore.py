"""The event store: lean SQLAlchemy recorders behind the library's interfaces.

``eventsourcing-sqlalchemy`` writes through the ORM and reaches about a tenth
of a raw insert rate, which would make the append path the bottleneck. These
recorders implement the library's ``ApplicationRecorder`` /
``AggregateRecorder`` interfaces on SQLAlchemy Core (tables, reads, DDL) and
issue the append itself on a pooled DB-API connection: one short transaction,
``BEGIN IMMEDIATE`` on SQLite and ``LOCK TABLE ... IN EXCLUSIVE MODE`` on
PostgreSQL, so notification ids are assigned in commit order and a reader
following the log can never skip an event committed late. Version conflicts
surface as the library's ``IntegrityError``; other driver errors as its
``OperationalError`` / ``DatabaseError`` (translated to ``chatledger.errors``
by the application service).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    DatabaseError,
    InfrastructureFactory,
    IntegrityError,
    Notification,
    OperationalError,
    ProcessRecorder,
    StoredEvent,
    Subscription,
    TrackingRecorder,
)
from eventsourcing.utils import Environment
from sqlalchemy import (
    BigInteger,
    Column,
    Engine,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    Text,
    Uuid,
    select,
    text,
)

from chatledger.adapters.mapper import JSONBytesTranscoder, PydanticMapper, TimedStoredEvent
from chatledger.domain.session import Session

metadata = MetaData()
_R = TypeVar("_R", bound="_SqlRecorder")

_id_type = BigInteger().with_variant(Integer(), "sqlite")

events_table = Table(
    "chatledger_events",
    metadata,
    Column("id", _id_type, primary_key=True, autoincrement=True),
    Column("originator_id", Uuid(as_uuid=True), nullable=False),
    Column("originator_version", BigInteger, nullable=False),
    Column("topic", Text, nullable=False),
    Column("state", LargeBinary, nullable=False),
    Column("timestamp_us", BigInteger, nullable=False),
    Index("chatledger_events_stream", "originator_id", "originator_version", unique=True),
    sqlite_autoincrement=True,  # never reuse a notification id, even after a delete
)

snapshots_table = Table(
    "chatledger_snapshots",
    metadata,
    Column("originator_id", Uuid(as_uuid=True), primary_key=True),
    Column("originator_version", BigInteger, primary_key=True),
    Column("topic", Text, nullable=False),
    Column("state", LargeBinary, nullable=False),
    Column("timestamp_us", BigInteger, nullable=False),
)


def create_tables(engine: Engine) -> None:
    """Create the store's tables if missing; safe to run from several processes."""
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            # Concurrent CREATE TABLE IF NOT EXISTS races on the catalogue
            # ("tuple concurrently updated"); serialise DDL across processes.
            connection.execute(text("SELECT pg_advisory_xact_lock(7366524411)"))
        metadata.create_all(connection, checkfirst=True)


class _SqlRecorder:
    """Shared plumbing: parameter style, id conversion, error translation."""

    def __init__(self, engine: Engine, table: Table) -> None:
        self.engine = engine
        self.table = table
        self.dialect = engine.dialect.name
        self.dbapi: Any = engine.dialect.loaded_dbapi
        self._mark = "?" if self.dialect == "sqlite" else "%s"
        # SQLite allows one writer at a time anyway; queueing writers of this
        # process on a lock avoids busy-wait retries inside the driver.
        self._write_lock = threading.Lock() if self.dialect == "sqlite" else None
        self._writer: Any = None

    def _id_param(self, originator_id: UUID | str) -> Any:
        value = originator_id if isinstance(originator_id, UUID) else UUID(str(originator_id))
        return value.hex if self.dialect == "sqlite" else value

    def _translate(self, error: Exception) -> Exception:
        if isinstance(error, self.dbapi.IntegrityError):
            return IntegrityError(str(error))
        if isinstance(error, self.dbapi.OperationalError | self.dbapi.InterfaceError):
            return OperationalError(str(error))
        return DatabaseError(str(error))

    def _insert_rows(self, rows: Sequence[StoredEvent], *, lock_sql: str | None) -> list[int]:
        """Insert ``rows`` in one transaction and return their ids, in order."""
        table = self.table.name
        mark = self._mark
        sql = (
            f"INSERT INTO {table} (originator_id, originator_version, topic, state, "
            f"timestamp_us) VALUES ({mark}, {mark}, {mark}, {mark}, {mark})"
        )
        returning = sql + " RETURNING id" if "id" in self.table.c else None
        if self._write_lock is not None:
            with self._write_lock:
                return self._insert_sqlite(sql, returning, rows)
        return self._insert_postgres(sql, returning, rows, lock_sql)

    def _params(self, row: StoredEvent) -> tuple[Any, ...]:
        return (
            self._id_param(row.originator_id),
            row.originator_version,
            row.topic,
            row.state,
            getattr(row, "timestamp_us", 0),
        )

    def _execute_rows(
        self, cursor: Any, sql: str, returning: str | None, rows: Sequence[StoredEvent]
    ) -> list[int]:
        ids: list[int] = []
        for row in rows:
            if returning is None:
                cursor.execute(sql, self._params(row))
            elif self.dialect == "sqlite":
                cursor.execute(sql, self._params(row))
                ids.append(int(cursor.lastrowid))  # the rowid is the notification id
            else:
                cursor.execute(returning, self._params(row))
                ids.append(int(cursor.fetchone()[0]))
        return ids

    def _insert_sqlite(
        self, sql: str, returning: str | None, rows: Sequence[StoredEvent]
    ) -> list[int]:
        # One long-lived writer connection per process (writes are serialised
        # by the lock above anyway) saves a pool checkout on every append.
        if self._writer is None:
            self._writer = self.engine.raw_connection()
        connection = self._writer
        cursor = connection.cursor()
        try:
            cursor.execute("BEGIN IMMEDIATE")
            try:
                ids = self._execute_rows(cursor, sql, returning, rows)
                cursor.execute("COMMIT")
            except BaseException:
                if connection.dbapi_connection.in_transaction:
                    cursor.execute("ROLLBACK")
                raise
        except self.dbapi.Error as error:
            if not isinstance(error, self.dbapi.IntegrityError):
                self._writer = None  # start afresh with a new connection next time
                connection.invalidate()
            raise self._translate(error) from error
        finally:
            cursor.close()
        return ids

    def _insert_postgres(
        self, sql: str, returning: str | None, rows: Sequence[StoredEvent], lock_sql: str | None
    ) -> list[int]:
        connection = self.engine.raw_connection()
        try:
            cursor = connection.cursor()
            try:
                if lock_sql:
                    cursor.execute(lock_sql)
                ids = self._execute_rows(cursor, sql, returning, rows)
                connection.commit()
            except BaseException:
                connection.rollback()
                raise
            finally:
                cursor.close()
        except self.dbapi.Error as error:
            raise self._translate(error) from error
        finally:
            connection.close()
        return ids

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _select(
        self,
        originator_id: UUID | str,
        gt: int | None,
        lte: int | None,
        desc: bool,
        limit: int | None,
    ) -> list[StoredEvent]:
        t = self.table
        oid = originator_id if isinstance(originator_id, UUID) else UUID(str(originator_id))
        query = select(t.c.originator_version, t.c.topic, t.c.state, t.c.timestamp_us).where(
            t.c.originator_id == oid
        )
        if gt is not None:
            query = query.where(t.c.originator_version > gt)
        if lte is not None:
            query = query.where(t.c.originator_version <= lte)
        order = t.c.originator_version.desc() if desc else t.c.originator_version.asc()
        query = query.order_by(order)
        if limit is not None:
            query = query.limit(limit)
        try:
            with self.engine.connect() as connection:
                rows = connection.execute(query).all()
        except Exception as error:
            raise self._translate_any(error) from error
        return [
            TimedStoredEvent(
                originator_id=oid,
                originator_version=int(version),
                topic=topic,
                state=bytes(state),
                timestamp_us=int(timestamp_us),
            )
            for version, topic, state, timestamp_us in rows
        ]

    def _translate_any(self, error: Exception) -> Exception:
        original = getattr(error, "orig", None)
        if isinstance(original, self.dbapi.Error):
            return self._translate(original)
        return OperationalError(str(error))


class SqlSnapshotRecorder(_SqlRecorder, AggregateRecorder):
    """Stores snapshots; a snapshot at a version already stored is ignored."""

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> None:
        # Another process may have stored the same snapshot: equal by construction.
        with contextlib.suppress(IntegrityError):
            self._insert_rows(stored_events, lock_sql=None)

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        return self._select(originator_id, gt, lte, desc, limit)


class SqlEventRecorder(_SqlRecorder, ApplicationRecorder):
    """The application sequence: per-session streams plus one global order."""

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> list[int]:
        if not stored_events:
            return []
        return self._insert_rows(
            stored_events, lock_sql=f"LOCK TABLE {self.table.name} IN EXCLUSIVE MODE"
        )

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        return self._select(originator_id, gt, lte, desc, limit)

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
        t = self.table
        query = select(t.c.id, t.c.originator_id, t.c.originator_version, t.c.topic, t.c.state)
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
            Notification(
                id=int(nid),
                originator_id=oid,
                originator_version=int(version),
                topic=topic,
                state=bytes(state),
            )
            for nid, oid, version, topic, state in rows
        ]

    def max_notification_id(self) -> int | None:
        from sqlalchemy import func

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


class SqlInfrastructureFactory(InfrastructureFactory[TrackingRecorder]):
    """Builds chatledger's recorders on one engine (chosen by the composition root)."""

    def __init__(self, env: Environment, *, engine: Engine) -> None:
        super().__init__(env)
        self.engine = engine
        self._recorders: list[_SqlRecorder] = []

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        if purpose == "snapshots":
            return self._keep(SqlSnapshotRecorder(self.engine, snapshots_table))
        return self._keep(SqlEventRecorder(self.engine, events_table))

    def application_recorder(self) -> ApplicationRecorder:
        return self._keep(SqlEventRecorder(self.engine, events_table))

    def _keep(self, recorder: _R) -> _R:
        self._recorders.append(recorder)
        return recorder

    def tracking_recorder(
        self, tracking_recorder_class: type[TrackingRecorder] | None = None
    ) -> TrackingRecorder:
        raise NotImplementedError("Tracking recorders are not part of the event store.")

    def process_recorder(self) -> ProcessRecorder:
        raise NotImplementedError("Process recorders are not part of the event store.")

    def is_snapshotting_enabled(self) -> bool:
        return True

    def close(self) -> None:
        for recorder in self._recorders:
            recorder.close()
        self.engine.dispose()


class EventStoreApplication(Application[UUID]):
    """The library's application object, wired to chatledger's recorders and mapper.

    Snapshots are taken from the in-memory aggregate that was just saved (the
    library's default re-reads it from the database in a second transaction).
    """

    name = "chatledger"

    def __init__(self, engine: Engine, *, snapshot_interval: int) -> None:
        self._engine = engine
        self.snapshot_interval = snapshot_interval
        super().__init__(env={"AGGREGATE_CACHE_MAXSIZE": "", "IS_SNAPSHOTTING_ENABLED": "y"})

    def construct_factory(self, env: Environment) -> InfrastructureFactory[TrackingRecorder]:
        return SqlInfrastructureFactory(env, engine=self._engine)

    def construct_mapper(self) -> PydanticMapper:
        return PydanticMapper(transcoder=JSONBytesTranscoder())

    @property
    def event_recorder(self) -> SqlEventRecorder:
        recorder = self.recorder
        assert isinstance(recorder, SqlEventRecorder)
        return recorder

    def record(self, session: Session) -> list[int]:
        """Append the session's pending events in one transaction; return their positions.

        On failure the pending events are gone and the aggregate object is ahead
        of the store: the caller must discard it.
        """
        pending = session.collect_events()
        if not pending:
            return []
        stored = [self.mapper.to_stored_event(e) for e in pending]
        positions = self.event_recorder.insert_events(stored)
        first = pending[0].originator_version
        interval = self.snapshot_interval
        if self.snapshots is not None and (first - 1) // interval != session.version // interval:
            self._snapshot(session)
        return positions

    def _snapshot(self, session: Session) -> None:
        assert self.snapshots is not None
        # A snapshot only speeds loading; the events are already safe without it.
        with contextlib.suppress(DatabaseError):
            self.snapshots.put([Session.Snapshot.take(session)])
