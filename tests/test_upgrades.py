"""Databases and exports written by earlier versions open, verify, export and keep working.

``tests/fixtures/v0_1_0.*`` were written by chatledger 0.1.0 (commit 9888444)
with ``tests/fixtures/make_fixture.py``: a SQLite file, a PostgreSQL dump and
the export of the same ledger. Each test opens a copy with the current code.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from chatledger import Principal, SessionLedger

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ADMIN = Principal(account_id="ops", user_id="root", role="admin")
ALICE = Principal(account_id="acme", user_id="alice", agent_id="support-bot")
EVENTS_0_1_0 = 24


def _load_postgres_dump(url: str, dump: Path, schema: str) -> None:
    """Replay a ``pg_dump --inserts`` file of schema ``fx_...`` into ``schema`` of ``url``."""
    statements: list[str] = []
    current: list[str] = []
    for line in dump.read_text(encoding="utf-8").splitlines():
        if not current and (
            not line.strip()
            or line.startswith(("--", "\\", "SET ", "SELECT pg_catalog.set_config"))
            or line.startswith("CREATE SCHEMA")
        ):
            continue
        current.append(line.replace("fx_v0_1_0.", f"{schema}."))
        if line.rstrip().endswith(";"):
            statements.append("\n".join(current))
            current = []
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            for statement in statements:
                connection.exec_driver_sql(statement.replace("%", "%%"))
    finally:
        engine.dispose()


@pytest.fixture
def old_ledger_url(backend: str, database_url: str, tmp_path: Path) -> Iterator[str]:
    """The URL of a copy of the 0.1.0 fixture database (SQLite file or PostgreSQL schema)."""
    if backend == "sqlite":
        path = tmp_path / "old.db"
        shutil.copy(FIXTURES / "v0_1_0.db", path)
        yield f"sqlite:///{path}"
        return
    schema = database_url.rsplit("search_path%3D", 1)[-1].split("&", 1)[0]
    _load_postgres_dump(database_url, FIXTURES / "v0_1_0.postgres.sql", schema)
    yield database_url


def test_a_0_1_0_database_opens_verifies_and_keeps_working(old_ledger_url: str) -> None:
    """The 0.1.0 database verifies with the current code, reads right, and takes new events."""
    with SessionLedger(old_ledger_url) as ledger:
        report = ledger.verify(ADMIN)
        assert report.ok, report.issues
        assert (report.sessions_checked, report.events_checked) == (3, EVENTS_0_1_0)
        view = ledger.session(ALICE, "ticket-1")
        assert (view.commit_count, view.message_count) == (4, 10)
        assert [m.content for m in view.buffer] == ["Thanks, closing this."]
        assert ledger.session(ALICE, "ticket-1", at_version=2).context.meta == {"v": 1}
        added = ledger.add_message(ALICE, "ticket-1", "user", "Reopened after the upgrade.")
        assert added.version == view.version + 1
        assert ledger.verify(ADMIN).ok
        lines = list(ledger.export(ADMIN))
    assert len(lines) == 1 + EVENTS_0_1_0 + 1


def test_a_0_1_0_export_imports_and_verifies(database_url: str) -> None:
    """An export file written by 0.1.0 (payloads as text, format 1) imports whole."""
    lines = (FIXTURES / "v0_1_0.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["format_version"] == 1
    with SessionLedger(database_url) as ledger:
        result = ledger.import_(lines)
        assert (result.sessions, result.events) == (3, EVENTS_0_1_0)
        assert ledger.verify(ADMIN).ok
        assert ledger.session(ALICE, "ticket-1").commit_count == 4


def test_the_sqlite_fixture_is_a_0_1_0_database(tmp_path: Path) -> None:
    """The fixture holds the 0.1.0 schema (no columns added since), so the tests above mean it."""
    shutil.copy(FIXTURES / "v0_1_0.db", tmp_path / "copy.db")
    engine = create_engine(f"sqlite:///{tmp_path / 'copy.db'}")
    try:
        with engine.connect() as connection:
            columns = [
                row[1] for row in connection.execute(text("PRAGMA table_info(chatledger_events)"))
            ]
    finally:
        engine.dispose()
    assert columns[-1] == "summary" and len(columns) == 27
