"""Shared fixtures: every ledger test runs on SQLite and, when configured, PostgreSQL.

``CHATLEDGER_TEST_POSTGRES_URL`` (e.g. ``postgresql+psycopg://postgres@127.0.0.1/test``)
enables the PostgreSQL cases; each test then gets a schema of its own, dropped
afterwards. Without it they are skipped with a visible reason. CI sets it and
sets ``CHATLEDGER_REQUIRE_POSTGRES=1`` so that a skip there is a failure.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

# Test helpers live beside this file (tests/support.py). The tests folder goes on
# sys.path -- never the repository root, whose chatledger/ source folder would
# shadow the installed package under test.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from chatledger import SessionLedger
from support import ADMIN, ALICE, BOB, FixedClock

__all__ = ["ADMIN", "ALICE", "BOB", "FixedClock"]

POSTGRES_URL = os.environ.get("CHATLEDGER_TEST_POSTGRES_URL", "")
REQUIRE_POSTGRES = os.environ.get("CHATLEDGER_REQUIRE_POSTGRES", "") not in ("", "0")


def _postgres_schema_url(base: str, schema: str) -> str:
    separator = "&" if "?" in base else "?"
    return f"{base}{separator}options={quote(f'-csearch_path={schema}')}"


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    """The database kind under test."""
    if request.param == "postgres" and not POSTGRES_URL:
        if REQUIRE_POSTGRES:
            pytest.fail(
                "CHATLEDGER_REQUIRE_POSTGRES is set but CHATLEDGER_TEST_POSTGRES_URL is not"
            )
        pytest.skip("PostgreSQL not configured: set CHATLEDGER_TEST_POSTGRES_URL to run these")
    return str(request.param)


@contextmanager
def _postgres_schema() -> Iterator[str]:
    """The URL of a fresh PostgreSQL schema, dropped afterwards."""
    import psycopg
    from sqlalchemy.engine import make_url

    schema = f"t_{uuid.uuid4().hex[:12]}"
    parsed = make_url(POSTGRES_URL)
    conninfo = (
        f"host={parsed.host or '127.0.0.1'} port={parsed.port or 5432} "
        f"dbname={parsed.database} user={parsed.username or 'postgres'}"
    )
    if parsed.password:
        conninfo += f" password={parsed.password}"
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    try:
        yield _postgres_schema_url(POSTGRES_URL, schema)
    finally:
        with psycopg.connect(conninfo, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def database_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database for one test (SQLite file or PostgreSQL schema)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
        return
    with _postgres_schema() as url:
        yield url


@pytest.fixture
def other_database_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """A fresh database of the other kind (for read models kept apart from the ledger)."""
    if backend == "postgres":
        yield f"sqlite:///{tmp_path / 'other.db'}"
        return
    if not POSTGRES_URL:
        if REQUIRE_POSTGRES:
            pytest.fail(
                "CHATLEDGER_REQUIRE_POSTGRES is set but CHATLEDGER_TEST_POSTGRES_URL is not"
            )
        pytest.skip("PostgreSQL not configured: set CHATLEDGER_TEST_POSTGRES_URL to run these")
    with _postgres_schema() as url:
        yield url


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def make_ledger(database_url: str, clock: FixedClock) -> Iterator[Callable[..., SessionLedger]]:
    """Open ledgers on the test database (closed at the end of the test)."""
    opened: list[SessionLedger] = []

    def make(**kwargs: Any) -> SessionLedger:
        kwargs.setdefault("clock", clock)
        ledger = SessionLedger(database_url, **kwargs)
        opened.append(ledger)
        return ledger

    yield make
    for ledger in opened:
        ledger.close()


@pytest.fixture
def ledger(make_ledger: Callable[..., SessionLedger]) -> SessionLedger:
    """A ledger on a fresh database with a deterministic clock."""
    return make_ledger()
