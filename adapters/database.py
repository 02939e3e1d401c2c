"""Engines for the supported databases: SQLite (default) and PostgreSQL.

One place decides connection settings: SQLite files run in WAL mode with the
configured ``synchronous`` level and a busy timeout, with the driver in
autocommit mode so that transactions begin explicitly: SQLAlchemy's emit a
plain ``BEGIN`` (reads must not take the write lock) and the event append
takes the write lock with its first statement (``BEGIN IMMEDIATE``, or a
single autocommitted INSERT), so two appenders never deadlock upgrading a read
lock; ``secure_delete`` zeroes what deletes free. PostgreSQL URLs use the
psycopg 3 driver. Bad URLs and missing drivers become ``InvalidSettings``
here; errors of a working engine are translated by the recorders and by
``chatledger.boundary``.
"""

from __future__ import annotations

import random
import sqlite3
import time
from typing import Any, Literal

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.exc import SQLAlchemyError as SQLAlchemyError  # re-exported for the face
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.pool import StaticPool

from chatledger.domain.failures import InvalidSettings

Synchronous = Literal["full", "normal"]


def normalise_url(url: str) -> str:
    """Accept ``postgresql://`` and ``postgres://`` as the psycopg 3 dialect."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


SQLITE_HEADER = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file (an empty file is an empty database)."""


def sqlite_file(url: str) -> str | None:
    """The file a SQLite URL names; ``None`` for other databases and in-memory SQLite."""
    try:
        parsed = make_url(normalise_url(url))
    except ArgumentError:
        return None  # create_store_engine says what is wrong with it
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return None  # in memory, or a URI filename whose mode= the caller chose
    return database


# SQLSTATE classes that say the database could not serve, not that the data was wrong:
# connection exceptions (08), insufficient resources such as "too many clients" (53),
# operator intervention such as a shutdown (57), and system errors (58).
_ENVIRONMENTAL_SQLSTATE = ("08", "53", "57", "58")
# SQLite result codes of the same kind: busy, locked, no memory, I/O error, disk full,
# cannot open, lock protocol.
_ENVIRONMENTAL_SQLITE = {5, 6, 7, 10, 13, 14, 15}


def is_environmental(error: BaseException) -> bool:
    """Whether ``error`` (or anything in its cause chain) says the database could not serve
    -- unreachable, out of connections, busy, out of disk -- rather than that a statement
    was wrong for its data. Such a failure passes when retried later; it is never a reason
    to give up on an event."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, PoolTimeout):
            return True
        if isinstance(current, DBAPIError):
            if current.connection_invalidated:
                return True
            current = current.orig
            continue
        sqlstate = getattr(current, "sqlstate", None)
        if isinstance(sqlstate, str) and sqlstate[:2] in _ENVIRONMENTAL_SQLSTATE:
            return True
        code = getattr(current, "sqlite_errorcode", None)
        if isinstance(current, sqlite3.Error) and isinstance(code, int):
            return code & 0xFF in _ENVIRONMENTAL_SQLITE
        if type(current).__module__.startswith("psycopg") and sqlstate is None:
            return True  # psycopg raises without a SQLSTATE only when no server answered
        current = current.__cause__ or current.__context__
    return False


def driver_message(error: BaseException) -> str:
    """What the database said of a failed statement, and no more: the driver's primary
    message, without the statement, its values or the server's DETAIL (PostgreSQL's shows
    the values of the row at fault, which may be content or key material)."""
    orig = error.orig if isinstance(error, DBAPIError) else error
    diag = getattr(orig, "diag", None)
    primary = getattr(diag, "message_primary", None)
    if isinstance(primary, str) and primary:
        return f"{type(orig).__name__}: {primary}"
    if isinstance(orig, sqlite3.Error):  # SQLite's messages name columns, never values
        return f"{type(orig).__name__}: {orig}"
    return type(orig).__name__


def shares_one_connection(engine: Engine) -> bool:
    """Whether every use of ``engine`` shares one connection (in-memory SQLite): a read
    streamed from it must be read whole before another query runs, or that query would
    begin a transaction inside the stream's."""
    return isinstance(engine.pool, StaticPool)


