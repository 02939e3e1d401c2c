"""Nothing readable survives erasure in the database files: scans of the raw bytes.

What is scanned, and why it proves the point (docs/erasure.md, "Proving erasure"):

* SQLite: the database file and its write-ahead log, byte for byte.
* PostgreSQL: every relation file of the ledger's schema -- tables, their TOAST
  tables and indexes, and every file they had before (a table rewrite moves it
  to a new file) -- read with ``pg_read_binary_file`` after a ``CHECKPOINT``
  has written every dirty page to them.

Content is encrypted before it reaches the database, so a known plaintext is
never in those bytes (a ledger with ``encryption=False`` is the control that
the scan does find plaintext). What must go is the data key: it is in the
bytes before erasure (the control that the scan finds keys) and nowhere after.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from chatledger import SessionLedger
from erasure_support import SECRET, fill
from support import ALICE


@pytest.fixture
def make_ledger(make_ledger: Callable[..., SessionLedger]) -> Callable[..., SessionLedger]:
    """Ledgers on the test database with encryption on (the default is off)."""
    return functools.partial(make_ledger, encryption=True)


def _sqlite_bytes(url: str) -> bytes:
    path = Path(url.removeprefix("sqlite:///"))
    return b"".join(p.read_bytes() for p in (path, Path(f"{path}-wal")) if p.exists())


_RELATION_FILES = (
    "SELECT pg_relation_filepath(c.oid) FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i', 'S') "
    "UNION SELECT pg_relation_filepath(c.reltoastrelid) FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = current_schema() AND c.reltoastrelid <> 0"
)


class PostgresFiles:
    """The relation files of the test's schema -- every one seen so far, so that a file a
    table left (a rewrite gives it a new one) is read again too (``missing_ok``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.seen: set[str] = set()

    def __call__(self) -> bytes:
        engine = create_engine(self.url)
        try:
            with engine.connect() as connection:
                connection.execution_options(isolation_level="AUTOCOMMIT")
                connection.exec_driver_sql("CHECKPOINT")
                self.seen |= {p for p in connection.execute(text(_RELATION_FILES)).scalars() if p}
                assert self.seen, "no relation files found"
                read = text("SELECT pg_read_binary_file(:p, 0, 100000000, true)")
                return b"".join(
                    bytes(connection.execute(read, {"p": p}).scalar() or b"") for p in self.seen
                )
        finally:
            engine.dispose()


@pytest.fixture
def raw_bytes(backend: str, database_url: str) -> Callable[[], bytes]:
    """Reads the raw bytes of the test database (see the module docstring)."""
    if backend == "sqlite":
        return lambda: _sqlite_bytes(database_url)
    return PostgresFiles(database_url)


@pytest.fixture
def full_ledger(make_ledger: Callable[..., SessionLedger]) -> Iterator[SessionLedger]:
    """A ledger holding SECRET in every kind of content, snapshots and read models too."""
    ledger = make_ledger(snapshot_interval=2)
    fill(ledger)
    fill(ledger, "s2")
    ledger.read_models.catch_up()
    yield ledger


def test_content_is_never_stored_in_the_clear(
    full_ledger: SessionLedger, raw_bytes: Callable[[], bytes]
) -> None:
    """With encryption on, the plaintext is in no byte of the database, before or after."""
    assert SECRET.encode() not in raw_bytes()
    full_ledger.erase(ALICE, "s1")
    full_ledger.read_models.catch_up()
    assert SECRET.encode() not in raw_bytes()


def test_without_encryption_the_scan_finds_the_plaintext(
    make_ledger: Callable[..., SessionLedger], raw_bytes: Callable[[], bytes]
) -> None:
    """The control: a ledger with encryption=False stores SECRET where the scan sees it."""
    fill(make_ledger(encryption=False))
    assert SECRET.encode() in raw_bytes()


def test_the_destroyed_key_is_gone_from_the_database_bytes(
    full_ledger: SessionLedger, raw_bytes: Callable[[], bytes]
) -> None:
    """The erased session's key is in the bytes before erasure and in none after it; the
    other session's key stays."""
    store = full_ledger.key_store
    keys = {r.session_id: store.get(r.key_id) for r in store.records(tenant="acme")}
    assert len(keys) == 2 and all(keys.values())
    before = raw_bytes()
    assert all(k in before for k in keys.values() if k)
    erased = full_ledger.session(ALICE, "s1").session_id
    full_ledger.erase(ALICE, "s1")
    after = raw_bytes()
    assert keys[erased] not in after
    kept = next(k for sid, k in keys.items() if sid != erased)
    assert kept is not None and kept in after
