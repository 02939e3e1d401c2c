"""The event store: lean SQLAlchemy recorders behind the library's interfaces.

``eventsourcing-sqlalchemy`` writes through the ORM and reaches about a tenth
of a raw insert rate, which would make the append path the bottleneck. These
recorders implement the library's ``ApplicationRecorder`` /
``AggregateRecorder`` interfaces on SQLAlchemy Core (tables, reads, DDL) and
issue the append itself on a DB-API connection.

The log order -- the one order in which projections apply events -- is
commit order, built differently per database. SQLite has one writer at a
time: one long-lived writer per process, one autocommitted INSERT per event
(several share a ``BEGIN IMMEDIATE`` transaction), positions max + 1, so the
position (``id``) itself is the log order. PostgreSQL appends concurrently
(``chatledger.adapters.append_postgres``): positions come from a sequence,
every row records the transaction that wrote it (``tx_id``), and the log
order is ``(tx_id, id)``, final below the oldest writer still running
(see ``LogCursor`` and ``chatledger.adapters.projector``). Version conflicts
surface as the library's ``IntegrityError``; other driver errors as its
``OperationalError`` / ``DatabaseError`` (translated to ``chatledger.errors``
by the application service).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    DatabaseError,
    InfrastructureFactory,
    IntegrityError,
    MapperDeserialisationError,
    Notification,
    OperationalError,
    ProcessRecorder,
    StoredEvent,
    Subscription,
    TrackingRecorder,
)
from eventsourcing.utils import Environment
from pydantic_core import PydanticSerializationError
from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    Uuid,
    inspect,
    select,
    text,
    type_coerce,
)
from sqlalchemy import Sequence as DbSequence
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import FunctionElement

from chatledger.adapters.append_postgres import PostgresAppender
from chatledger.adapters.chain import GENESIS, ChainRow, chain_hash
from chatledger.adapters.mapper import JSONBytesTranscoder, PydanticMapper, TimedStoredEvent
from chatledger.adapters.migrations import SCHEMA_HEAD, check_schema, prepare_schema
from chatledger.adapters.store_errors import OutcomeUnknown
from chatledger.domain.errors import (
    InvalidInput,
    InvalidSettings,
    LedgerNotFound,
    StoreUnavailable,
)
from chatledger.domain.events import MessageAdded
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.limits import DEFAULT_MAX_EVENT_BYTES
from chatledger.domain.session import Session, replay
from chatledger.projections.archive_events import ARCHIVE_EVENT_TYPES
from chatledger.projections.facts import FACT_COLUMNS, StoredFacts, stored_facts

logger = logging.getLogger("chatledger.store")
metadata = MetaData()
_R = TypeVar("_R", bound="_SqlRecorder")
_KEPT_HEADS = 10_000  # chain heads remembered by the SQLite append fast path
_T = TypeVar("_T")

_id_type = BigInteger().with_variant(Integer(), "sqlite")
CARRIES_ARCHIVES = "event_type IN ({})".format(", ".join(f"'{t}'" for t in ARCHIVE_EVENT_TYPES))
_ON_POSTGRES = "tx_id <> 0"  # never true on SQLite: the log-order indexes stay empty there


class _WritingTransaction(FunctionElement[int]):
    """The default of ``tx_id``: the id of the transaction inserting the row.

    PostgreSQL: ``pg_current_xact_id()`` (64 bits, never wraps), so every
    insert -- the append, an import, a row written by hand -- records it.
    SQLite: 0, since there the position alone is the log order.
    """

    type = BigInteger()
    inherit_cache = True


@compiles(_WritingTransaction)
def _no_transaction(element: _WritingTransaction, compiler: SQLCompiler, **kw: Any) -> str:
    return "0"


@compiles(_WritingTransaction, "postgresql")
def _current_transaction(element: _WritingTransaction, compiler: SQLCompiler, **kw: Any) -> str:
    return "(pg_current_xact_id()::text::bigint)"


position_sequence = DbSequence("chatledger_events_position", metadata=metadata)
"""Where PostgreSQL appends draw positions (SQLite: max + 1 under its write lock)."""

events_table = Table(
    "chatledger_events",
    metadata,
    # The position. The hash chain covers it, so the append assigns it: max + 1
    # under SQLite's write lock, from ``position_sequence`` on PostgreSQL.
    Column("id", _id_type, primary_key=True, autoincrement=False),
    Column("originator_id", Uuid(as_uuid=True), nullable=False),
    Column("originator_version", BigInteger, nullable=False),
    Column("topic", Text, nullable=False),
    Column("state", LargeBinary, nullable=False),
    Column("timestamp_us", BigInteger, nullable=False),
    Column("hash", LargeBinary, nullable=False),
    # Stored facts (chatledger.projections.facts): derived from the event and
    # the session state it leads to, written with it, so read models are kept
    # set-wise in SQL. Not hashed: verify recomputes them by replaying.
    Column("event_type", Text, nullable=False),
    Column("tenant", Text, nullable=False),
    Column("session_key", Text, nullable=False),
    Column("actor_account", Text, nullable=False),
    Column("actor_user", Text, nullable=False),
    Column("actor_agent", Text, nullable=False),
    Column("actor_role", Text, nullable=False),
    Column("trace_id", Text, nullable=False),
    Column("message_count", BigInteger, nullable=False),
    Column("pending_tokens", BigInteger, nullable=False),
    Column("turn_count", BigInteger, nullable=False),
    Column("commit_count", BigInteger, nullable=False),
    Column("archive_count", BigInteger, nullable=False),
    Column("last_commit_us", BigInteger, nullable=True),
    Column("status", Text, nullable=False),
    Column("tool_name", Text, nullable=True),
    Column("tool_status", Text, nullable=True),
    Column("prompt_tokens", BigInteger, nullable=False),
    Column("completion_tokens", BigInteger, nullable=False),
    Column("summary", Text, nullable=False),
    Column("idempotency_key", Text, nullable=True),
    # The transaction that wrote the row (PostgreSQL; 0 on SQLite and for rows
    # written before revision 0004): with the position it makes the log order
    # (see LogCursor). Filled in by the database, never by the append; not
    # hashed and not a fact -- it says when a row joined the log, not what
    # happened. Before the columns of revision 0005, as the migrations add them.
    Column("tx_id", BigInteger, nullable=False, server_default=_WritingTransaction()),
    Column("tool_calls", BigInteger, nullable=True),
    Column("tool_failures", BigInteger, nullable=True),
    Index("chatledger_events_stream", "originator_id", "originator_version", unique=True),
    # The caller's key of a write, unique per session: a retry finds the write.
    Index(
        "chatledger_events_idempotency",
        "originator_id",
        "idempotency_key",
        unique=True,
        sqlite_where=text("idempotency_key IS NOT NULL"),
        postgresql_where=text("idempotency_key IS NOT NULL"),
    ),
    # The session directory: one entry per session (its creation event), by
    # account and key. Partial, so appends other than creations pay nothing.
    Index(
        "chatledger_events_sessions",
        "tenant",
        "session_key",
        sqlite_where=text("originator_version = 1"),
        postgresql_where=text("originator_version = 1"),
    ),
    # Creations by position, and the events that carry archive bodies (about
    # one in a hundred), for the working set and the archive history; partial too.
    Index(
        "chatledger_events_created",
        "id",
        sqlite_where=text("originator_version = 1"),
        postgresql_where=text("originator_version = 1"),
    ),
    Index(
        "chatledger_events_archives",
        "id",
        sqlite_where=text(CARRIES_ARCHIVES),
        postgresql_where=text(CARRIES_ARCHIVES),
    ),
    # The log order (tx_id, id), and the same for creations and archives: what
    # PostgreSQL's projector follows (see LogCursor). On SQLite, where tx_id is
    # always 0 and positions alone are the log order, they index nothing.
    Index("chatledger_events_log", "tx_id", "id", sqlite_where=text(_ON_POSTGRES)),
    Index(
        "chatledger_events_created_log",
        "tx_id",
        "id",
        sqlite_where=text(f"{_ON_POSTGRES} AND originator_version = 1"),
        postgresql_where=text("originator_version = 1"),
    ),
    Index(
        "chatledger_events_archives_log",
        "tx_id",
        "id",
        sqlite_where=text(f"{_ON_POSTGRES} AND {CARRIES_ARCHIVES}"),
        postgresql_where=text(CARRIES_ARCHIVES),
    ),
)
assert tuple(c.name for c in events_table.columns if c.name != "tx_id")[7:] == FACT_COLUMNS


def orders_by_transaction(dialect: str) -> bool:
    """Whether the log order on ``dialect`` is (tx_id, id) -- PostgreSQL -- or the id alone."""
    return dialect == "postgresql"


class LogCursor(NamedTuple):
    """A place in the log: just after the event at ``position``, written by transaction ``tx``.

    The log order is ``(tx, position)``. On SQLite ``tx`` is always 0 and
    positions are assigned in commit order, so the log order is the position
    order and "everything after my cursor" can never miss a late commit.

    On PostgreSQL appends run concurrently and commit in any order, so a
    position says nothing about when its row became visible. What is known:
    every row records its transaction id, transaction ids are handed out in
    time order, and once every writer below some id X has ended no row with
    ``tx < X`` can ever appear again. The projector therefore reads only rows
    with ``tx`` below that horizon -- the oldest running transaction that
    holds a lock on the events table (``EventLog.horizon``) -- in ``(tx,
    position)`` order: that prefix of the log is final, so applying it in
    order never skips, and never reorders, an event. Within one session the
    order is the version order: version ``v + 1`` is written after version
    ``v`` was seen committed, so it draws both a later transaction id and a
    higher position.
    """

    tx: int
    position: int


LOG_START = LogCursor(0, 0)


meta_table = Table(
    "chatledger_meta",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)
"""Name/value facts about the ledger itself (e.g. the check value of its chain key)."""

snapshots_table = Table(
    "chatledger_snapshots",
    metadata,
    Column("originator_id", Uuid(as_uuid=True), primary_key=True),
    Column("originator_version", BigInteger, primary_key=True),
    Column("topic", Text, nullable=False),
    Column("state", LargeBinary, nullable=False),
    Column("timestamp_us", BigInteger, nullable=False),
)


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
        t.c.event_type,
        t.c.actor_account,
        t.c.actor_user,
        t.c.actor_agent,
        t.c.actor_role,
        t.c.trace_id,
        t.c.timestamp_us,
        t.c.summary,
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
        query = query.where(t.c.event_type.in_(list(types)))
    order = (t.c.tx_id, t.c.id) if orders_by_transaction(connection.dialect.name) else (t.c.id,)
    rows = connection.execute(query.order_by(*order).limit(limit).offset(offset))
    return [dict(row) for row in rows.mappings()]


def create_tables(engine: Engine) -> str:
    """Create the store's tables, or upgrade them in place; safe from several processes.

    Runs under the write lock from the start (SQLite: BEGIN IMMEDIATE;
    PostgreSQL: an advisory lock, since concurrent CREATE TABLE IF NOT EXISTS
    races on the catalogue with "tuple concurrently updated"), so processes
    opening a fresh or older database together queue up. Returns what was
    done: ``created``, ``upgraded`` or ``current`` (see ``adapters.migrations``).
    """
    with engine.connect() as plain:
        connection = plain.execution_options(sqlite_begin="IMMEDIATE")
        with connection.begin():
            if engine.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(7366524411)"))
            if inspect(connection).has_table(events_table.name):
                columns = {c["name"] for c in inspect(connection).get_columns(events_table.name)}
                if not {"tenant", "summary"} <= columns:
                    raise StoreUnavailable(
                        f"The table {events_table.name} was created by a development build of "
                        "chatledger before 0.1.0 (it has no stored-facts columns) and cannot be "
                        "opened by this version. Export it with the build that wrote it "
                        "(`chatledger export`) and import the file into a new database."
                    )
            done = prepare_schema(connection, metadata, events_table.name)
    if done == "upgraded":
        logger.warning(
            "Upgraded the ledger's schema at %s in place to revision %s.",
            engine.url.render_as_string(hide_password=True), SCHEMA_HEAD,
        )  # fmt: skip
    return done


def require_tables(engine: Engine) -> None:
    """Raise ``LedgerNotFound`` unless the database holds chatledger's event store."""
    with engine.connect() as connection:
        found = inspect(connection).has_table(events_table.name)
        if found:
            check_schema(connection, events_table.name)
    if not found:
        raise LedgerNotFound(
            f"{engine.url.render_as_string(hide_password=True)} holds no chatledger ledger "
            f"(no table {events_table.name}). Check the URL, or open it once with table "
            "creation on (create_tables=True, the default) to start a new ledger."
        )


