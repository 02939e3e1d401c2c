"""SQLite storage settings: WAL, and the durability level the settings ask for."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from chatledger import SessionLedger
from support import ALICE


@pytest.mark.parametrize(("setting", "level"), [(None, 1), ("normal", 1), ("full", 2)])
def test_sqlite_runs_wal_at_the_configured_synchronous_level(
    tmp_path: Path, setting: str | None, level: int
) -> None:
    """SQLite runs in WAL mode; synchronous is NORMAL (1) by default, FULL (2) on request."""
    options = {} if setting is None else {"sqlite_synchronous": setting}
    with SessionLedger(f"sqlite:///{tmp_path / 'x.db'}", **options) as ledger:
        ledger.add_message(ALICE, "s1", "user", "hi")
        with ledger._app.event_recorder.engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA synchronous")).scalar() == level
