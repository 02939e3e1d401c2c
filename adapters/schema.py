"""The event store's tables, the log order, and creating or upgrading them.

``chatledger_events`` holds every event of every session: its position, its
stream (session id and version), its serialised payload, its hash, and the
stored facts the read models are built from (``chatledger.projections.facts``).
The log -- the one order in which projections apply events -- is commit
order, built differently per database: on SQLite positions are assigned in
commit order (``chatledger.adapters.append_sqlite``), on PostgreSQL every row
records the transaction that wrote it and the log order is ``(tx_id, id)``
(``chatledger.adapters.append_postgres``, ``LogCursor``).
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple
from uuid import UUID

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
    delete,
    insert,
    inspect,
    text,
)
from sqlalchemy import Sequence as DbSequence
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import FunctionElement

from chatledger.adapters.migrations import SCHEMA_HEAD, check_schema, prepare_schema
from chatledger.domain.failures import LedgerNotFound, StoreUnavailable
from chatledger.projections.archive_events import ARCHIVE_EVENT_TYPES
from chatledger.projections.facts import FACT_COLUMNS

logger = logging.getLogger("chatledger.store")
metadata = MetaData()

_id_type = BigInteger().with_variant(Integer(), "sqlite")
CARRIES_ARCHIVES = "event_type IN ({})".format(", ".join(f"'{t}'" for t in ARCHIVE_EVENT_TYPES))
# The same condition as SQLite's partial indexes spell it (revision 0008): SQLite tests an
# IN list by building a temporary table of it on every INSERT, a few comparisons cost less.
CARRIES_ARCHIVES_SQLITE = "({})".format(
    " OR ".join(f"event_type = '{t}'" for t in ARCHIVE_EVENT_TYPES)
)


def stored_uuid(value: Any) -> UUID:
    """A session id as read from either driver: PostgreSQL's gives a ``UUID``, SQLite's
    the 32 hex digits it stores (``ValueError`` if it is neither)."""
    return value if isinstance(value, UUID) else UUID(str(value))


def carries_archives(dialect: str) -> str:
    """The condition of the archive-carrying events, spelled as the dialect's partial
    indexes spell it (so that they serve a query that uses it)."""
    return CARRIES_ARCHIVES_SQLITE if dialect == "sqlite" else CARRIES_ARCHIVES


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
    return _writing_transaction(0)


_CURRENT_XACT = "pg_current_xact_id()::text::bigint"  # PostgreSQL: this transaction's id


def _writing_transaction(offset: int) -> str:
    """PostgreSQL: the ``tx_id`` of a row inserted now (see ``align_log_order``)."""
    return f"({_CURRENT_XACT} + {offset})" if offset else f"({_CURRENT_XACT})"


LOG_TX_OFFSET = "log_tx_offset"
"""The ``chatledger_meta`` entry holding what is added to transaction ids (PostgreSQL)."""
LOG_TX_OFFSET_SQL = (
    "COALESCE((SELECT CAST(value AS BIGINT) FROM chatledger_meta "
    f"WHERE name = '{LOG_TX_OFFSET}'), 0)"
)
"""SQL: the offset in force (0 unless ``align_log_order`` ever moved it)."""


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
    # set-wise in SQL. Not hashed: verify recomputes them by replaying. A row
    # after a session's first may be slim: what the first row or the topic says
    # is left empty (read whole through chatledger.adapters.fact_reads).
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
        sqlite_where=text(CARRIES_ARCHIVES_SQLITE),
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
        sqlite_where=text(f"{_ON_POSTGRES} AND {CARRIES_ARCHIVES_SQLITE}"),
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

keys_table = Table(
    "chatledger_keys",
    metadata,
    Column("key_id", String(64), primary_key=True),
    Column("scope", String(16), nullable=False),  # "session" or "user"
    Column("tenant", Text, nullable=False),
    Column("user_id", Text, nullable=False),
    Column("session_id", Uuid(as_uuid=True), nullable=True),  # scope "session"
    Column("material", LargeBinary, nullable=True),  # NULL once destroyed
    Column("created_at_us", BigInteger, nullable=False),
    Column("destroyed_at_us", BigInteger, nullable=True),
    # One key per session, ever (a destroyed one is never replaced: the session is erased).
    Index(
        "chatledger_keys_session",
        "session_id",
        unique=True,
        sqlite_where=text("scope = 'session'"),
        postgresql_where=text("scope = 'session'"),
    ),
    # One live key per user of an account (after erasure a new one may start).
    Index(
        "chatledger_keys_user",
        "tenant",
        "user_id",
        unique=True,
        sqlite_where=text("scope = 'user' AND destroyed_at_us IS NULL"),
        postgresql_where=text("scope = 'user' AND destroyed_at_us IS NULL"),
    ),
    Index("chatledger_keys_owner", "tenant", "user_id"),
)
"""The data keys of session content (``chatledger.adapters.key_store.SqlKeyStore``;
revision 0007)."""


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
            if engine.dialect.name == "postgresql":
                align_log_order(connection)
    if done == "upgraded":
        logger.warning(
            "Upgraded the ledger's schema at %s in place to revision %s.",
            engine.url.render_as_string(hide_password=True), SCHEMA_HEAD,
        )  # fmt: skip
    return done


def align_log_order(connection: Connection) -> int | None:
    """PostgreSQL: make the rows inserted from now on sort after every stored one in the
    log order (``LogCursor``); returns the new offset if it had to move, else None.

    A row's ``tx_id`` is its writing transaction's id (plus an offset, 0 at first).
    A database restored from a dump into another server, or moved to one, keeps
    the ids of the server that wrote it, which may lie ahead of the new server's:
    new rows would then sort before old ones, and the projector, which reads only
    below the oldest transaction still running, would wait for them forever.
    Here the offset is raised so that the next transaction id, plus it, lies
    above the newest stored ``tx_id``: the column default and the projector's
    horizon both add it (it is kept in ``chatledger_meta``). Runs under the
    opener's lock; the ``ALTER TABLE`` waits for appends in flight, so none of
    them is written with the old offset after the new one is in force.
    """
    events = events_table.name
    found = connection.exec_driver_sql(f"SELECT MAX(tx_id) FROM {events} WHERE tx_id <> 0")
    newest = found.scalar()
    if newest is None:
        return None
    newest = int(newest)
    offset = int(connection.exec_driver_sql(f"SELECT {LOG_TX_OFFSET_SQL}").scalar_one())
    now = int(connection.exec_driver_sql(f"SELECT {_CURRENT_XACT}").scalar_one())
    if now + offset > newest:
        return None
    offset = newest - now + 1
    connection.exec_driver_sql(
        f"ALTER TABLE {events} ALTER COLUMN tx_id SET DEFAULT {_writing_transaction(offset)}"
    )
    t = meta_table
    connection.execute(delete(t).where(t.c.name == LOG_TX_OFFSET))
    connection.execute(insert(t).values(name=LOG_TX_OFFSET, value=str(offset)))
    logger.warning(
        "The stored transaction ids run ahead of this PostgreSQL server's (a database "
        "restored or moved from another server): new events are numbered after them "
        "(offset %d), so the read models keep following the log.", offset,
    )  # fmt: skip
    return offset


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