CHAIN_KEY_CHECK = "chain_key_check"
_CHECK_MESSAGE = b"chatledger chain key check"
_SAMPLED_SESSIONS = 20


def chain_key_check_value(key: bytes | None) -> str:
    """What ``chatledger_meta`` records of a chain key: reveals nothing of the key, but a
    different key (or none) gives a different value."""
    if not key:
        return "sha256"
    return "hmac-sha256:" + hmac.new(key, _CHECK_MESSAGE, hashlib.sha256).hexdigest()[:32]


def check_chain_key(engine: Engine, key: bytes | None, *, record: bool) -> None:
    """Raise ``InvalidSettings`` if ``key`` is not the key the ledger's chains were written with.

    The ledger records a check value of its key with its first open; a ledger
    written before that (0.1.0) is checked against the hashes of the first
    events of up to 20 sessions, which chain onto nothing but the key. With
    ``record`` the check value is stored if it was missing.
    """
    expected = chain_key_check_value(key)
    t = meta_table
    with engine.connect() as connection:
        stored = connection.execute(select(t.c.value).where(t.c.name == CHAIN_KEY_CHECK)).scalar()
        if stored is None:
            firsts = connection.execute(
                select(
                    events_table.c.id, events_table.c.originator_id, events_table.c.topic,
                    events_table.c.state, events_table.c.timestamp_us, events_table.c.hash,
                )
                .where(events_table.c.originator_version == 1)
                .order_by(events_table.c.id)
                .limit(_SAMPLED_SESSIONS)
            ).all()  # fmt: skip
            if firsts and not any(_opens_chain(row, key) for row in firsts):
                stored = "a different key"
    if stored is not None and stored != expected:
        raise InvalidSettings(
            "The chain key does not match the one this ledger's hash chains were written "
            f"{'with' if stored.startswith('hmac') else 'without (no chain_key)'}: this opener "
            f"uses {'a key' if key else 'none'}. Set chain_key / CHATLEDGER_CHAIN_KEY to the "
            "ledger's own key. (With a wrong key every chain would look tampered and new "
            "events would carry hashes that do not verify.)"
        )
    if record and stored is None:
        with contextlib.suppress(SQLAlchemyError), engine.begin() as connection:
            connection.execute(t.insert().values(name=CHAIN_KEY_CHECK, value=expected))


