"""The projector: follows the event log and keeps the read models exactly once.

``EventLog`` reads the store's log order (``LogCursor``: the position on
SQLite, ``(tx_id, id)`` on PostgreSQL): how far a batch reaches, the
stored-facts rows of a span (copied into the read models' database when that
is another one), and the few events that carry archives, decoded (plain JSON
decoding; the full mapper only for records the fast path cannot read:
encrypted, compressed or older class versions).
``Projector`` applies each span to every read model that has not seen it,
**in one transaction with a compare-and-set of each model's tracking
position** (``UPDATE ... SET position = new WHERE name = ? AND position =
old AND version = ?``): the rows and the position commit together or not at
all, so a crash never applies an event twice or skips one, and two
projectors racing on one model cannot both apply a span (the loser's update
matches no row; it rolls back and re-reads).

Following "everything after my cursor" must never miss an event committed
late. On SQLite positions are assigned in commit order (``BEGIN
IMMEDIATE``), so once position N is visible nothing below it can still
appear. On PostgreSQL writers append concurrently and commit in any order;
the log reads only rows whose transaction is older than every writer still
running (``EventLog.horizon``), the prefix of the log that nothing can join
any more, so an append left open delays the read models but never makes
them skip an event (``LogCursor`` has the argument). Nothing here imports
the package face; errors leave as ``chatledger.errors``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.persistence import Mapper
from eventsourcing.utils import get_topic
from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    and_,
    delete,
    func,
    inspect,
    literal,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.exc import SQLAlchemyError

from chatledger.adapters.append_postgres import append_channel
from chatledger.adapters.database import is_busy, is_environmental
from chatledger.adapters.fact_reads import (
    FirstRow,
    event_type_sql,
    fill_tuples,
    first_rows,
    status_sql,
)
from chatledger.adapters.mapper import TimedStoredEvent
from chatledger.adapters.schema import (
    LOG_START,
    LOG_TX_OFFSET_SQL,
    LogCursor,
    carries_archives,
    events_table,
    orders_by_transaction,
    stored_uuid,
)
from chatledger.adapters.sql_read_models import (
    STAGE_COLUMNS,
    Span,
    SqlReadModel,
    read_model_metadata,
    skips_table,
    stage_table,
    tracking_table,
)
from chatledger.domain.events import EVENT_TYPES
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.failures import ChatLedgerError, InvalidInput, StoreUnavailable
from chatledger.domain.timestamps import to_micros
from chatledger.projections.archive_events import (
    ArchiveEvent,
    archive_event_from_event,
    archive_event_from_json,
)

logger = logging.getLogger("chatledger.projector")
_T = TypeVar("_T")
Progress = Callable[[int, int], None]
"""Called after each batch with (events processed so far, log head at start)."""

# Rows of format 1 name their type by module path, rows of format 2 by its name.
_TYPE_BY_TOPIC = {get_topic(cls): cls.__name__ for cls in EVENT_TYPES} | {
    cls.__name__: cls.__name__ for cls in EVENT_TYPES
}
_decode_json = json.JSONDecoder().decode
_DDL_LOCK_KEY = 7366524412
RETIRED_TABLES: dict[str, tuple[str, ...]] = {
    "audit": ("chatledger_audit",),  # the audit log reads the store itself since 0.1.0
    "working_set": ("chatledger_working_set_buffer",),  # stored facts replaced it
}
REBUILD_SPAN = 1_000_000  # events per rebuild transaction, read models next to the ledger
REBUILD_SPAN_STAGED = 50_000  # ... in another database (facts copied through Python)
REBUILD_WAIT = 600.0
"""Seconds a rebuild waits, in all, for the write lock another one holds (SQLite: a span of
a million events can hold it longer than the busy timeout)."""
_HORIZON = f"""
SELECT LEAST(
    pg_snapshot_xmax(pg_current_snapshot()),
    (SELECT MIN(x) FROM pg_snapshot_xip(pg_current_snapshot()) AS x WHERE x::xid IN (
        SELECT w.transactionid FROM pg_locks AS t JOIN pg_locks AS w
            ON w.virtualtransaction = t.virtualtransaction AND w.locktype = 'transactionid'
        WHERE t.locktype = 'relation' AND t.relation = '{events_table.name}'::regclass
            AND t.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    ))
)::text::bigint + {LOG_TX_OFFSET_SQL}
"""
"""PostgreSQL: the log's horizon -- no transaction below it can still add an event (see
``EventLog.horizon``), with the offset ``schema.align_log_order`` keeps."""


@contextmanager
def store_errors(action: str) -> Iterator[None]:
    """Let database errors out as ``StoreUnavailable`` naming what failed."""
    try:
        yield
    except SQLAlchemyError as error:
        detail = str(getattr(error, "orig", None) or error).splitlines()[0][:300]
        raise StoreUnavailable(
            f"Could not {action}: {type(error).__name__}: {detail}. Check the database is "
            "reachable and retry."
        ) from error


class EventLog:
    """The ledger's notification log: spans, their fact rows, their archive events.

    On PostgreSQL (``by_transaction``) every read of the log stops below its
    horizon (``horizon``), so what it returns is final.
    """

    def __init__(self, engine: Engine, mapper: Mapper[UUID]) -> None:
        self.engine = engine
        self.mapper = mapper
        self.by_transaction = orders_by_transaction(engine.dialect.name)
        # Encrypted or compressed states need the mapper for every record.
        self._fast = mapper.cipher is None and mapper.compressor is None

    def head(self) -> int:
        """The position of the newest event the read models can apply (0 for an empty log)."""
        return self.head_cursor().position

    def head_cursor(self) -> LogCursor:
        """Where the log ends (PostgreSQL: its final part, see ``LogCursor``)."""
        return self._last(final=True)

    def visible_end(self) -> LogCursor:
        """Where the log ends including events committed after a transaction still open."""
        return self._last(final=False)

    def _last(self, *, final: bool) -> LogCursor:
        t = events_table
        with store_errors("read the event log"), self.engine.connect() as connection:
            if self.by_transaction:
                query = select(t.c.tx_id, t.c.id).order_by(t.c.tx_id.desc(), t.c.id.desc())
                if final:
                    query = query.where(t.c.tx_id < self.horizon(connection))
            else:
                query = select(literal(0), t.c.id).order_by(t.c.id.desc())
            row = connection.execute(query.limit(1)).first()
        return LOG_START if row is None else LogCursor(int(row[0]), int(row[1]))

    def horizon(self, connection: Connection) -> int:
        """PostgreSQL: a transaction id below which the log is final (``LogCursor``).

        Rows of a transaction still running are invisible, and it may still
        commit rows that sort before visible ones; every later read must
        therefore stop below the oldest such transaction. Only transactions
        that lock the events table can add rows to it, and every writer takes
        that lock (its INSERT, or ``LOCK TABLE``) before it is given a
        transaction id -- chatledger's appends and imports are single-purpose
        transactions -- so the horizon is the oldest running transaction that
        holds (or awaits) a lock on the table, or, with none, the snapshot's
        ``xmax`` (every transaction below it has ended). A transaction that
        writes elsewhere first and only then inserts into the events table by
        hand breaks that rule and could be overtaken. Transactions of other
        tables, schemas or databases never hold the read models back.

        It is taken in a statement of its own, before the rows are read in
        another (each gets a fresh snapshot): a transaction that ended in
        between is visible to the read, which is what makes the bound safe.
        """
        return int(connection.exec_driver_sql(_HORIZON).scalar_one())

    def cursor_of(self, position: int) -> LogCursor | None:
        """The place in the log of the event at ``position`` (None: no such event visible)."""
        if position <= 0:
            return LOG_START
        if not self.by_transaction:
            return LogCursor(0, position)
        t = events_table
        with store_errors("read the event log"), self.engine.connect() as connection:
            tx = connection.execute(select(t.c.tx_id).where(t.c.id == position)).scalar()
        return None if tx is None else LogCursor(int(tx), position)

    def span(self, after: LogCursor, limit: int) -> tuple[int, LogCursor]:
        """(count, last) of the next ``limit`` events after ``after``; (0, after): none."""
        if self.by_transaction:
            return self._final_span(after, limit)
        t = events_table
        later = select(t.c.id).where(t.c.id > after.position)
        with store_errors("read the event log"), self.engine.connect() as connection:
            # A full span: the limit-th id after ``after`` (an index walk, no aggregate).
            last = connection.execute(later.order_by(t.c.id).offset(limit - 1).limit(1)).scalar()
            if last is not None:
                return limit, LogCursor(0, int(last))
            count, last = connection.execute(
                select(func.count(), func.max(t.c.id)).where(t.c.id > after.position)
            ).one()
        return (0, after) if not count else (int(count), LogCursor(0, int(last)))

    def _final_span(self, after: LogCursor, limit: int) -> tuple[int, LogCursor]:
        sql = (
            f"WITH s AS (SELECT tx_id, id FROM {events_table.name} "
            "WHERE (tx_id, id) > (%s, %s) AND tx_id < %s ORDER BY tx_id, id LIMIT %s) "
            "SELECT (SELECT COUNT(*) FROM s), tx_id, id FROM s ORDER BY tx_id DESC, id DESC LIMIT 1"
        )
        with store_errors("read the event log"), self.engine.connect() as connection:
            horizon = self.horizon(connection)  # first: see horizon()
            row = connection.exec_driver_sql(
                sql, (after.tx, after.position, horizon, limit)
            ).first()
        return (0, after) if row is None else (int(row[0]), LogCursor(int(row[1]), int(row[2])))

    def _where(self, mark: str) -> str:
        if self.by_transaction:
            return (
                f"(tx_id, id) > ({mark}, {mark}) AND (tx_id, id) <= ({mark}, {mark}) "
                "ORDER BY tx_id, id"
            )
        return f"id > {mark} AND id <= {mark} ORDER BY id"

    def _bounds(self, after: LogCursor, last: LogCursor) -> tuple[int, ...]:
        if self.by_transaction:
            return (after.tx, after.position, last.tx, last.position)
        return (after.position, last.position)

    def fact_rows(
        self, after: LogCursor, last: LogCursor, *, to_dialect: str
    ) -> list[tuple[Any, ...]]:
        """The span's stored-facts rows in ``STAGE_COLUMNS`` order, as ``to_dialect``'s
        driver takes them (read and written at the driver level: this copies every
        event of a rebuild when the read models live in another database)."""
        mark = "?" if self.engine.dialect.name == "sqlite" else "%s"
        whole = {"event_type": event_type_sql(), "status": status_sql()}
        columns = ", ".join(whole.get(c, c) for c in STAGE_COLUMNS)
        sql = f"SELECT {columns} FROM {events_table.name} WHERE {self._where(mark)}"
        with store_errors("read the event log"), self.engine.connect() as connection:
            found = connection.exec_driver_sql(sql, self._bounds(after, last)).all()
            # Slim rows, whole: the staged copy has no first rows to fill them in from.
            rows = fill_tuples(connection, found, STAGE_COLUMNS)
        session = STAGE_COLUMNS.index("originator_id")
        native = _uuid_text if to_dialect == "sqlite" else stored_uuid
        return [(*r[:session], native(r[session]), *r[session + 1 :]) for r in rows]

    def archive_events(self, after: LogCursor, last: LogCursor) -> list[ArchiveEvent]:
        """The span's events that carry archives (commits, merges, forks), decoded, in order."""
        t = events_table
        within: tuple[ColumnElement[bool], ...]
        order: tuple[ColumnElement[Any], ...]
        if self.by_transaction:
            log = tuple_(t.c.tx_id, t.c.id)
            within = (log > _cursor_sql(after), log <= _cursor_sql(last))
            order = (t.c.tx_id, t.c.id)
        else:
            within = (t.c.id > after.position, t.c.id <= last.position)
            order = (t.c.id,)
        query = (
            select(
                t.c.id, t.c.originator_id, t.c.originator_version, t.c.topic, t.c.state,
                t.c.tenant, t.c.session_key, t.c.timestamp_us,
            )
            # Spelled as the partial index's condition, so the index serves it.
            .where(*within, text(carries_archives(self.engine.dialect.name)))
            .order_by(*order)
        )  # fmt: skip
        with store_errors("read the event log"), self.engine.connect() as connection:
            rows = connection.execute(query).all()
            if any(row[5] == "" for row in rows):  # slim rows: the key is the first row's
                firsts = first_rows(connection, (row[1] for row in rows if row[5] == ""))
                rows = [_with_identity(row, firsts) for row in rows]
        return [self._decode(*row) for row in rows]

    def _decode(
        self,
        position: int,
        oid: UUID,
        version: int,
        topic: str,
        state: bytes,
        tenant: str,
        key: str,
        timestamp_us: int,
    ) -> ArchiveEvent:
        type_name = _TYPE_BY_TOPIC.get(topic)
        if self._fast and type_name is not None:
            try:
                data = _decode_json(bytes(state).decode())
                if "class_version" not in data:
                    return archive_event_from_json(
                        position, oid, version, type_name, tenant, key, data
                    )
            except (KeyError, TypeError, ValueError):
                pass  # not the format this version writes: let the mapper decide
        stored = TimedStoredEvent(
            originator_id=oid,
            originator_version=version,
            topic=topic,
            state=bytes(state),
            timestamp_us=timestamp_us,
        )
        try:
            event = self.mapper.to_domain_event(stored)
            if not isinstance(event, SessionEvent):
                raise TypeError("not a session event")
            return archive_event_from_event(event, position, tenant, key)
        except Exception as error:
            raise StoreUnavailable(
                f"Cannot decode event {position} ({topic}): {error}. Is this chatledger "
                "version older than the one that wrote it?"
            ) from error


