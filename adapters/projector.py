"""The projector: follows the event log and keeps the read models exactly once.

``EventLog`` reads the store's global order (``chatledger_events.id``): how
far a batch reaches, the stored-facts rows of a span (copied into the read
models' database when that is another one), and the few events that carry
archives, decoded (plain JSON decoding; the full mapper only for records the
fast path cannot read: encrypted, compressed or older class versions).
``Projector`` applies each span to every read model that has not seen it,
**in one transaction with a compare-and-set of each model's tracking
position** (``UPDATE ... SET position = new WHERE name = ? AND position =
old AND version = ?``): the rows and the position commit together or not at
all, so a crash never applies an event twice or skips one, and two
projectors racing on one model cannot both apply a span (the loser's update
matches no row; it rolls back and re-reads).

Ids are assigned in commit order by the append (``BEGIN IMMEDIATE`` on
SQLite, ``LOCK TABLE ... IN EXCLUSIVE MODE`` on PostgreSQL), so once id N is
visible no id below N can still appear: following "everything after my
position" cannot miss an event committed late. Nothing here imports the
package face; errors leave as ``chatledger.errors``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Mapper, Notification
from eventsourcing.utils import get_topic
from sqlalchemy import Connection, Engine, and_, delete, func, inspect, select, text, update
from sqlalchemy.exc import SQLAlchemyError

from chatledger.adapters.eventstore import APPEND_CHANNEL, CARRIES_ARCHIVES, events_table
from chatledger.adapters.read_models import (
    STAGE_COLUMNS,
    Span,
    SqlReadModel,
    read_model_metadata,
    skips_table,
    stage_table,
    tracking_table,
)
from chatledger.domain.errors import ChatLedgerError, InvalidInput, StoreUnavailable
from chatledger.domain.events import EVENT_TYPES
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.timestamps import to_micros
from chatledger.projections.archive_events import (
    ArchiveEvent,
    archive_event_from_event,
    archive_event_from_json,
)

logger = logging.getLogger("chatledger.projector")
Progress = Callable[[int, int], None]
"""Called after each batch with (events processed so far, log head at start)."""

_TYPE_BY_TOPIC = {get_topic(cls): cls.__name__ for cls in EVENT_TYPES}
_decode_json = json.JSONDecoder().decode
_DDL_LOCK_KEY = 7366524412
RETIRED_TABLES: dict[str, tuple[str, ...]] = {
    "audit": ("chatledger_audit",),  # the audit log reads the store itself since 0.1.0
    "working_set": ("chatledger_working_set_buffer",),  # stored facts replaced it
}
REBUILD_SPAN = 1_000_000  # events per rebuild transaction, read models next to the ledger
REBUILD_SPAN_STAGED = 50_000  # ... in another database (facts copied through Python)


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
    """The ledger's notification log: spans, their fact rows, their archive events."""

    def __init__(self, engine: Engine, mapper: Mapper[UUID]) -> None:
        self.engine = engine
        self.mapper = mapper
        # Encrypted or compressed states need the mapper for every record.
        self._fast = mapper.cipher is None and mapper.compressor is None

    def head(self) -> int:
        """The position of the newest event (0 for an empty log)."""
        t = events_table
        with store_errors("read the event log"), self.engine.connect() as connection:
            value = connection.execute(select(t.c.id).order_by(t.c.id.desc()).limit(1)).scalar()
        return 0 if value is None else int(value)

    def span(self, after: int, limit: int) -> tuple[int, int]:
        """(count, last position) of the next ``limit`` events after ``after``; (0, after): none."""
        t = events_table
        later = select(t.c.id).where(t.c.id > after)
        with store_errors("read the event log"), self.engine.connect() as connection:
            # A full span: the limit-th id after ``after`` (an index walk, no aggregate).
            last = connection.execute(later.order_by(t.c.id).offset(limit - 1).limit(1)).scalar()
            if last is not None:
                return limit, int(last)
            count, last = connection.execute(
                select(func.count(), func.max(t.c.id)).where(t.c.id > after)
            ).one()
        return (0, after) if not count else (int(count), int(last))

    def fact_rows(self, after: int, last: int, *, to_dialect: str) -> list[tuple[Any, ...]]:
        """The span's stored-facts rows in ``STAGE_COLUMNS`` order, as ``to_dialect``'s
        driver takes them (read and written at the driver level: this copies every
        event of a rebuild when the read models live in another database)."""
        mark = "?" if self.engine.dialect.name == "sqlite" else "%s"
        sql = (
            f"SELECT {', '.join(STAGE_COLUMNS)} FROM {events_table.name} "
            f"WHERE id > {mark} AND id <= {mark} ORDER BY id"
        )
        with store_errors("read the event log"), self.engine.connect() as connection:
            rows = connection.exec_driver_sql(sql, (after, last)).all()
        session = STAGE_COLUMNS.index("originator_id")
        native = _uuid_text if to_dialect == "sqlite" else _uuid_value
        return [(*r[:session], native(r[session]), *r[session + 1 :]) for r in rows]

    def archive_events(self, after: int, last: int) -> list[ArchiveEvent]:
        """The span's events that carry archives (commits, merges, forks), decoded, in order."""
        t = events_table
        query = (
            select(
                t.c.id, t.c.originator_id, t.c.originator_version, t.c.topic, t.c.state,
                t.c.tenant, t.c.session_key,
            )
            # Spelled as the partial index's condition, so the index serves it.
            .where(t.c.id > after, t.c.id <= last, text(CARRIES_ARCHIVES))
            .order_by(t.c.id)
        )  # fmt: skip
        with store_errors("read the event log"), self.engine.connect() as connection:
            rows = connection.execute(query).all()
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
        notification = Notification(
            id=position,
            originator_id=oid,
            originator_version=version,
            topic=topic,
            state=bytes(state),
        )
        try:
            event = self.mapper.to_domain_event(notification)
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


