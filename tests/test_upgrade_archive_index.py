"""Schema revision 0008: SQLite's archive-event indexes test the event type with OR.

SQLite builds a temporary table for an ``IN (...)`` list in a partial index's
condition on every INSERT; 0008 spells the condition as comparisons. An
upgraded ledger must end up with exactly the indexes of a new one, and the
projector's query must still be served by them.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import event

from chatledger import Principal, SessionLedger
from chatledger.adapters.migrations import SCHEMA_HEAD, schema_revision
from chatledger.read_models import ReadModels
from support import ADMIN, restore_fixture

ALICE = Principal(account_id="acme", user_id="alice")
ARCHIVE_INDEXES = ("chatledger_events_archives", "chatledger_events_archives_log")


def index_sql(path: Path) -> dict[str, str]:
    """The CREATE INDEX statements of the archive-event indexes of a SQLite file."""
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND name IN (?, ?)",
            ARCHIVE_INDEXES,
        ).fetchall()
    finally:
        connection.close()
    return {name: " ".join(sql.split()) for name, sql in rows}


def test_an_upgraded_sqlite_ledger_gets_the_indexes_of_a_new_one(tmp_path: Path) -> None:
    """Opening a ledger of revision 0006 upgrades it to 0008: its archive indexes are the
    new ones (no IN list), and it still verifies."""
    url = restore_fixture("pre_erasure", "sqlite", "", tmp_path)
    old = Path(url.removeprefix("sqlite:///"))
    assert all(" IN (" in sql for sql in index_sql(old).values())
    with SessionLedger(url) as ledger:
        engine = ledger.core.store.event_recorder.engine
        with engine.connect() as connection:
            assert schema_revision(connection) == SCHEMA_HEAD == "0008"
        assert ledger.verify(ADMIN).ok
    new = tmp_path / "new.sqlite"
    with SessionLedger(f"sqlite:///{new}") as ledger:
        ledger.add_message(ALICE, "s", "user", "hi")
    upgraded = index_sql(old)
    assert upgraded == index_sql(new) and set(upgraded) == set(ARCHIVE_INDEXES)
    assert not any(" IN (" in sql for sql in upgraded.values())


def test_the_projector_reads_archive_events_through_their_index(tmp_path: Path) -> None:
    """The read models' query for archive-carrying events is served by the partial index
    on SQLite (its condition is spelled as the index spells it)."""
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    with SessionLedger(url) as ledger, ReadModels(ledger) as models:
        for turn in range(3):
            ledger.add_message(ALICE, "s", "user", f"question {turn}")
        ledger.commit(ALICE, "s")
        engine = models.projector.log.engine
        statements: list[str] = []

        @event.listens_for(engine, "before_cursor_execute")
        def remember(conn: object, cursor: object, sql: str, *args: object) -> None:
            if "event_type = 'Committed'" in sql:
                statements.append(sql)

        models.catch_up()
        (archive,) = models.archives(ALICE, "s")
        assert archive.live and len(archive.message_ids) == 3
        assert statements, "the projector read no archive-carrying events"
        with engine.connect() as connection:
            plan = connection.exec_driver_sql(
                "EXPLAIN QUERY PLAN " + statements[0], (0, 10**9)
            ).fetchall()
    assert any("chatledger_events_archives" in str(step) for step in plan), plan
