"""The PostgreSQL append path: writers of different sessions never wait for each other.

An append used to take ``LOCK TABLE ... IN EXCLUSIVE MODE`` and hold it
across several round trips and the commit, which serialised every writer
and every fsync. Here nothing global is locked, so commits of concurrent
writers share WAL flushes (group commit) and the database's own row locks
are the only contention:

1. **Number and chain**: give each event a position from the
   ``chatledger_events_position`` sequence and find the hash of the session's
   previous event; then compute the chained hashes here, so that the chain
   covers the position exactly as on SQLite. In the common case -- one event
   of a session this process appended to last -- both are already at hand:
   the head is remembered from that append, and the position is one of the
   spare ones the connection drew earlier. Otherwise one statement, no
   transaction, draws the positions and reads the predecessor's hash.
2. **Write** (one round trip, one autocommitted statement): insert every
   event (several in one statement, through ``unnest``); when the
   connection's spare positions run low, a single insert also draws the
   next ``_SPARES`` of them. The row's ``tx_id`` is filled in by the column
   default (``pg_current_xact_id()``). A single row -- the usual append --
   goes straight to libpq: a statement prepared once per connection, its
   parameters already in PostgreSQL's binary form. psycopg's ``execute``
   costs the client about three times the CPU, and with many writers on a
   few cores that CPU is what limits them, not the server.
3. **Wake the projectors**, after the commit and off the writer's path: a
   thread of this appender sends ``NOTIFY`` on the projectors' channel, an
   autocommitted statement on the appender connection idle longest (appends
   keep to the one they used last: its spare positions are the newest).
   Not in the append's transaction: PostgreSQL
   serialises the commits of all transactions that notify (a database-wide
   lock taken before the commit record and released after its flush, so
   that notifications queue in commit order), which would bring back the
   one-at-a-time fsyncs of the table lock. A notification-only transaction
   writes no WAL, so it commits without waiting for the disk. Appends that
   commit while one is being sent share the next one, and while appends keep
   coming one leaves at most every ``_NOTIFY_GAP`` seconds: an idle follower
   wakes within milliseconds (a busy one polls anyway), and a lost
   notification only costs it a poll interval.

Why the log order stays right without the lock (``schema.LogCursor``
says what the projector does with ``tx_id``): version ``v + 1`` of a session
is only ever written after version ``v`` was seen committed -- read in step
1's snapshot, or remembered from this process's own committed append -- and
gets a position above ``v``'s (drawn after it, or a spare one checked to
be above it) and a transaction id drawn later than ``v``'s. Two writers of one
session are kept apart by the unique (session, version) index: the loser
gets the library's ``IntegrityError``, as does an append from a stale
remembered head, and ``SessionLedger`` reloads and retries. Drawn positions
that end up unused leave gaps; positions say nothing about time across
sessions, only the log order does.

Connections: each append borrows one of this process's own autocommit
connections (detached from the SQLAlchemy pool and kept, so statements stay
prepared) and gives it back; threads appending to different sessions each
get their own. Driver errors leave as the library's ``IntegrityError`` /
``OperationalError`` / ``DatabaseError``; a connection lost during step 2,
when the insert may or may not have committed, as ``OutcomeUnknown``.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple
from uuid import UUID
from weakref import WeakKeyDictionary

from eventsourcing.persistence import DatabaseError, IntegrityError, OperationalError, StoredEvent
from sqlalchemy import Engine, Table
from sqlalchemy import Sequence as DbSequence

from chatledger.adapters.chain import GENESIS, ChainRow, link_hash
from chatledger.adapters.schema import stored_uuid
from chatledger.adapters.store_errors import OutcomeUnknown
from chatledger.projections.facts import StoredFacts

APPEND_CHANNEL = "chatledger_events"
"""PostgreSQL channel notified after appends (see ``append_channel``)."""
_KEPT_HEADS = 10_000  # chain heads of sessions this process appended to
_KEPT_IDLE = 8  # idle connections kept for the next appends
_NOTIFY_GAP = 0.02  # seconds: at most one notification per gap while appends keep coming
_IMPORT_CHUNK = 5000  # rows per statement of an import
_SPARES = 16  # positions a connection draws ahead, with one of its inserts

_OK = (1, 2)  # libpq's PGRES_COMMAND_OK, PGRES_TUPLES_OK
_SQLSTATE = 67  # libpq's PG_DIAG_SQLSTATE field code ("C")
_MISSING_STATEMENT = b"26000"  # SQLSTATE: the named prepared statement is not there
_INSERT_ONE = b"chatledger_append_one"
_INSERT_ONE_DRAWING = b"chatledger_append_one_drawing"
_PACK_INT8 = struct.Struct(">q").pack
_PARAMETERS: dict[str, tuple[int, Callable[[Any], bytes]]] = {
    # the events table's column types: (type OID, the value in PostgreSQL's binary form)
    "BIGINT": (20, _PACK_INT8),
    "UUID": (2950, lambda value: value.bytes),
    "TEXT": (25, str.encode),  # UTF-8; the server refuses a NUL (never sent: values refuse it)
    "BYTEA": (17, bytes),
}

Head = tuple[int, bytes, int]
"""A session's newest event as this process appended it: (version, hash, position)."""