SQLITE_MINIMUM = (3, 33, 0)
"""The read models' SQL needs ``UPDATE ... FROM`` (SQLite 3.33) and upserts (3.24)."""


def _check_sqlite_version(engine: Engine) -> None:
    if engine.dialect.name != "sqlite":
        return
    found: tuple[int, ...] = engine.dialect.loaded_dbapi.sqlite_version_info
    if tuple(found) < SQLITE_MINIMUM:
        raise StoreUnavailable(
            f"The read models need SQLite {'.'.join(map(str, SQLITE_MINIMUM))} or newer; "
            f"this Python's sqlite3 module links SQLite {'.'.join(map(str, found))}. Use a "
            "Python built against a newer SQLite, or keep the read models in PostgreSQL "
            "(projections_url)."
        )


def _cursor_sql(cursor: LogCursor) -> ColumnElement[Any]:
    return tuple_(literal(cursor.tx), literal(cursor.position))


def _with_identity(row: Any, firsts: dict[UUID, FirstRow]) -> Any:
    """An ``archive_events`` row with the tenant and key of its session's first row, if
    it is slim (and that first row is there)."""
    first = firsts.get(row[1]) if row[5] == "" else None
    return row if first is None else (*row[:5], first.tenant, first.key, *row[7:])


def _uuid_text(value: Any) -> str:
    """A session id as SQLite stores it (32 hex digits), from either driver's form."""
    return value.hex if isinstance(value, UUID) else str(value)