def _opens_chain(row: Any, key: bytes | None) -> bool:
    position, oid, topic, state, timestamp_us, digest = row
    try:
        recomputed = chain_hash(
            GENESIS,
            position=int(position),
            originator_id=_as_uuid(oid),
            version=1,
            topic=str(topic),
            timestamp_us=int(timestamp_us),
            state=_as_bytes(state),
            key=key,
        )
    except (TypeError, ValueError):
        return False
    return hmac.compare_digest(recomputed, _as_bytes(digest))


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
        self._writer_cursor: Any = None

    def _id_param(self, originator_id: UUID | str) -> Any:
        value = originator_id if isinstance(originator_id, UUID) else UUID(str(originator_id))
        return value.hex if self.dialect == "sqlite" else value

    def _translate(self, error: Exception) -> Exception:
        if isinstance(error, self.dbapi.IntegrityError):
            return IntegrityError(str(error))
        if isinstance(error, self.dbapi.OperationalError | self.dbapi.InterfaceError):
            return OperationalError(str(error))
        return DatabaseError(str(error))

    def _in_write_transaction(self, work: Callable[[Any], _T]) -> _T:
        """Run ``work(cursor)`` in one write transaction and commit it.

        SQLite: one long-lived writer connection per process (writes are
        serialised anyway) and ``BEGIN IMMEDIATE``, so the write lock is held
        from the start. PostgreSQL: a pooled connection. Driver errors come out
        as the library's exceptions.
        """
        if self._write_lock is None:
            return self._in_postgres_transaction(work)
        with self._write_lock:
            if self._writer is None:
                self._writer = self.engine.raw_connection()
            connection = self._writer
            cursor = connection.cursor()
            try:
                cursor.execute("BEGIN IMMEDIATE")
                try:
                    result = work(cursor)
                    cursor.execute("COMMIT")
                except BaseException:
                    if connection.dbapi_connection.in_transaction:
                        cursor.execute("ROLLBACK")
                    raise
            except self.dbapi.Error as error:
                if not isinstance(error, self.dbapi.IntegrityError):
                    self._writer = self._writer_cursor = None  # a new connection next time
                    connection.invalidate()
                raise self._translate(error) from error
            finally:
                cursor.close()
            return result

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
        if self._writer is not None:
            self._writer.close()
            self._writer = self._writer_cursor = None

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        """One stream's rows (events or snapshots) in version order, as the library reads them."""
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


