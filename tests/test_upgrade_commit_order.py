"""Schema revision 0004 (the commit-ordered log) on ledgers written before it, with read models.

The fixtures were made by chatledger at commit a4c8ef8 (0.1.0), before the
events table had a ``tx_id`` column and while PostgreSQL appends took a
table lock (``tests/fixtures/make_pre_commit_order.py``): a SQLite file, and
a ``pg_dump`` restored here into the test's schema. Each holds 25 events of
four sessions, snapshots, and read models caught up to position 22 -- which
``tests/test_upgrades.py``'s fixtures do not -- plus the export the old code
made of it. Opening one migrates it through every revision.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect, text

from chatledger import SessionLedger, StoreUnavailable
from chatledger.adapters.sql_read_models import READ_MODEL_NAMES, dump_rows
from chatledger.read_models import ReadModels
from support import ADMIN, ALICE, BOB, restore_fixture

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EVENTS = 25
CAUGHT_UP_TO = 22  # where the fixture's read models stopped


@pytest.fixture
def old_ledger_url(backend: str, database_url: str, tmp_path: Path) -> str:
    """A database exactly as the earlier version left it."""
    return restore_fixture("pre_commit_order", backend, database_url, tmp_path)


@pytest.fixture
def exported_before(backend: str) -> list[str]:
    """What the earlier version exported from the fixture."""
    name = "sqlite" if backend == "sqlite" else "postgres"
    return (FIXTURES / f"pre_commit_order.{name}.export.jsonl").read_text().splitlines()


def _payload(record: dict[str, Any]) -> Any:
    """An exported event's payload, decoded, whichever way the export format wrote it."""
    if "stored" in record:  # format 4 (its "event" is the event as every output shows it)
        return record["stored"]
    return record["event"] if "event" in record else json.loads(record["state"])


def _chains(lines: list[str]) -> list[tuple[Any, ...]]:
    """What an export says of each event, whatever its format version: the hashed row."""
    return [
        (
            r["position"], r["session_id"], r["tenant"], r["key"], r["version"], r["topic"],
            r["timestamp_us"], _payload(r), r["hash"],
        )
        for r in map(json.loads, lines[1:])
    ]  # fmt: skip


def _snapshot(models: ReadModels) -> dict[str, Any]:
    with models.engine.connect() as connection:
        return {name: dump_rows(connection, name) for name in READ_MODEL_NAMES}


def test_a_ledger_written_before_commit_order_opens_verified_and_unchanged(
    old_ledger_url: str, exported_before: list[str]
) -> None:
    """Opening an old ledger upgrades it; every chain verifies and exports as it did."""
    with SessionLedger(old_ledger_url) as ledger:
        report = ledger.verify(ADMIN, deep=True)
        assert report.ok, report.issues
        assert (report.sessions_checked, report.events_checked) == (4, EVENTS)
        assert report.snapshots_checked > 0
        assert _chains(list(ledger.export(ADMIN))) == _chains(exported_before)
        assert ledger.session(ALICE, "s1").version == 17
        assert ledger.session(BOB, "s1").status == "closed"
    with SessionLedger(old_ledger_url) as again:  # the upgrade is done once; reopening is plain
        assert _chains(list(again.export(ADMIN))) == _chains(exported_before)


def test_the_upgrade_keeps_the_log_order_and_moves_positions_past_the_old_ones(
    old_ledger_url: str, backend: str
) -> None:
    """Old rows get tx_id 0 (their order is kept, before any new one); new positions come after."""
    with SessionLedger(old_ledger_url) as ledger:
        added = ledger.add_message(ALICE, "s2", "user", "after the upgrade")
        assert added.position > EVENTS
        engine = ledger.core.store.event_recorder.engine
        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT id, tx_id FROM chatledger_events ORDER BY tx_id, id")
            ).all()
            indexes = {i["name"] for i in inspect(connection).get_indexes("chatledger_events")}
        assert [r.id for r in rows][:EVENTS] == list(range(1, EVENTS + 1))
        assert {r.tx_id for r in rows[:EVENTS]} == {0}
        assert rows[-1].id == added.position
        assert {"chatledger_events_log", "chatledger_events_created_log"} <= indexes
        if backend == "postgres":
            assert rows[-1].tx_id > 0
        assert ledger.verify(ADMIN).ok


def test_old_read_models_resume_where_they_stopped(old_ledger_url: str) -> None:
    """Read models of the old ledger keep their positions and apply just what they lacked --
    but the archive history, whose rows changed since (no content: the read model's
    version 3), which is rebuilt."""
    with SessionLedger(old_ledger_url) as ledger, ReadModels(ledger) as models:
        assert models.reset_on_start == ("archives",)
        positions = models.positions()
        assert positions.pop("archives") == 0
        assert set(positions.values()) == {CAUGHT_UP_TO}
        assert models.catch_up() == EVENTS
        assert set(models.positions().values()) == {EVENTS} == {models.head()}
        later = ledger.add_message(BOB, "s1", "user", "back again")
        models.wait_for_projections(later.position, timeout=5)
        resumed = _snapshot(models)
        models.rebuild()
        assert _snapshot(models) == resumed


def test_processes_opening_an_old_ledger_at_once_upgrade_it_once(
    old_ledger_url: str, exported_before: list[str]
) -> None:
    """Several ledgers opening the old database together all succeed, and it verifies."""
    opened: list[SessionLedger] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def open_it() -> None:
        try:
            barrier.wait(timeout=30)
            opened.append(SessionLedger(old_ledger_url))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        assert errors == [] and len(opened) == 4
        assert opened[0].verify(ADMIN).ok
        assert _chains(list(opened[1].export(ADMIN))) == _chains(exported_before)
    finally:
        for ledger in opened:
            ledger.close()


def test_without_table_creation_an_old_ledger_is_refused_with_what_to_do(
    old_ledger_url: str,
) -> None:
    """create_tables=False never changes a database: an old one raises StoreUnavailable."""
    with pytest.raises(StoreUnavailable, match="chatledger migrate"):
        SessionLedger(old_ledger_url, create_tables=False)
    with SessionLedger(old_ledger_url):  # the upgrade ...
        pass
    with SessionLedger(old_ledger_url, create_tables=False) as ledger:  # ... then it opens
        assert ledger.verify(ADMIN).ok