def _add_cursor_transactions(connection: Connection) -> None:
    """Bring read-model tables of a version before the commit-ordered log up to date.

    Read-model databases are not migrated (``adapters.migrations``), and this
    needs no rebuild: tracking rows get the transaction part of their cursor,
    0, since a stored position ``p`` then meant the place ``(0, p)`` in the
    log (the events of that time have ``tx_id`` 0 too, see revision 0004).
    The staging table is empty between batches: an old one is made again.
    """
    inspector = inspect(connection)
    for table in (tracking_table, stage_table):
        if not inspector.has_table(table.name):
            continue
        if "tx_id" in {c["name"] for c in inspector.get_columns(table.name)}:
            continue
        if table is tracking_table:
            connection.execute(
                text(f"ALTER TABLE {table.name} ADD COLUMN tx_id BIGINT NOT NULL DEFAULT 0")
            )
        else:
            table.drop(connection)


def _error_line(error: BaseException) -> str:
    """An error as one line of at most 1,000 characters (it is stored, and shown to operators)."""
    line = " ".join(str(error).split()) or type(error).__name__
    return line.encode("utf-8", "replace").decode("utf-8").replace("\x00", " ")[:1000]


class _Raced(Exception):
    """Another projector moved a tracking position first; re-read and go on."""