class Numbered(NamedTuple):
    """Events ready to insert: their rows (in insert order), positions and the new chain heads.
    (A named tuple: one per append, cheaper to build than a frozen dataclass.)"""

    rows: list[tuple[Any, ...]]
    positions: list[int]
    heads: dict[int, Head]


class _Writer:
    """One of the appender's connections, its cursor, and the spare positions it drew."""

    def __init__(self, fairy: Any) -> None:
        self.fairy = fairy
        self.cursor: Any = fairy.dbapi_connection.cursor()
        self.spares: list[int] = []  # ascending, not used yet

    def discard(self) -> None:
        self.fairy.invalidate()


class PostgresAppender:
    """Appends events to ``table`` concurrently, numbered from ``sequence`` and hash-chained."""

    def __init__(
        self, engine: Engine, table: Table, sequence: DbSequence, *, chain_key: bytes | None
    ) -> None:
        self.engine = engine
        self.chain_key = chain_key
        self.dbapi: Any = engine.dialect.loaded_dbapi
        self._lock = threading.Lock()
        self._idle: list[_Writer] = []
        self._pid = os.getpid()  # connections and the notifier belong to one process
        self._closed = False
        self.notifier = _Notifier(self._notify)
        self._sql_notify = b""  # NOTIFY on the ledger's channel, once the schema is known
        self._heads: OrderedDict[int, Head] = OrderedDict()  # by UUID.int
        name = table.name
        columns = [c for c in table.columns if c.name != "tx_id"]  # tx_id: the column default
        names = ", ".join(c.name for c in columns)
        draw = f"nextval('{sequence.name}')"
        insert = f"INSERT INTO {name} ({names}) VALUES "
        drawing = f" RETURNING ARRAY(SELECT {draw} FROM generate_series(1, {_SPARES}))"
        self._sql_insert_one = f"{insert}({', '.join(['%s'] * len(columns))})"
        self._sql_insert_one_drawing = self._sql_insert_one + drawing
        # One row goes through libpq itself (``_run``): a statement prepared once per
        # connection, its parameters already in binary form -- a third of the client's
        # CPU of psycopg's ``execute``, which writers sharing a few cores feel.
        types = [_PARAMETERS[c.type.compile(dialect=engine.dialect)] for c in columns]
        self._oids = [oid for oid, _ in types]
        self._encoders = [encode for _, encode in types]
        self._formats = [1] * len(columns)  # binary, every parameter
        one = f"{insert}({', '.join(f'${i}' for i in range(1, len(columns) + 1))})"
        self._pq_statements = {
            _INSERT_ONE: one.encode(),
            _INSERT_ONE_DRAWING: (one + drawing).encode(),
        }
        self._prepared: WeakKeyDictionary[Any, set[bytes]] = WeakKeyDictionary()
        arrays = ", ".join(f"%s::{c.type.compile(dialect=engine.dialect)}[]" for c in columns)
        self._sql_insert_many = f"INSERT INTO {name} ({names}) SELECT * FROM unnest({arrays})"
        self._sql_draw = f"SELECT {draw} FROM generate_series(1, %s)"
        self._sql_hash_of = (
            f"SELECT hash FROM {name} WHERE originator_id = %s AND originator_version = %s"
        )
        self._sql_draw_after = f"SELECT {draw}, ({self._sql_hash_of}) FROM generate_series(1, %s)"
        self._sql_lock = f"LOCK TABLE {name} IN EXCLUSIVE MODE"
        self._sql_any = f"SELECT EXISTS (SELECT 1 FROM {name})"
        self._sql_move_sequence = (
            f"SELECT setval('{sequence.name}', m) FROM (SELECT MAX(id) AS m FROM {name}) s "
            "WHERE m >= (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END "
            f"FROM {sequence.name})"
        )

    # ---------------------------------------------------------------- append
    def append(self, rows: Sequence[StoredEvent]) -> list[int]:
        """Append ``rows`` atomically (one statement); return their positions."""
        writer, reused = self._take()
        try:
            try:
                numbered = self._number(writer, rows)
            except self.dbapi.OperationalError:
                if not reused:
                    raise
                # An idle connection the server dropped (restart, timeout): nothing
                # was written, so number again on a fresh one.
                writer.discard()
                writer, reused = self._take(fresh=True)
                numbered = self._number(writer, rows)
            try:
                drawn = self.insert(writer.cursor, numbered, draw=len(writer.spares) < 2)
            except self.dbapi.Error as error:
                if _lost(writer.fairy.dbapi_connection, error):
                    # The statement commits by itself: it may have, before the answer was lost.
                    raise OutcomeUnknown(str(error)) from error
                raise
            writer.spares.extend(drawn)
        except (self.dbapi.IntegrityError, IntegrityError) as error:
            # Another writer of the session got there first, or a remembered head or
            # spare position was stale: the caller reloads and retries.
            self._forget(rows)
            writer.spares.clear()
            self._give(writer)
            if isinstance(error, IntegrityError):
                raise
            raise IntegrityError(str(error)) from error
        except BaseException as error:
            # The connection's state is unknown (the insert may even have committed):
            # drop it, and the heads of these sessions with it.
            self._forget(rows)
            writer.discard()
            if isinstance(error, self.dbapi.Error):
                raise _translate(self.dbapi, error) from error
            raise
        self._give(writer)
        self._remember(numbered.heads)
        self.notifier.poke()
        return numbered.positions

    def _number(self, writer: _Writer, rows: Sequence[StoredEvent]) -> Numbered:
        """Step 1 without a round trip when the head and a spare position are at hand."""
        spares = writer.spares
        if spares and len(rows) == 1:
            row = rows[0]
            oid = stored_uuid(row.originator_id)
            with self._lock:
                head = self._heads.get(oid.int)
            version = row.originator_version
            if version == 1:
                return self._chain(rows, [spares.pop(0)], {})
            if head is not None and head[0] == version - 1:
                if spares[0] <= head[2]:
                    # Drawn before another connection wrote the head: of no use to this
                    # session, nor (being older) much to others. Dropped, they leave gaps,
                    # and the insert draws fresh ones.
                    del spares[: bisect_right(spares, head[2])]
                if spares:
                    return self._chain(rows, [spares.pop(0)], {(oid.int, head[0]): head[1]})
        return self.number(writer.cursor, rows)

    def number(self, cursor: Any, rows: Sequence[StoredEvent]) -> Numbered:
        """Step 1 in one round trip: draw positions, read unknown predecessors, chain."""
        previous: dict[tuple[int, int], bytes] = {}  # (session, version) -> hash
        wanted: list[tuple[UUID, int]] = []  # predecessors to read from the store
        batch: dict[int, int] = {}  # session -> version of its row before, in this batch
        with self._lock:
            for row in rows:
                oid = stored_uuid(row.originator_id)
                version = row.originator_version
                before = batch.get(oid.int)
                batch[oid.int] = version
                if version == 1 or before == version - 1:
                    continue
                head = self._heads.get(oid.int)
                if head is not None and head[0] == version - 1:
                    previous[(oid.int, head[0])] = head[1]
                else:
                    wanted.append((oid, version - 1))
        for oid, version in wanted[1:]:  # rare: several sessions, none remembered
            cursor.execute(self._sql_hash_of, (oid, version))
            previous[(oid.int, version)] = _predecessor(cursor.fetchone(), oid, version)
        # The positions are drawn after every predecessor was seen committed.
        if wanted:
            oid, version = wanted[0]
            cursor.execute(self._sql_draw_after, (oid, version, len(rows)))
            drawn = cursor.fetchall()
            previous[(oid.int, version)] = _predecessor(drawn[0][1:], oid, version)
        else:
            cursor.execute(self._sql_draw, (len(rows),))
            drawn = cursor.fetchall()
        return self._chain(rows, sorted(int(r[0]) for r in drawn), previous)

    def _chain(
        self,
        rows: Sequence[StoredEvent],
        positions: list[int],
        previous: dict[tuple[int, int], bytes],
    ) -> Numbered:
        heads: dict[int, Head] = {}
        values: list[tuple[Any, ...]] = []
        for row, position in zip(rows, positions, strict=True):
            oid = stored_uuid(row.originator_id)
            version = row.originator_version
            head = heads.get(oid.int)
            if version == 1:
                before = GENESIS
            elif head is not None and head[0] == version - 1:
                before = head[1]
            else:
                before = previous[(oid.int, version - 1)]
            facts: StoredFacts | None = getattr(row, "facts", None)
            if facts is None:
                raise DatabaseError(f"event {version} of {oid} has no stored facts to record")
            timestamp_us = getattr(row, "timestamp_us", 0)
            topic, state = row.topic, row.state
            digest = link_hash(
                before, position, oid.bytes, version, timestamp_us, topic.encode(), state,
                self.chain_key,
            )  # fmt: skip
            values.append((position, oid, version, topic, state, timestamp_us, digest, *facts))
            heads[oid.int] = (version, digest, position)
        return Numbered(values, positions, heads)

    def insert(self, cursor: Any, numbered: Numbered, *, draw: bool = False) -> list[int]:
        """Step 2: insert the numbered rows in one statement; with ``draw``, a single insert
        also draws spare positions for the next appends (returned)."""
        rows = numbered.rows
        if len(rows) > 1:
            cursor.execute(self._sql_insert_many, _columns(rows))
        elif not cursor.connection.autocommit or cursor.connection.pgconn.transaction_status:
            # In a transaction of the caller's (open, or opened by psycopg with the statement).
            cursor.execute(self._sql_insert_one_drawing if draw else self._sql_insert_one, rows[0])
            if draw:
                return sorted(int(p) for p in cursor.fetchone()[0])
        elif draw:
            result = self._run(cursor.connection, _INSERT_ONE_DRAWING, rows[0])
            drawn: bytes = result.get_value(0, 0)  # the array in text form: b"{7,8,9}"
            return sorted(int(p) for p in drawn[1:-1].split(b","))
        else:
            self._run(cursor.connection, _INSERT_ONE, rows[0])
        return []

    def _run(self, connection: Any, statement: bytes, row: tuple[Any, ...]) -> Any:
        """Run a prepared one-row ``statement`` on ``connection``'s libpq connection, which
        is in autocommit mode: the statement is a transaction of its own.

        Prepared on first use on each connection; prepared again if the server
        lost it (a ``DEALLOCATE ALL``, say) -- the statement then did not run.
        Errors leave as psycopg's exceptions, as from ``cursor.execute``.
        """
        try:
            values = [None if v is None else e(v) for e, v in zip(self._encoders, row, strict=True)]
        except (struct.error, TypeError, AttributeError) as error:  # out of range, wrong type
            raise self.dbapi.DataError(f"a value the events table cannot hold: {error}") from error
        pgconn = connection.pgconn
        with self._lock:
            prepared = self._prepared.setdefault(connection, set())
        for attempt in (1, 2):
            if statement not in prepared:
                sql = self._pq_statements[statement]
                self._check(connection, pgconn.prepare(statement, sql, self._oids))
                prepared.add(statement)
            result = pgconn.exec_prepared(statement, values, self._formats)
            if result.status in _OK:
                return result
            if attempt == 1 and result.error_field(_SQLSTATE) == _MISSING_STATEMENT:
                prepared.discard(statement)
                continue
            self._check(connection, result)
        raise AssertionError("unreachable")  # pragma: no cover

    def _check(self, connection: Any, result: Any) -> None:
        if result.status not in _OK:
            raise self.dbapi.errors.error_from_result(result, encoding=connection.info.encoding)

    def _notify(self) -> None:
        """Send one ``NOTIFY`` (autocommitted) on a connection of this appender."""
        with self.lent() as writer:
            connection = writer.fairy.dbapi_connection
            if not self._sql_notify:
                self._sql_notify = f"NOTIFY {append_channel(connection)}".encode()
            self._check(connection, connection.pgconn.exec_(self._sql_notify))

    @contextmanager
    def lent(self) -> Iterator[_Writer]:
        """A connection for other work than appends: the one idle longest, given back as
        such, so that appends keep the one they used last (see ``_take``)."""
        writer, _ = self._take(cold=True)
        try:
            yield writer
        except BaseException:
            writer.discard()
            raise
        self._give(writer, cold=True)

    # ---------------------------------------------------------------- import
    def insert_exported(self, rows: Sequence[ChainRow], facts: Sequence[StoredFacts]) -> None:
        """Insert rows with their original positions and hashes into an empty store, atomically.

        The table is locked for the import (no append may slip in between the
        emptiness check and the rows), and the sequence is moved past the
        imported positions so that later appends draw new ones.
        """
        writer, _ = self._take(fresh=True)
        connection = writer.fairy.dbapi_connection
        try:
            with connection.transaction():
                cursor = writer.cursor
                cursor.execute(self._sql_lock)
                cursor.execute(self._sql_any)
                if cursor.fetchone()[0]:
                    raise IntegrityError("the event store is not empty")
                values = [
                    (
                        r.position, r.originator_id, r.version, r.topic, r.state,
                        r.timestamp_us, r.hash, *f,
                    )
                    for r, f in zip(rows, facts, strict=True)
                ]  # fmt: skip
                for start in range(0, len(values), _IMPORT_CHUNK):
                    chunk = values[start : start + _IMPORT_CHUNK]
                    cursor.execute(self._sql_insert_many, _columns(chunk))
                cursor.execute(self._sql_move_sequence)
                cursor.execute(f"NOTIFY {append_channel(connection)}")  # once, for the import
        except self.dbapi.Error as error:
            lost = _lost(connection, error)
            writer.discard()
            if lost:  # the COMMIT may have been carried out before the answer was lost
                raise OutcomeUnknown(str(error)) from error
            raise _translate(self.dbapi, error) from error
        except BaseException:
            writer.discard()
            raise
        self._give(writer)
        with self._lock:
            self._heads.clear()
            for idle in self._idle:
                idle.spares.clear()  # drawn before the sequence moved: may be taken

    # ----------------------------------------------------------- connections
    def _take(self, *, fresh: bool = False, cold: bool = False) -> tuple[_Writer, bool]:
        """A connection of this appender (autocommit) and whether it was used before.

        Appends take the connection used last (its spare positions are the newest,
        so above the heads it just wrote); ``cold`` takes the one idle longest, which
        is what the notifier borrows, so that it does not come between the two.
        """
        with self._lock:
            if self._pid != os.getpid():
                # A forked child: the parent's connections are not ours to use (nor to
                # close: that would end the parent's sessions). Start afresh.
                self._pid = os.getpid()
                self._idle = []
                self.notifier = _Notifier(self._notify)
            if not fresh and self._idle:
                return self._idle.pop(0 if cold else -1), True
        return _Writer(self._connect()), False

    def _connect(self) -> Any:
        """A new connection of our own (autocommit), translated errors on failure."""
        try:
            fairy = self.engine.raw_connection()
            fairy.detach()  # ours from now on: never handed to the pool in autocommit mode
            connection: Any = fairy.dbapi_connection
            connection.rollback()  # the pool's pre-ping may have opened a transaction
            connection.autocommit = True
        except self.dbapi.Error as error:
            raise _translate(self.dbapi, error) from error
        except Exception as error:  # SQLAlchemy's wrapper of a failed connect
            original = getattr(error, "orig", None)
            if isinstance(original, self.dbapi.Error):
                raise _translate(self.dbapi, original) from error
            raise OperationalError(str(error)) from error
        return fairy

    def _give(self, writer: _Writer, *, cold: bool = False) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < _KEPT_IDLE:
                self._idle.insert(0 if cold else len(self._idle), writer)
                return
        writer.fairy.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        self.notifier.close()
        for writer in idle:
            writer.fairy.close()

    # ------------------------------------------------------------ chain heads
    def _remember(self, heads: dict[int, Head]) -> None:
        with self._lock:
            for stream, head in heads.items():
                self._heads[stream] = head
                self._heads.move_to_end(stream)
            while len(self._heads) > _KEPT_HEADS:
                self._heads.popitem(last=False)

    def _forget(self, rows: Sequence[StoredEvent]) -> None:
        with self._lock:
            for row in rows:
                self._heads.pop(stored_uuid(row.originator_id).int, None)


