"""The SQLite append path: one writer connection per process, no reads when nothing changed.

SQLite allows one writer at a time, so each process keeps one long-lived
writer connection and queues its own writers on a lock (no busy-wait
retries inside the driver). Positions are max + 1 under the database's
write lock, so on SQLite the position itself is the log order.

The appender remembers the last position it wrote and the chain heads of
the sessions it appended to, and trusts them optimistically: if another
process appended meanwhile, the insert collides with that row -- on the
position (primary key) or on (session, version) -- and fails as a version
conflict; the memory is dropped and the caller reloads and retries.
Because positions have no gaps above any remembered one, a stale memory can
never slip an event in below a position already visible, so readers
following the log in id order still miss nothing. A single event is one
autocommitted INSERT; several share one ``BEGIN IMMEDIATE`` transaction.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import partial
from itertools import compress
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.persistence import DatabaseError, IntegrityError, StoredEvent
from sqlalchemy import Engine, Table

from chatledger.adapters.chain import GENESIS, ChainRow, link_hash
from chatledger.projections.facts import StoredFacts

_T = TypeVar("_T")
_KEPT_HEADS = 10_000  # chain heads remembered between appends
_FACTS_AT = 7  # where a row's stored facts start among its values
# Facts written as SQL literals rather than bound. Stored facts are str, int or None
# (StoredFacts), so 0 here is only ever the integer 0 (False and 0.0 would share its key).
_EMPTY: dict[object, str] = {None: "NULL", "": "''", 0: "0"}
# A session's last version, its hash, and the session id in hex and as bytes.
_Head = tuple[int, bytes, str, bytes]


class SqliteWriter:
    """This process's one writer connection to a SQLite database, behind a lock.

    ``translate`` turns a driver error into the library's exception; a
    connection that failed other than on a constraint is dropped and a new
    one opened next time.
    """

    def __init__(self, engine: Engine, translate: Callable[[Exception], Exception]) -> None:
        self.engine = engine
        self.dbapi: Any = engine.dialect.loaded_dbapi
        self.translate = translate
        self.lock = threading.Lock()
        self._connection: Any = None
        self._cursor: Any = None

    def run(self, work: Callable[[Any], _T], *, transaction: bool = True) -> _T:
        """Run ``work(cursor)`` under the lock; in one ``BEGIN IMMEDIATE`` transaction unless
        ``transaction`` is false (a single autocommitted statement needs none)."""
        with self.lock:
            if self._connection is None:
                self._connection = self.engine.raw_connection()
                self._cursor = self._connection.dbapi_connection.cursor()
            connection, cursor = self._connection, self._cursor
            try:
                if transaction:
                    cursor.execute("BEGIN IMMEDIATE")
                try:
                    result = work(cursor)
                    if transaction:
                        cursor.execute("COMMIT")
                except BaseException:
                    if connection.dbapi_connection.in_transaction:
                        cursor.execute("ROLLBACK")
                    raise
            except self.dbapi.Error as error:
                if not isinstance(error, self.dbapi.IntegrityError):
                    self._connection = self._cursor = None  # a new connection next time
                    connection.invalidate()
                raise self.translate(error) from error
            return result

    def close(self) -> None:
        with self.lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = self._cursor = None


class SqliteAppender:
    """Numbers, chains and inserts events through a ``SqliteWriter`` (see the module doc)."""

    def __init__(self, writer: SqliteWriter, table: Table, *, chain_key: bytes | None) -> None:
        self.writer = writer
        self.chain_key = chain_key
        name = table.name
        # tx_id is left to its column default (0 on SQLite).
        columns = [c for c in table.columns if c.name != "tx_id"]
        self._names = [c.name for c in columns]
        self._sql_insert = (
            f"INSERT INTO {name} ({', '.join(self._names)}) "
            f"VALUES ({', '.join(['?'] * len(columns))})"
        )
        self._table_name = name
        # The INSERT for each pattern of NULL or empty facts, with the values it binds (see
        # _statement).
        self._inserts: dict[tuple[object, ...], tuple[str, tuple[bool, ...]]] = {}
        self._sql_max_id = f"SELECT COALESCE(MAX(id), 0) FROM {name}"
        self._sql_hash_of = (
            f"SELECT hash FROM {name} WHERE originator_id = ? AND originator_version = ?"
        )
        self._position: int | None = None
        self._heads: OrderedDict[int, _Head] = OrderedDict()  # by UUID.int

    def append(self, rows: Sequence[StoredEvent]) -> list[int]:
        """Insert ``rows`` (each with its stored ``facts``), chained; return their positions."""
        try:
            positions, heads = self.writer.run(
                partial(self._insert, rows=rows), transaction=len(rows) > 1
            )
        except BaseException:
            self.forget()
            raise
        self._position = positions[-1]
        known = self._heads
        for stream, head in heads.items():
            known[stream] = head
            known.move_to_end(stream)
        while len(known) > _KEPT_HEADS:
            known.popitem(last=False)
        return positions

    def insert_exported(self, rows: Sequence[ChainRow], facts: Sequence[StoredFacts]) -> None:
        """Insert rows with their original positions and hashes (and facts) into an empty store."""

        def insert(cursor: Any) -> None:
            cursor.execute(self._sql_max_id)
            if int(cursor.fetchone()[0]) != 0:
                raise IntegrityError("the event store is not empty")
            for row, row_facts in zip(rows, facts, strict=True):
                cursor.execute(
                    self._sql_insert,
                    (
                        row.position, row.originator_id.hex, row.version, row.topic, row.state,
                        row.timestamp_us, row.hash, *row_facts,
                    ),
                )  # fmt: skip

        try:
            self.writer.run(insert)
        finally:
            self.forget()

    def forget(self) -> None:
        """Drop what this process remembers of positions and heads (they are read again)."""
        self._position = None
        self._heads.clear()

    def _insert(
        self, cursor: Any, rows: Sequence[StoredEvent]
    ) -> tuple[list[int], dict[int, _Head]]:
        """Insert ``rows`` numbered and chained; return their positions and the new heads.
        Remembered positions and heads are trusted; unknown ones are read."""
        position = self._position
        if position is None:
            cursor.execute(self._sql_max_id)
            position = int(cursor.fetchone()[0])
        known = self._heads
        heads: dict[int, _Head] = {}
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
                head = (version - 1, self._hash_of(cursor, oid, version - 1), oid.hex, oid.bytes)
            facts: StoredFacts | None = getattr(row, "facts", None)
            if facts is None:
                raise DatabaseError(f"event {version} of {oid} has no stored facts to record")
            position += 1
            timestamp_us = getattr(row, "timestamp_us", 0)
            topic, state = row.topic, row.state
            digest = link_hash(
                head[1], position, head[3], version, timestamp_us, topic.encode(), state,
                self.chain_key,
            )  # fmt: skip
            cursor.execute(
                *self._statement(
                    (position, head[2], version, topic, state, timestamp_us, digest, *facts)
                )
            )
            heads[stream] = (version, digest, head[2], head[3])
            positions.append(position)
        return positions, heads

    def _statement(self, values: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
        """The INSERT of one row and the values it binds.

        Python's sqlite3 binds ints, floats and strs directly but runs every
        other value -- ``None``, ``bytes`` -- through its adaptation protocol,
        which costs several times a plain bind (an attribute lookup that fails,
        with its error text formatted and dropped). So facts that are NULL, and
        facts that are empty (``''``, ``0``: most of a slim row), are written as
        literals (one cached statement per pattern of them, a handful in all) and
        the payload and hash are bound as ``bytearray`` (the same BLOB).
        """
        pattern = tuple(map(_EMPTY.get, values[_FACTS_AT:]))
        found = self._inserts.get(pattern)
        if found is None:
            found = self._inserts[pattern] = self._compile(pattern)
        sql, keep = found
        bound = list(compress(values, keep))
        bound[4] = bytearray(bound[4])  # state
        bound[6] = bytearray(bound[6])  # hash
        return sql, tuple(bound)

    def _compile(self, pattern: tuple[str | None, ...]) -> tuple[str, tuple[bool, ...]]:
        marks = ["?"] * _FACTS_AT + [literal or "?" for literal in pattern]
        sql = (
            f"INSERT INTO {self._table_name} ({', '.join(self._names)}) VALUES ({', '.join(marks)})"
        )
        return sql, tuple(mark == "?" for mark in marks)

    def _hash_of(self, cursor: Any, originator_id: UUID, version: int) -> bytes:
        if version == 0:
            return GENESIS
        cursor.execute(self._sql_hash_of, (originator_id.hex, version))
        found = cursor.fetchone()
        if found is None:
            # The predecessor is not there: our copy of the session is stale
            # (or the stream was cut). Signal a conflict so the caller reloads.
            raise IntegrityError(f"no event {version} of {originator_id} to chain onto")
        return bytes(found[0])