class Projector:
    """Applies the log to read models, exactly once; catch up, follow, rebuild."""

    def __init__(
        self,
        log: EventLog,
        engine: Engine,
        models: Sequence[SqlReadModel],
        *,
        batch_size: int = 5000,
    ) -> None:
        if batch_size < 1:
            raise InvalidInput("batch_size must be >= 1.")
        self.log = log
        self.engine = engine
        # Sharing the ledger's engine, the SQL reads the events table itself.
        self.shared = engine is log.engine
        self.models = {m.name: m for m in models}
        self.batch_size = batch_size
        self._progress = threading.Condition()
        self._positions_seen: dict[str, LogCursor] = {}
        self.wakeup = threading.Event()
        self._stopping = threading.Event()
        self.last_error: ChatLedgerError | None = None

    # ------------------------------------------------------------ set-up
    def prepare(self) -> list[str]:
        """Create missing tables; reset each model whose stored version differs (returned)."""
        for engine in (self.engine, self.log.engine):
            _check_sqlite_version(engine)
        with store_errors("prepare the read models"), self.engine.connect() as connection:
            if self._prepared(connection):  # the usual open: nothing to write, no lock to wait for
                return []
        reset: list[str] = []
        with store_errors("prepare the read models"), self._write() as connection:
            self._ddl_lock(connection)
            _add_cursor_transactions(connection)
            tracking_table.create(connection, checkfirst=True)
            skips_table.create(connection, checkfirst=True)
            if not self.shared:
                stage_table.create(connection, checkfirst=True)
            stored = self._read_tracking(connection)
            self._retire(connection, stored)
            for name, model in self.models.items():
                entry = stored.get(name)
                if entry is None or entry[0] != model.version:
                    self._reset(connection, model, exists=entry is not None)
                    reset.append(name)
                else:
                    for table in model.tables:
                        table.create(connection, checkfirst=True)
        return reset

    def _prepared(self, connection: Connection) -> bool:
        """Whether ``prepare`` has nothing to do: every table there, in its current shape, and
        every model tracked at its current version (read only)."""
        inspector = inspect(connection)
        needed = [tracking_table, skips_table] + ([] if self.shared else [stage_table])
        for table in needed:
            if not inspector.has_table(table.name):
                return False
        for table in (tracking_table, *([] if self.shared else [stage_table])):
            if "tx_id" not in {c["name"] for c in inspector.get_columns(table.name)}:
                return False
        stored = self._read_tracking(connection)
        if set(stored) != set(self.models):
            return False
        for name, model in self.models.items():
            if stored[name][0] != model.version:
                return False
            if not all(inspector.has_table(t.name) for t in model.tables):
                return False
        return True

    def _retire(self, connection: Connection, stored: dict[str, tuple[int, LogCursor]]) -> None:
        """Drop what earlier versions kept and this one does not (their tracking row says so)."""
        t = tracking_table
        for name, (version, _) in stored.items():
            model = self.models.get(name)
            if model is not None and model.version == version:
                continue
            for table in RETIRED_TABLES.get(name, ()):
                connection.execute(text(f"DROP TABLE IF EXISTS {table}"))
            if model is None:
                connection.execute(t.delete().where(t.c.name == name))

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A transaction that writes the read models. On SQLite it takes the write lock as it
        begins (``BEGIN IMMEDIATE``), waiting for another writer -- another projector, a
        rebuild in another process -- as long as the busy timeout allows: a transaction
        that read first and wrote later would fail at once ("database is locked") when
        another writer committed in between."""
        with self.engine.connect() as plain:
            connection = plain.execution_options(sqlite_begin="IMMEDIATE")
            with connection.begin():
                yield connection

    def _ddl_lock(self, connection: Connection) -> None:
        if connection.dialect.name == "postgresql":
            # Concurrent DDL races on PostgreSQL's catalogue; serialise it.
            connection.execute(text(f"SELECT pg_advisory_xact_lock({_DDL_LOCK_KEY})"))

    def _reset(self, connection: Connection, model: SqlReadModel, *, exists: bool) -> None:
        t = tracking_table
        if exists:  # take the tracking row first: a running batch finishes before the drop
            connection.execute(
                update(t)
                .where(t.c.name == model.name)
                .values(version=model.version, position=0, tx_id=0)
            )
        else:
            connection.execute(
                t.insert().values(name=model.name, version=model.version, position=0, tx_id=0)
            )
        if inspect(connection).has_table(skips_table.name):  # a rebuild tries them again
            connection.execute(skips_table.delete().where(skips_table.c.name == model.name))
        for table in reversed(model.tables):
            table.drop(connection, checkfirst=True)
        for table in model.tables:
            table.create(connection)

    def reset(self, names: Sequence[str]) -> None:
        """Drop the named read models' rows (tables dropped and recreated) and rewind them to 0."""
        unknown = [n for n in names if n not in self.models]
        if unknown:
            raise InvalidInput(
                f"Unknown read model(s) {unknown}; choose from {sorted(self.models)}."
            )
        with store_errors("reset the read models"), self._write() as connection:
            self._ddl_lock(connection)
            tracking_table.create(connection, checkfirst=True)
            stored = self._read_tracking(connection)
            for name in self.models:  # always in the same order as batches: no deadlock
                if name in names:
                    self._reset(connection, self.models[name], exists=name in stored)

    def rebuild(
        self,
        names: Sequence[str],
        *,
        progress: Progress | None = None,
        batch_size: int | None = None,
        settle: float = 0.0,
    ) -> int:
        """Reset the named models and replay the whole log into them; returns events read.

        Spans are large (the SQL of a span costs about the same whatever its
        size, and the working set's last span reaches the head, where it looks
        sessions up one by one); smaller when every event's facts must be
        copied into another database through this process. ``settle`` as in
        ``catch_up``.
        """
        deadline = time.monotonic() + REBUILD_WAIT
        self._taking_turns(deadline, lambda: self.reset(names))
        logger.info("rebuilding read models %s from the whole log", ", ".join(names))
        size = batch_size or (REBUILD_SPAN if self.shared else REBUILD_SPAN_STAGED)
        total = 0

        def span_after_span() -> int:
            nonlocal total
            total += self.catch_up(progress=progress, batch_size=size, settle=settle)
            return total

        return self._taking_turns(deadline, span_after_span)

    @staticmethod
    def _taking_turns(deadline: float, step: Callable[[], _T]) -> _T:
        """``step()``, again while the database's write lock stays busy (SQLite: another
        rebuild's transaction may hold it longer than the busy timeout), until
        ``deadline``. Every transaction of a rebuild is whole or absent, and each applies
        its span once (the tracking compare-and-set), so two rebuilds take turns."""
        while True:
            try:
                return step()
            except StoreUnavailable as error:
                if not is_busy(error) or time.monotonic() >= deadline:
                    raise
                logger.info("the read models are being written elsewhere; waiting our turn")
                time.sleep(0.05)

    # ---------------------------------------------------------- tracking
    def _read_tracking(self, connection: Connection) -> dict[str, tuple[int, LogCursor]]:
        t = tracking_table
        rows = connection.execute(select(t.c.name, t.c.version, t.c.tx_id, t.c.position))
        return {
            name: (int(version), LogCursor(int(tx), int(position)))
            for name, version, tx, position in rows
        }

    def cursors(self) -> dict[str, LogCursor]:
        """Each read model's place in the log: just after the last event applied to it."""
        with store_errors("read the projection positions"), self.engine.connect() as connection:
            stored = self._read_tracking(connection)
        cursors = {}
        for name, model in self.models.items():
            entry = stored.get(name)
            ok = entry is not None and entry[0] == model.version
            cursors[name] = entry[1] if entry is not None and ok else LOG_START
        return cursors

    def positions(self) -> dict[str, int]:
        """Each read model's tracking position (the position of the last event applied to it)."""
        return {name: cursor.position for name, cursor in self.cursors().items()}

    def applied(self, position: int) -> bool:
        """Whether every read model has applied the event at ``position`` (False: not yet, or
        no such event is visible)."""
        target = self.log.cursor_of(position)
        return target is not None and min(self.cursors().values()) >= target

    # --------------------------------------------------------- processing
    def catch_up(
        self,
        *,
        progress: Progress | None = None,
        batch_size: int | None = None,
        max_batches: int | None = None,
        settle: float = 0.0,
    ) -> int:
        """Apply every pending event to every read model; returns how many events were read.

        On PostgreSQL an event committed while an older writer is still open
        joins the log only when that writer ends (``LogCursor``).
        With ``settle`` > 0, events already committed when this call began
        are waited for, up to ``settle`` seconds, so that they are applied on
        return unless such a transaction stays open longer; events committed
        later are not waited for. Without it only what is final is applied.
        """
        size = batch_size or self.batch_size
        head = self.log.head() if progress is not None else 0
        target = self.log.visible_end() if settle > 0 and self.log.by_transaction else None
        deadline = time.monotonic() + settle
        pause = 0.001
        total = batches = 0
        while max_batches is None or batches < max_batches:
            try:
                count = self._step(size)
            except _Raced:
                continue
            if count == 0:
                if target is None or self._reached(target) or time.monotonic() >= deadline:
                    break
                time.sleep(pause)  # an older writer is still open: it ends soon, mostly
                pause = min(pause * 2, 0.05)
                continue
            pause = 0.001
            total += count
            batches += 1
            if progress is not None:
                progress(total, head)
        return total

    def _reached(self, target: LogCursor) -> bool:
        with self._progress:
            return self._reached_locked(target)

    def _step(self, size: int) -> int:
        """Apply the next span of up to ``size`` events; narrow down to a poison event.

        A span that fails while the databases answer is retried in halves, so a
        single event that no model can take (a value its SQL cannot hold, a
        payload this version cannot decode) ends up alone, where ``_isolate``
        records it as skipped for the models it fails and lets the others --
        and every later event -- through. A failure with the databases down
        is raised as it is: the follower retries it later.
        """
        cursors = self.cursors()
        low = min(cursors.values())
        count, last = self.log.span(low, size)
        if not count:
            self._publish(cursors)
            return 0
        try:
            self._apply(cursors, low, last, at_head=count < size, names=list(self.models))
        except _Raced:
            raise
        except ChatLedgerError as error:
            if is_environmental(error) or not self._reachable():
                raise
            if count > 1:
                return self._step(max(1, count // 2))
            self._isolate(cursors, low, last)
            self._publish(self.cursors())
            return count
        self._publish(cursors)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("applied %d events up to position %d", count, last.position)
        return count

    def _apply(
        self,
        cursors: dict[str, LogCursor],
        low: LogCursor,
        last: LogCursor,
        *,
        at_head: bool,
        names: Sequence[str],
    ) -> None:
        """Apply the span (``low``, ``last``] to the named models in one transaction, moving
        each one's tracking cursor with a compare-and-set (``cursors`` updated)."""
        moved_to: dict[str, LogCursor] = {}
        with store_errors("update the read models"), self._write() as connection:
            source = events_table.name
            if not self.shared:  # the SQL reads the span's facts from a copy next to the models
                source = stage_table.name
                connection.execute(delete(stage_table))
                dialect = connection.dialect.name
                mark = "?" if dialect == "sqlite" else "%s"
                connection.exec_driver_sql(
                    f"INSERT INTO {stage_table.name} ({', '.join(STAGE_COLUMNS)}) "
                    f"VALUES ({', '.join([mark] * len(STAGE_COLUMNS))})",
                    self.log.fact_rows(low, last, to_dialect=dialect),
                )
            for name, model in self.models.items():  # always in this order: no deadlock
                start = cursors[name]
                if name not in names or start >= last:
                    continue
                self._move(connection, name, start, last)
                span = Span(
                    start, last, source, self.log, self.shared, at_head, self.log.by_transaction
                )
                model.apply(connection, span)
                moved_to[name] = last
            if not self.shared:
                connection.execute(delete(stage_table))
        cursors.update(moved_to)

    def _move(self, connection: Connection, name: str, start: LogCursor, last: LogCursor) -> None:
        t = tracking_table
        moved = connection.execute(
            update(t)
            .where(
                and_(
                    t.c.name == name,
                    t.c.position == start.position,
                    t.c.tx_id == start.tx,
                    t.c.version == self.models[name].version,
                )
            )
            .values(position=last.position, tx_id=last.tx)
        )
        if moved.rowcount != 1:
            raise _Raced  # rolls back: nothing of this span is kept

    def _isolate(self, cursors: dict[str, LogCursor], low: LogCursor, last: LogCursor) -> None:
        """The one event at ``last`` failed: apply it model by model (twice, in case the
        failure passed), and skip it -- recorded in ``chatledger_projection_skips`` --
        only for the models it still fails."""
        for name in self.models:
            if cursors[name] >= last:
                continue
            error: ChatLedgerError | None = None
            for _ in range(2):
                try:
                    self._apply(cursors, low, last, at_head=True, names=[name])
                    error = None
                    break
                except ChatLedgerError as failure:
                    error = failure
            if error is None:
                continue
            if is_environmental(error) or not self._reachable():
                raise error  # the database failed, not the event: the follower retries
            with (
                store_errors("skip an event the read models cannot take"),
                self._write() as connection,
            ):
                self._move(connection, name, cursors[name], last)
                connection.execute(
                    skips_table.insert().values(
                        name=name,
                        position=last.position,
                        error=_error_line(error),
                        skipped_at_us=to_micros(datetime.now(UTC)),
                    )
                )
            cursors[name] = last
            logger.error(
                "Read model %s skipped event %d, which it cannot apply: %s",
                name,
                last.position,
                error,
            )

    def _reachable(self) -> bool:
        """Whether both databases answer a trivial query now."""
        engines = {id(e): e for e in (self.engine, self.log.engine)}
        try:
            for engine in engines.values():
                with engine.connect() as connection:
                    connection.execute(text("SELECT 1"))
        except SQLAlchemyError:
            return False
        return True

    def skipped(self) -> list[dict[str, Any]]:
        """Events a read model skipped because it could not apply them, oldest first."""
        t = skips_table
        with store_errors("read the skipped events"), self.engine.connect() as connection:
            if not inspect(connection).has_table(t.name):
                return []
            rows = connection.execute(select(t).order_by(t.c.position, t.c.name)).mappings()
            return [dict(row) for row in rows]

    def _publish(self, cursors: dict[str, LogCursor]) -> None:
        with self._progress:
            self._positions_seen = dict(cursors)
            self._progress.notify_all()

    # ------------------------------------------------------------- follow
    def wake(self) -> None:
        """Look at the log now instead of at the end of the current back-off."""
        self.wakeup.set()

    def stop(self) -> None:
        """Ask ``run`` to return (it finishes the batch in progress first). A stop asked
        before ``run`` starts counts too: ``run`` then returns at once (see ``resume``)."""
        self._stopping.set()
        self.wakeup.set()

    def resume(self) -> None:
        """Forget an earlier ``stop()``, so that the next ``run`` follows again."""
        self._stopping.clear()

    def run(self, *, min_interval: float = 0.002, max_interval: float = 0.05) -> None:
        """Follow the log until ``stop()``: poll, backing off from min to max while idle.

        On PostgreSQL a listener also wakes the loop as soon as an append
        commits (LISTEN/NOTIFY), so the back-off only bounds the delay when
        notifications are lost; on SQLite the back-off is the latency.
        """
        listener = None
        if self.log.engine.dialect.name == "postgresql":
            listener = threading.Thread(target=self.listen, name="chatledger-listen", daemon=True)
            listener.start()
        try:
            self._follow(min_interval, max_interval)
        finally:
            self._stopping.set()
            if listener is not None:
                listener.join(timeout=5)

    def listen(self) -> None:
        """Wake the follower whenever PostgreSQL notifies an append; reconnect after failures."""
        while not self._stopping.is_set():
            fairy = None
            try:
                fairy = self.log.engine.raw_connection()
                connection: Any = fairy.dbapi_connection
                connection.autocommit = True
                connection.execute(f"LISTEN {append_channel(connection)}")
                self.wakeup.set()  # whatever was appended before LISTEN took effect
                while not self._stopping.is_set():
                    for _ in connection.notifies(timeout=0.5, stop_after=1):
                        self.wakeup.set()
            except Exception:
                self._stopping.wait(1.0)
            finally:
                if fairy is not None:
                    fairy.invalidate()  # never hand a LISTENing connection back to the pool

    def _follow(self, min_interval: float, max_interval: float) -> None:
        delay = min_interval
        while not self._stopping.is_set():
            try:
                count = self.catch_up()
                if self.last_error is not None:
                    logger.info("read models follow the log again")
                self.last_error = None
            except ChatLedgerError as error:  # e.g. the database restarts: keep trying
                if self.last_error is None:
                    logger.warning("read models cannot follow the log (retrying): %s", error)
                self.last_error = error
                count = 0
                delay = max_interval
            if count:
                delay = min_interval
                continue
            woken = self.wakeup.wait(delay)
            self.wakeup.clear()
            delay = min_interval if woken else min(delay * 2, max_interval)

    def wait(self, position: int, timeout: float) -> bool:
        """Block until every read model has applied the event at ``position`` (True) or
        ``timeout`` passes (False), following what the running follower publishes."""
        deadline = time.monotonic() + timeout
        target: LogCursor | None = None
        while True:
            if target is None:  # not visible yet when asked: look again
                target = self.log.cursor_of(position)
            with self._progress:
                if target is not None and self._reached_locked(target):
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._progress.wait(min(remaining, 0.05))

    def _reached_locked(self, target: LogCursor) -> bool:
        seen = self._positions_seen
        return bool(seen) and min(seen.values()) >= target


def create_read_model_tables(engine: Engine) -> None:
    """Create every read-model table (no tracking reset); for migrations and tools."""
    with store_errors("create the read-model tables"), engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text(f"SELECT pg_advisory_xact_lock({_DDL_LOCK_KEY})"))
        read_model_metadata.create_all(connection, checkfirst=True)