class _Notifier:
    """Wakes the projectors (``NOTIFY``) after appends commit, from a thread of its own.

    ``send`` sends one notification (on a connection the appender keeps: one
    round trip, no pool checkout, no transaction around it).
    """

    def __init__(self, send: Callable[[], None]) -> None:
        self._send = send
        self._wanted = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def poke(self) -> None:
        """Ask for a notification: sent soon, once for every append poked meanwhile."""
        if not self._wanted.is_set():  # set() takes the event's lock and wakes waiters
            self._wanted.set()
        if self._thread is None:
            with self._lock:
                if self._thread is None and not self._stopping:
                    self._thread = threading.Thread(
                        target=self._run, name="chatledger-notify", daemon=True
                    )
                    self._thread.start()

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            if self._stopping:
                break
            self._wanted.clear()
            try:
                self._send()
            except Exception:
                # A lost notification only delays a follower until its next poll.
                time.sleep(0.1)
            time.sleep(_NOTIFY_GAP)

    def close(self) -> None:
        with self._lock:
            self._stopping = True
            thread = self._thread
        self._wanted.set()
        if thread is not None:
            thread.join(timeout=5)


def append_channel(connection: Any) -> str:
    """The channel (quoted) that appends to the ledger a DB-API ``connection`` sees notify."""
    (schema,) = connection.execute("SELECT current_schema()").fetchone()
    return channel_of(schema)