class KeyedRow(NamedTuple):
    """A stored event of a write made with an idempotency key, with what a retry returns."""

    position: int
    version: int
    stored: StoredEvent
    pending_tokens: int


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    return bytes(value) if value is not None else b""


def _as_int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def _as_uuid(value: Any) -> UUID:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        return UUID(int=0)


def _chain_row(
    position: Any,
    oid: Any,
    version: Any,
    topic: Any,
    state: Any,
    timestamp_us: Any,
    digest: Any,
    *,
    facts: tuple[Any, ...] | None = None,
) -> ChainRow:
    """A stored row as the chain sees it; values of the wrong type become impossible ones."""
    return ChainRow(
        position=_as_int(position),
        originator_id=_as_uuid(oid),
        version=_as_int(version),
        topic=str(topic),
        state=_as_bytes(state),
        timestamp_us=_as_int(timestamp_us),
        hash=_as_bytes(digest),
        facts=facts,
    )


class SqlSnapshotRecorder(_SqlRecorder, AggregateRecorder):
    """Stores snapshots; a snapshot at a version already stored is ignored."""

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> None:
        mark = self._mark
        sql = (
            f"INSERT INTO {self.table.name} (originator_id, originator_version, topic, state, "
            f"timestamp_us) VALUES ({mark}, {mark}, {mark}, {mark}, {mark})"
        )

        def insert(cursor: Any) -> None:
            for row in stored_events:
                cursor.execute(
                    sql,
                    (
                        self._id_param(row.originator_id),
                        row.originator_version,
                        row.topic,
                        row.state,
                        getattr(row, "timestamp_us", 0),
                    ),
                )

        # Another process may have stored the same snapshot: equal by construction.
        with contextlib.suppress(IntegrityError):
            self._in_write_transaction(insert)


