"""Storage: WAL and the durability level the settings ask for; the table shape it needs."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from chatledger import LedgerNotFound, SessionLedger, StoreUnavailable
from support import ALICE


@pytest.mark.parametrize(("setting", "level"), [(None, 1), ("normal", 1), ("full", 2)])
def test_sqlite_runs_wal_at_the_configured_synchronous_level(
    tmp_path: Path, setting: str | None, level: int
) -> None:
    """SQLite runs in WAL mode; synchronous is NORMAL (1) by default, FULL (2) on request."""
    options = {} if setting is None else {"sqlite_synchronous": setting}
    with SessionLedger(f"sqlite:///{tmp_path / 'x.db'}", **options) as ledger:
        ledger.add_message(ALICE, "s1", "user", "hi")
        with ledger.core.store.event_recorder.engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA synchronous")).scalar() == level


def test_an_events_table_without_stored_facts_is_refused_with_a_clear_error(
    tmp_path: Path,
) -> None:
    """A database from a pre-0.1.0 development build (no facts columns) is not opened."""
    import sqlite3

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as connection:
        connection.execute(
            "CREATE TABLE chatledger_events (id INTEGER PRIMARY KEY, originator_id CHAR(32), "
            "originator_version BIGINT, topic TEXT, state BLOB, timestamp_us BIGINT, hash BLOB)"
        )
    with pytest.raises(StoreUnavailable, match="development build"):
        SessionLedger(f"sqlite:///{path}")


def test_without_table_creation_a_missing_sqlite_file_is_not_created(tmp_path: Path) -> None:
    """create_tables=False never creates a database: a missing file is LedgerNotFound."""
    path = tmp_path / "typo.db"
    with pytest.raises(LedgerNotFound, match="does not exist"):
        SessionLedger(f"sqlite:///{path}", create_tables=False)
    assert not path.exists()


def test_without_table_creation_a_database_without_tables_is_not_a_ledger(
    database_url: str,
) -> None:
    """create_tables=False on a database without chatledger's tables raises LedgerNotFound."""
    if database_url.startswith("sqlite"):
        import sqlite3

        sqlite3.connect(database_url.removeprefix("sqlite:///")).close()  # an empty file
    with pytest.raises(LedgerNotFound, match="holds no chatledger ledger"):
        SessionLedger(database_url, create_tables=False)
    with SessionLedger(database_url) as ledger:  # created once ...
        ledger.add_message(ALICE, "s1", "user", "hi")
    with SessionLedger(database_url, create_tables=False) as ledger:  # ... then opens
        assert ledger.session(ALICE, "s1").message_count == 1