def is_busy(error: BaseException) -> bool:
    """Whether ``error`` (or anything in its cause chain) is SQLite's "database is locked":
    another connection held the write lock past the busy timeout."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DBAPIError):
            current = current.orig
            continue
        code = getattr(current, "sqlite_errorcode", None)
        if isinstance(current, sqlite3.Error) and isinstance(code, int):
            return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED
        current = current.__cause__ or current.__context__
    return False


def sqlite_in_memory(url: str) -> bool:
    """Whether ``url`` is an in-memory SQLite database (gone when the process exits)."""
    try:
        parsed = make_url(normalise_url(url))
    except ArgumentError:
        return False
    if parsed.get_backend_name() != "sqlite":
        return False
    database = parsed.database or ""
    return database in ("", ":memory:") or "mode=memory" in database


def create_store_engine(
    url: str,
    *,
    synchronous: Synchronous = "normal",
    busy_timeout: float = 10.0,
    wal: bool = True,
) -> Engine:
    """An engine for ``url`` with chatledger's durability and locking settings.

    ``wal``: SQLite connections switch the file to WAL mode as they open (a write).
    An opener that does not know yet whether the file is a ledger passes ``False``:
    reading needs no switch, and a ledger is in WAL mode since it was created.
    """
    url = normalise_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError as error:
        raise InvalidSettings(
            f"Cannot parse database URL {url!r}: use e.g. 'sqlite:///chatledger.db' or "
            "'postgresql+psycopg://user@host/db'."
        ) from error
    backend = parsed.get_backend_name()
    try:
        if backend == "sqlite":
            return _sqlite_engine(url, parsed.database, synchronous, busy_timeout, wal)
        if backend == "postgresql":
            if parsed.get_driver_name() != "psycopg":
                raise InvalidSettings(
                    f"PostgreSQL URLs must use the psycopg 3 driver "
                    f"('postgresql+psycopg://...'), not {parsed.get_driver_name()!r}."
                )
            return create_engine(
                url,
                hide_parameters=True,  # see _sqlite_engine
                pool_pre_ping=True,
                pool_size=5,
                max_overflow=10,
                connect_args={"connect_timeout": max(1, int(busy_timeout))},
            )
    except NoSuchModuleError as error:
        raise InvalidSettings(f"No driver for {url!r}: {error}") from error
    except ModuleNotFoundError as error:
        raise InvalidSettings(
            f"The driver for {backend} is not installed ({error.name}); "
            "for PostgreSQL run: pip install 'chatledger[postgres]'."
        ) from error
    raise InvalidSettings(
        f"Unsupported database {backend!r}: chatledger supports sqlite and postgresql."
    )


def _sqlite_engine(
    url: str, database: str | None, synchronous: Synchronous, busy_timeout: float, wal: bool
) -> Engine:
    in_memory = database in (None, "", ":memory:")
    options: dict[str, Any] = {
        "connect_args": {"check_same_thread": False, "timeout": busy_timeout},
        # A statement's values never go into an error's text (or a log): they are
        # content, and for the key table, key material.
        "hide_parameters": True,
    }
    if in_memory:
        # One shared connection, or every checkout would see a new empty database.
        options["poolclass"] = StaticPool
    engine = create_engine(url, **options)

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        if wal and not in_memory:
            _switch_to_wal(cursor, busy_timeout)
        cursor.execute(f"PRAGMA synchronous={synchronous.upper()}")
        # Zero what deletes and updates free, so a destroyed data key (or a deleted
        # snapshot) leaves nothing behind in the file's free space (docs/erasure.md).
        cursor.execute("PRAGMA secure_delete=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        # With autocommit at the driver level, SQLAlchemy transactions must
        # start explicitly (the documented pysqlite recipe). A connection may
        # ask for BEGIN IMMEDIATE (execution option ``sqlite_begin``) when it
        # will write after reading, so it waits for the lock instead of failing.
        mode = connection.get_execution_options().get("sqlite_begin", "")
        connection.exec_driver_sql(f"BEGIN {mode}".strip())

    return engine


def _switch_to_wal(cursor: Any, busy_timeout: float) -> None:
    """Put the database in WAL mode, waiting out other processes doing the same.

    Switching the journal mode of a fresh file needs an exclusive lock, and
    SQLite reports "database is locked" at once, without its busy handler, when
    another connection is switching it at the same moment: retry until
    ``busy_timeout`` runs out.
    """
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() >= deadline:
                raise
            time.sleep(random.uniform(0.005, 0.05))