class SqlEventRecorder(_SqlRecorder, ApplicationRecorder):
    """The application sequence: per-session streams plus one global order.

    Appends go through the SQLite fast path below or, on PostgreSQL, through
    ``chatledger.adapters.append_postgres``; everything else is shared.
    """

    def __init__(self, engine: Engine, table: Table, *, chain_key: bytes | None = None) -> None:
        super().__init__(engine, table)
        self.chain_key = chain_key
        mark = self._mark
        name = table.name
        # tx_id is left to its column default (0 on SQLite).
        columns = [c.name for c in table.columns if c.name != "tx_id"]
        self._sql_insert = (
            f"INSERT INTO {name} ({', '.join(columns)}) VALUES ({', '.join([mark] * len(columns))})"
        )
        self._sql_max_id = f"SELECT COALESCE(MAX(id), 0) FROM {name}"
        self._sql_hash_of = (
            f"SELECT hash FROM {name} WHERE originator_id = {mark} AND originator_version = {mark}"
        )
        # SQLite fast path: the last position this process wrote and the chain
        # heads of sessions it appended to (see _append_sqlite).
        self._position: int | None = None
        self._heads: OrderedDict[int, tuple[int, bytes]] = OrderedDict()  # by UUID.int
        # The PostgreSQL append path (None on SQLite), public for tests that hold
        # an append between its steps.
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
        return self._append_sqlite(stored_events)

    def close(self) -> None:
        super().close()
        if self.postgres is not None:
            self.postgres.close()

    def _append_sqlite(self, rows: Sequence[StoredEvent]) -> list[int]:
        """The SQLite append: one statement per event, and no reads when nothing changed.

        Positions are max + 1 and hashes chain onto the previous event of the
        session. This process remembers the last position and the heads it
        wrote, and trusts them optimistically: if another process appended
        meanwhile, the insert collides with its row -- on the position
        (primary key) or on (session, version) -- and fails as a version
        conflict; the caches are dropped and the caller reloads and retries.
        Because positions have no gaps above any remembered one, a stale
        cache can never slip an event in below a position already visible,
        so readers following the log in id order still miss nothing. A single
        event is one autocommitted INSERT; several share one transaction.
        """
        assert self._write_lock is not None
        with self._write_lock:
            if self._writer is None:
                self._writer = self.engine.raw_connection()
            if self._writer_cursor is None:
                self._writer_cursor = self._writer.dbapi_connection.cursor()
            connection = self._writer
            cursor = self._writer_cursor  # kept open with the connection: one less per append
            batch = len(rows) > 1
            try:
                if batch:
                    cursor.execute("BEGIN IMMEDIATE")
                try:
                    positions, heads = self._append(cursor, rows, self._position, self._heads)
                    if batch:
                        cursor.execute("COMMIT")
                except BaseException:
                    if connection.dbapi_connection.in_transaction:
                        cursor.execute("ROLLBACK")
                    raise
            except self.dbapi.Error as error:
                self._forget_positions()
                if not isinstance(error, self.dbapi.IntegrityError):
                    self._writer = self._writer_cursor = None  # a new connection next time
                    connection.invalidate()
                raise self._translate(error) from error
            except BaseException:
                self._forget_positions()
                raise
            self._position = positions[-1]
            for stream, head in heads.items():
                self._heads[stream] = head
                self._heads.move_to_end(stream)
            while len(self._heads) > _KEPT_HEADS:
                self._heads.popitem(last=False)
            return positions

    def _forget_positions(self) -> None:
        self._position = None
        self._heads.clear()

    def _append(
        self,
        cursor: Any,
        rows: Sequence[StoredEvent],
        position: int | None,
        known: Mapping[int, tuple[int, bytes]],
    ) -> tuple[list[int], dict[int, tuple[int, bytes]]]:
        """Insert ``rows`` chained and numbered (SQLite); returns their positions and new heads.

        ``position`` and ``known`` heads are what the caller believes; unknown
        ones are read.
        """
        if position is None:
            cursor.execute(self._sql_max_id)
            position = int(cursor.fetchone()[0])
        heads: dict[int, tuple[int, bytes]] = {}
        positions: list[int] = []
        for row in rows:
            oid = (
                row.originator_id
                if isinstance(row.originator_id, UUID)
                else UUID(str(row.originator_id))
            )
            stream = oid.int  # dict key: hashing an int skips UUID.__hash__ (Python code)
            version = row.originator_version
            head = heads.get(stream) or known.get(stream)
            if head is None or head[0] != version - 1:
                head = (version - 1, self._hash_of(cursor, oid, version - 1))
            facts: StoredFacts | None = getattr(row, "facts", None)
            if facts is None:
                raise DatabaseError(f"event {version} of {oid} has no stored facts to record")
            position += 1
            timestamp_us = getattr(row, "timestamp_us", 0)
            digest = chain_hash(
                head[1],
                position=position,
                originator_id=oid,
                version=version,
                topic=row.topic,
                timestamp_us=timestamp_us,
                state=row.state,
                key=self.chain_key,
            )
            cursor.execute(
                self._sql_insert,
                (
                    position,
                    self._id_param(oid),
                    version,
                    row.topic,
                    row.state,
                    timestamp_us,
                    digest,
                    *facts,
                ),
            )
            heads[stream] = (version, digest)
            positions.append(position)
        return positions, heads

    def _hash_of(self, cursor: Any, originator_id: UUID, version: int) -> bytes:
        if version == 0:
            return GENESIS
        cursor.execute(self._sql_hash_of, (self._id_param(originator_id), version))
        found = cursor.fetchone()
        if found is None:
            # The predecessor is not there: our copy of the session is stale
            # (or the stream was cut). Signal a conflict so the caller reloads.
            raise IntegrityError(f"no event {version} of {originator_id} to chain onto")
        return bytes(found[0])

    def insert_exported(self, rows: Sequence[ChainRow], facts: Sequence[StoredFacts]) -> None:
        """Insert rows with their original positions and hashes (and facts) into an empty store."""
        if self.postgres is not None:
            self.postgres.insert_exported(rows, facts)
            return

        def insert(cursor: Any) -> None:
            cursor.execute(self._sql_max_id)
            if int(cursor.fetchone()[0]) != 0:
                raise IntegrityError("the event store is not empty")
            for row, row_facts in zip(rows, facts, strict=True):
                cursor.execute(
                    self._sql_insert,
                    (
                        row.position,
                        self._id_param(row.originator_id),
                        row.version,
                        row.topic,
                        row.state,
                        row.timestamp_us,
                        row.hash,
                        *row_facts,
                    ),
                )

        self._in_write_transaction(insert)
        self._forget_positions()

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
                    yield _chain_row(*values[:7], facts=tuple(values[7:]))
        except Exception as error:
            raise self._translate_any(error) from error

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
                t.c.pending_tokens,
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
            )
            for position, version, topic, state, timestamp_us, pending in rows
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
        follows ``chatledger.adapters.projector.EventLog`` instead.
        """
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

    def __init__(self, env: Environment, *, engine: Engine, chain_key: bytes | None) -> None:
        super().__init__(env)
        self.engine = engine
        self.chain_key = chain_key
        self._recorders: list[_SqlRecorder] = []

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        if purpose == "snapshots":
            return self._keep(SqlSnapshotRecorder(self.engine, snapshots_table))
        return self._keep(SqlEventRecorder(self.engine, events_table, chain_key=self.chain_key))

    def application_recorder(self) -> ApplicationRecorder:
        return self._keep(SqlEventRecorder(self.engine, events_table, chain_key=self.chain_key))

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

    def __init__(
        self,
        engine: Engine,
        *,
        snapshot_interval: int,
        chain_key: bytes | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self._engine = engine
        self._chain_key = chain_key
        self.snapshot_interval = snapshot_interval
        self.max_event_bytes = max_event_bytes
        super().__init__(env={"AGGREGATE_CACHE_MAXSIZE": "", "IS_SNAPSHOTTING_ENABLED": "y"})

    def construct_factory(self, env: Environment) -> InfrastructureFactory[TrackingRecorder]:
        return SqlInfrastructureFactory(env, engine=self._engine, chain_key=self._chain_key)

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
        pending = session.collect_changes()
        if not pending:
            return []
        stored = []
        for event, counters in pending:
            row = self._encode(event)
            row.__dict__["facts"] = stored_facts(event, session.tenant, session.key, counters)
            stored.append(row)
        positions = self.event_recorder.insert_events(stored)
        if self.snapshots is not None and session.should_snapshot(self.snapshot_interval):
            self._snapshot(session)
        return positions

    def record_together(self, sessions: Sequence[Session]) -> list[list[int]]:
        """Append the pending events of several sessions in ONE transaction (all or none);
        return each session's positions. Used when a write must change several streams
        atomically (a session and the shared state scopes it updates)."""
        stored = []
        counts = []
        for session in sessions:
            pending = session.collect_changes()
            counts.append(len(pending))
            for event, counters in pending:
                row = self._encode(event)
                row.__dict__["facts"] = stored_facts(event, session.tenant, session.key, counters)
                stored.append(row)
        positions = self.event_recorder.insert_events(stored) if stored else []
        result, start = [], 0
        for session, count in zip(sessions, counts, strict=True):
            result.append(positions[start : start + count])
            start += count
            snapshots = count and self.snapshots is not None
            if snapshots and session.should_snapshot(self.snapshot_interval):
                self._snapshot(session)
        return result

    def _encode(self, event: SessionEvent) -> StoredEvent:
        """The stored form of ``event``, refused (``InvalidInput``) unless it can be kept.

        Input is checked where it enters (``chatledger.domain.limits``); this is
        the last line: the payload must serialise, stay under ``max_event_bytes``,
        and -- for every kind of event but the hot ``MessageAdded``, whose fields
        the input checks cover completely -- decode back into an equal event.
        """
        try:
            row = self.mapper.to_stored_event(event)
        except PydanticSerializationError as error:
            raise InvalidInput(
                f"{type(event).__name__} cannot be serialised ({error}); nothing was recorded."
            ) from None
        size = len(row.state)
        if size > self.max_event_bytes:
            raise InvalidInput(
                f"{type(event).__name__} would take {size} bytes; the limit is "
                f"{self.max_event_bytes} (setting max_event_bytes). Nothing was recorded."
            )
        if type(event) is not MessageAdded:
            try:
                equal = self.mapper.to_domain_event(row) == event
            except MapperDeserialisationError:
                equal = False
            if not equal:
                raise InvalidInput(
                    f"{type(event).__name__} would not read back as recorded (a value JSON "
                    "cannot hold exactly); nothing was recorded."
                )
        return row

    @property
    def snapshot_recorder(self) -> SqlSnapshotRecorder:
        recorder = self.snapshots.recorder if self.snapshots is not None else None
        assert isinstance(recorder, SqlSnapshotRecorder)
        return recorder

    def load(self, session_id: UUID, version: int | None = None) -> Session:
        """A session from its newest snapshot (at or before ``version``) and later events.

        A snapshot is trusted only as a shortcut: its own version must still be
        in the stream (one from beyond the last event would make every later
        write conflict) and it must decode; otherwise the session is replayed
        from its first event and the snapshot is reported in the log. Raises the
        library's ``AggregateNotFoundError`` for an unknown id.
        """
        session: Session | None = None
        start = 0
        newest = self.snapshot_recorder.select_events(session_id, lte=version, desc=True, limit=1)
        if newest:
            snapshot = newest[0]
            try:
                decoded: Any = self.mapper.to_domain_event(snapshot)  # a Session.Snapshot
                session = decoded.mutate(None)
                start = snapshot.originator_version - 1  # read its own event too: is it there?
            except Exception as error:  # any decoding problem: replay instead
                logger.warning(
                    "Snapshot of session %s at version %d cannot be decoded (%s); replaying "
                    "its events instead. verify() reports it.",
                    session_id, snapshot.originator_version, error,
                )  # fmt: skip
                session = None
        rows = self.event_recorder.select_events(session_id, gt=start or None, lte=version)
        if session is not None:
            if not rows or rows[0].originator_version != session.version:
                logger.warning(
                    "Snapshot of session %s at version %d is past its last event; replaying "
                    "its events instead. verify() reports it.",
                    session_id, session.version,
                )  # fmt: skip
                session = None
                rows = self.event_recorder.select_events(session_id, lte=version)
            else:
                rows = rows[1:]
        loaded = replay(session, (self.mapper.to_domain_event(row) for row in rows))
        if loaded is None:
            raise AggregateNotFoundError(f"No session with id {session_id}")
        return loaded

    def snapshot_rows(self, session_id: UUID) -> Sequence[StoredEvent]:
        """A session's stored snapshots, undecoded, oldest first (for verification)."""
        return self.snapshot_recorder.select_events(session_id)

    def _snapshot(self, session: Session) -> None:
        assert self.snapshots is not None
        # A snapshot only speeds loading; the events are already safe without it.
        try:
            self.snapshots.put([Session.Snapshot.take(session)])
        except DatabaseError as error:
            logger.warning("snapshot of session %s at v%d not stored: %s", session.id,
                           session.version, error)  # fmt: skip
            return
        session.rebuilt_from = (session.version, session.state_items)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("snapshot of session %s at v%d", session.id, session.version)
