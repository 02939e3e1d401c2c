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
from sqlalchemy import create_engine, inspect, text
from typer.testing import CliRunner

from chatledger import InvalidSettings, Principal, SessionLedger, StoreUnavailable
from chatledger.adapters.migrations import LOCATION, SCHEMA_HEAD, VERSION_TABLE, schema_revision
from chatledger.cli import app as cli

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
        report = ledger.verify(ADMIN, deep=True)
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


def test_opening_upgrades_a_0_1_0_database_to_the_current_revision(old_ledger_url: str) -> None:
    """Opening runs the migrations in place: the version table names the head revision."""
    SessionLedger(old_ledger_url).close()
    engine = create_engine(old_ledger_url)
    try:
        with engine.connect() as connection:
            assert schema_revision(connection) == SCHEMA_HEAD
            columns = {c["name"] for c in inspect(connection).get_columns("chatledger_events")}
    finally:
        engine.dispose()
    assert "idempotency_key" in columns


def test_without_ddl_rights_an_old_schema_is_refused_with_the_way_forward(
    old_ledger_url: str,
) -> None:
    """create_tables=False never migrates: an older schema says to run chatledger migrate."""
    with pytest.raises(StoreUnavailable, match="chatledger migrate"):
        SessionLedger(old_ledger_url, create_tables=False)


def test_a_schema_newer_than_the_code_is_refused_and_left_alone(database_url: str) -> None:
    """A revision this version does not know (a newer chatledger wrote it) is not touched."""
    SessionLedger(database_url).close()
    engine = create_engine(database_url)
    try:
        with engine.begin() as connection:
            connection.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '9999'"))
        for create in (True, False):
            with pytest.raises(StoreUnavailable, match="newer version"):
                SessionLedger(database_url, create_tables=create)
        with engine.connect() as connection:
            assert schema_revision(connection) == "9999"
    finally:
        engine.dispose()


def test_the_migrations_build_exactly_the_current_schema(database_url: str) -> None:
    """Upgrading an empty database revision by revision gives what the code's tables declare."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from chatledger.adapters.migrations import run_alembic
    from chatledger.adapters.schema import metadata

    engine = create_engine(database_url)
    try:
        with engine.begin() as connection:
            run_alembic(connection, "upgrade", SCHEMA_HEAD)
        with engine.connect() as connection:
            context = MigrationContext.configure(connection)
            differences = compare_metadata(context, metadata)
            assert schema_revision(connection) == SCHEMA_HEAD
    finally:
        engine.dispose()
    assert [d for d in differences if d[0] != "remove_table"] == []


def test_the_head_constant_is_the_newest_migration() -> None:
    """SCHEMA_HEAD (checked on every open without importing Alembic) is the script head."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(LOCATION))
    assert ScriptDirectory.from_config(config).get_current_head() == SCHEMA_HEAD


def test_a_wrong_chain_key_is_refused_distinctly_from_tampering(database_url: str) -> None:
    """Another key, or none, for a keyed ledger raises InvalidSettings on open (no false alarm)."""
    with SessionLedger(database_url, chain_key="right") as ledger:
        ledger.add_message(ALICE, "s1", "user", "hi")
    for wrong in ("wrong", None):
        with pytest.raises(InvalidSettings, match="chain key does not match"):
            SessionLedger(database_url, chain_key=wrong)
    with SessionLedger(database_url, chain_key="right") as ledger:
        assert ledger.verify(ADMIN).ok


def test_a_0_1_0_ledger_is_checked_against_its_chains_for_the_key(old_ledger_url: str) -> None:
    """A 0.1.0 ledger (no recorded check value, written without a key) refuses a key."""
    with pytest.raises(InvalidSettings, match="chain key does not match"):
        SessionLedger(old_ledger_url, chain_key="invented")
    with SessionLedger(old_ledger_url) as ledger:  # its own (no key): opens and records it
        assert ledger.verify(ADMIN).ok


def test_chatledger_migrate_upgrades_in_place_and_says_so(old_ledger_url: str) -> None:
    """`chatledger migrate` upgrades a 0.1.0 database, then finds nothing to do."""
    first = CliRunner().invoke(cli, ["migrate", "--url", old_ledger_url, "--json"], env={})
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout) == {"from": "0001 (0.1.0)", "to": SCHEMA_HEAD, "changed": True}
    again = CliRunner().invoke(cli, ["migrate", "--url", old_ledger_url], env={})
    assert again.exit_code == 0 and "nothing to do" in again.stdout
    with SessionLedger(old_ledger_url, create_tables=False) as ledger:  # no DDL needed now
        assert ledger.verify(ADMIN).ok


def test_chatledger_migrate_never_creates_a_ledger(tmp_path: Path) -> None:
    """`chatledger migrate` on a missing database exits 3 (not found) and creates nothing."""
    missing = tmp_path / "typo.db"
    result = CliRunner().invoke(cli, ["migrate", "--url", f"sqlite:///{missing}"], env={})
    assert result.exit_code == 3
    assert not missing.exists()