def channel_of(schema: str | None) -> str:
    """The channel (quoted) of the ledger in ``schema``.

    Channels belong to a database, not to a schema: ledgers in other schemas
    of one database get channels of their own, so they do not wake each
    other's projectors.
    """
    name = APPEND_CHANNEL if schema in (None, "public") else f"{APPEND_CHANNEL}.{schema}"[:63]
    return '"' + name.replace('"', '""') + '"'


def _columns(rows: Sequence[tuple[Any, ...]]) -> list[list[Any]]:
    """Rows turned into one list per column (the arrays ``unnest`` takes)."""
    return [list(column) for column in zip(*rows, strict=True)]


def _predecessor(found: Any, oid: UUID, version: int) -> bytes:
    if found is None or found[0] is None:
        # The predecessor is not there: our copy of the session is stale (or the
        # stream was cut). Signal a conflict so the caller reloads.
        raise IntegrityError(f"no event {version} of {oid} to chain onto")
    return bytes(found[0])


def _lost(connection: Any, error: Exception) -> bool:
    """Whether ``error`` is the connection going away rather than the server refusing the
    statement: then a statement that commits by itself may have committed."""
    if getattr(connection, "broken", False) or getattr(connection, "closed", False):
        return True
    state = getattr(error, "sqlstate", None)
    return state is None or state.startswith(("08", "57P"))


def _translate(dbapi: Any, error: Exception) -> Exception:
    if isinstance(error, dbapi.IntegrityError):
        return IntegrityError(str(error))
    if isinstance(error, dbapi.OperationalError | dbapi.InterfaceError):
        return OperationalError(str(error))
    return DatabaseError(str(error))