def _uuid_text(value: Any) -> str:
    """A session id as SQLite stores it (32 hex digits), from either driver's form."""
    return value.hex if isinstance(value, UUID) else str(value)


def _uuid_value(value: Any) -> UUID:
    """A session id as PostgreSQL's driver takes it, from either driver's form."""
    return value if isinstance(value, UUID) else UUID(str(value))


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
        self._positions_seen: dict[str, int] = {}
        self.wakeup = threading.Event()
        self._stopping = threading.Event()
        self.last_error: ChatLedgerError | None = None

    # ------------------------------------------------------------ set-up
    def prepare(self) -> list[str]:
        """Create missing tables; reset each model whose stored version differs (returned)."""
        for engine in (self.engine, self.log.engine):
            _check_sqlite_version(engine)
        reset: list[str] = []
        with store_errors("prepare the read models"), self.engine.begin() as connection:
            self._ddl_lock(connection)
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

    def _retire(self, connection: Connection, stored: dict[str, tuple[int, int]]) -> None:
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

    def _ddl_lock(self, connection: Connection) -> None:
        if connection.dialect.name == "postgresql":
            # Concurrent DDL races on PostgreSQL's catalogue; serialise it.
            connection.execute(text(f"SELECT pg_advisory_xact_lock({_DDL_LOCK_KEY})"))

    def _reset(self, connection: Connection, model: SqlReadModel, *, exists: bool) -> None:
        t = tracking_table
        if exists:  # take the tracking row first: a running batch finishes before the drop
            connection.execute(
                update(t).where(t.c.name == model.name).values(version=model.version, position=0)
            )
        else:
            connection.execute(
                t.insert().values(name=model.name, version=model.version, position=0)
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
        with store_errors("reset the read models"), self.engine.begin() as connection:
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
    ) -> int:
        """Reset the named models and replay the whole log into them; returns events read.

        Spans are large (the SQL of a span costs about the same whatever its
        size, and the working set's last span reaches the head, where it looks
        sessions up one by one); smaller when every event's facts must be
        copied into another database through this process.
        """
        self.reset(names)
        logger.info("rebuilding read models %s from the whole log", ", ".join(names))
        size = batch_size or (REBUILD_SPAN if self.shared else REBUILD_SPAN_STAGED)
        return self.catch_up(progress=progress, batch_size=size)

    # ---------------------------------------------------------- tracking
    def _read_tracking(self, connection: Connection) -> dict[str, tuple[int, int]]:
        t = tracking_table
        rows = connection.execute(select(t.c.name, t.c.version, t.c.position))
        return {name: (int(version), int(position)) for name, version, position in rows}

    def positions(self) -> dict[str, int]:
        """Each read model's tracking position (the last event applied to it)."""
        with store_errors("read the projection positions"), self.engine.connect() as connection:
            stored = self._read_tracking(connection)
        positions = {}
        for name, model in self.models.items():
            entry = stored.get(name)
            positions[name] = entry[1] if entry is not None and entry[0] == model.version else 0
        return positions

    # --------------------------------------------------------- processing
    def catch_up(
        self,
        *,
        progress: Progress | None = None,
        batch_size: int | None = None,
        max_batches: int | None = None,
    ) -> int:
        """Apply every pending event to every read model; returns how many events were read."""
        size = batch_size or self.batch_size
        head = self.log.head() if progress is not None else 0
        total = batches = 0
        while max_batches is None or batches < max_batches:
            try:
                count = self._step(size)
            except _Raced:
                continue
            if count == 0:
                break
            total += count
            batches += 1
            if progress is not None:
                progress(total, head)
        return total

    def _step(self, size: int) -> int:
        """Apply the next span of up to ``size`` events; narrow down to a poison event.

        A span that fails while the databases answer is retried in halves, so a
        single event that no model can take (a value its SQL cannot hold, a
        payload this version cannot decode) ends up alone, where ``_isolate``
        records it as skipped for the models it fails and lets the others --
        and every later event -- through. A failure with the databases down
        is raised as it is: the follower retries it later.
        """
        positions = self.positions()
        low = min(positions.values())
        count, last = self.log.span(low, size)
        if not count:
            self._publish(positions)
            return 0
        try:
            self._apply(positions, low, last, at_head=count < size, names=list(self.models))
        except _Raced:
            raise
        except ChatLedgerError:
            if not self._reachable():
                raise
            if count > 1:
                return self._step(max(1, count // 2))
            self._isolate(positions, low, last)
            self._publish(self.positions())
            return count
        self._publish(positions)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("applied %d events up to position %d", count, last)
        return count

    def _apply(
        self,
        positions: dict[str, int],
        low: int,
        last: int,
        *,
        at_head: bool,
        names: Sequence[str],
    ) -> None:
        """Apply the span (``low``, ``last``] to the named models in one transaction, moving
        each one's tracking position with a compare-and-set (``positions`` updated)."""
        moved_to: dict[str, int] = {}
        with store_errors("update the read models"), self.engine.begin() as connection:
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
                start = positions[name]
                if name not in names or start >= last:
                    continue
                self._move(connection, name, start, last)
                model.apply(connection, Span(start, last, source, self.log, self.shared, at_head))
                moved_to[name] = last
            if not self.shared:
                connection.execute(delete(stage_table))
        positions.update(moved_to)

    def _move(self, connection: Connection, name: str, start: int, last: int) -> None:
        t = tracking_table
        moved = connection.execute(
            update(t)
            .where(
                and_(
                    t.c.name == name,
                    t.c.position == start,
                    t.c.version == self.models[name].version,
                )
            )
            .values(position=last)
        )
        if moved.rowcount != 1:
            raise _Raced  # rolls back: nothing of this span is kept

    def _isolate(self, positions: dict[str, int], low: int, last: int) -> None:
        """The one event at ``last`` failed: apply it model by model (twice, in case the
        failure passed), and skip it -- recorded in ``chatledger_projection_skips`` --
        only for the models it still fails."""
        for name in self.models:
            if positions[name] >= last:
                continue
            error: ChatLedgerError | None = None
            for _ in range(2):
                try:
                    self._apply(positions, low, last, at_head=True, names=[name])
                    error = None
                    break
                except ChatLedgerError as failure:
                    error = failure
            if error is None:
                continue
            if not self._reachable():
                raise error
            with (
                store_errors("skip an event the read models cannot take"),
                self.engine.begin() as connection,
            ):
                self._move(connection, name, positions[name], last)
                connection.execute(
                    skips_table.insert().values(
                        name=name,
                        position=last,
                        error=_error_line(error),
                        skipped_at_us=to_micros(datetime.now(UTC)),
                    )
                )
            positions[name] = last
            logger.error(
                "Read model %s skipped event %d, which it cannot apply: %s", name, last, error
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

    def _publish(self, positions: dict[str, int]) -> None:
        with self._progress:
            self._positions_seen = dict(positions)
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
                connection.execute(f"LISTEN {APPEND_CHANNEL}")
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
        """Block until every read model has applied ``position`` (True) or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        with self._progress:
            while True:
                seen = self._positions_seen
                if seen and min(seen.values()) >= position:
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._progress.wait(min(remaining, 0.05))


def create_read_model_tables(engine: Engine) -> None:
    """Create every read-model table (no tracking reset); for migrations and tools."""
    with store_errors("create the read-model tables"), engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text(f"SELECT pg_advisory_xact_lock({_DDL_LOCK_KEY})"))
        read_model_metadata.create_all(connection, checkfirst=True)
