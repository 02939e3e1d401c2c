"""Schema revision 0007 (the key table) on ledgers written before encryption at rest.

The fixtures were made by chatledger at commit 64c649a (revision 0006), which
stored content in the clear (``tests/fixtures/make_pre_erasure.py``): a SQLite
file and a ``pg_dump`` restored here into the test's schema, 26 events of five
sessions with every kind of content holding ``OLD_SECRET``, snapshots, and
read models. Opening one upgrades it in place; it verifies and reads as
before; with encryption on, new events are encrypted; erasing a session of it
is refused unless the caller accepts that its old events keep their content.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import inspect

from chatledger import InvalidInput, Principal, SessionLedger, StoreUnavailable
from chatledger.adapters.migrations import SCHEMA_HEAD, schema_revision
from chatledger.read_models import ReadModels
from support import ADMIN, restore_fixture

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EVENTS = 26
OLD_SECRET = "Kestrel-4410"
ALICE = Principal(account_id="acme", user_id="alice", agent_id="bot", trace_id="t-1")


@pytest.fixture
def old_ledger_url(backend: str, database_url: str, tmp_path: Path) -> str:
    """A database exactly as revision 0005 left it."""
    return restore_fixture("pre_erasure", backend, database_url, tmp_path)


def _hashed_rows(lines: list[str]) -> list[tuple[object, ...]]:
    """What an export says of each event (data key lines left out): the hashed row."""
    records = [json.loads(line) for line in lines[1:]]
    return [
        (r["position"], r["session_id"], r["version"], r["topic"], r["timestamp_us"], r["hash"])
        for r in records
        if "data_key" not in r
    ]


def test_a_ledger_from_before_encryption_upgrades_verifies_and_reads_as_before(
    old_ledger_url: str, backend: str
) -> None:
    """Opening it adds the key table (revision 0007); every chain verifies; content reads as
    it was written; the export keeps every old row as it was."""
    name = "sqlite" if backend == "sqlite" else "postgres"
    before = (FIXTURES / f"pre_erasure.{name}.export.jsonl").read_text().splitlines()
    with SessionLedger(old_ledger_url) as ledger:
        engine = ledger.core.store.event_recorder.engine
        with engine.connect() as connection:
            assert schema_revision(connection) == SCHEMA_HEAD
            assert inspect(connection).has_table("chatledger_keys")
        report = ledger.verify(ADMIN)
        assert report.ok, report.issues
        assert report.events_checked == EVENTS and report.snapshots_checked > 0
        view = ledger.session(ALICE, "s1")
        assert view.state == {"code": OLD_SECRET}
        assert OLD_SECRET in view.task.objective
        assert _hashed_rows(list(ledger.export(ADMIN))) == _hashed_rows(before)


def test_new_events_of_an_old_session_are_encrypted(old_ledger_url: str) -> None:
    """With encryption on, an old session's new content is sealed with a key of its own;
    the session reads old and new content alike, and still verifies."""
    with SessionLedger(old_ledger_url, encryption=True) as ledger:
        ledger.add_message(ALICE, "s1", "user", "Written after the upgrade.")
        (record,) = ledger.key_store.records(tenant="acme")
        assert record.scope == "session"
        assert record.session_id == ledger.session(ALICE, "s1").session_id
        engine = ledger.core.store.event_recorder.engine
        with engine.connect() as connection:
            state = connection.exec_driver_sql(
                "SELECT state FROM chatledger_events ORDER BY id DESC LIMIT 1"
            ).scalar()
        assert b"Written after" not in bytes(state) and b'"sealed"' in bytes(state)
        contents = [m.content for m in ledger.session(ALICE, "s1").buffer]
        assert contents[-1] == "Written after the upgrade."
        assert any(OLD_SECRET in c for c in contents)
        assert ledger.verify(ADMIN).ok


def test_erasing_an_old_session_says_what_stays_readable(old_ledger_url: str) -> None:
    """Old events were written unencrypted: erase() refuses, naming them; with
    allow_unencrypted it records Erased and redacts the session's state, the result counts
    them, and their content is still in the history -- the new, encrypted one is not."""
    with SessionLedger(old_ledger_url, encryption=True) as ledger:
        ledger.add_message(ALICE, "s1", "user", f"New text about {OLD_SECRET}.")
        with pytest.raises(InvalidInput, match="stored unencrypted"):
            ledger.erase(ALICE, "s1")
        result = ledger.erase(ALICE, "s1", allow_unencrypted=True)
        assert result.erased == ("s1",) and result.unencrypted_events > 0
        assert len(result.key_ids) == 1  # the key of the new event
        view = ledger.session(ALICE, "s1")
        assert OLD_SECRET not in view.model_dump_json() and view.status == "erased"
        history = [h.event.model_dump_json() for h in ledger.history(ALICE, "s1")]
        assert any(OLD_SECRET in h for h in history[:-3])  # old, unencrypted events
        assert not any(OLD_SECRET in h for h in history[-2:])  # the new one, erased
        assert ledger.verify(ADMIN).ok
        assert ledger.erase(ALICE, "s1").already_erased == ("s1",)  # accepted once: no error


def test_read_models_of_an_old_ledger_catch_up_and_hold_no_content(old_ledger_url: str) -> None:
    """The archive history is rebuilt without its old content columns; the others resume."""
    with SessionLedger(old_ledger_url) as ledger, ReadModels(ledger) as models:
        assert models.reset_on_start == ("archives",)
        models.catch_up()
        assert set(models.positions().values()) == {models.head()}
        archives = ledger.archives(ALICE, "s1", include_merged=True)
        assert archives and all(a.overview for a in archives)
        with models.engine.connect() as connection:
            columns = {c["name"] for c in inspect(connection).get_columns("chatledger_archives")}
        assert "overview" not in columns and "abstract" not in columns


def test_a_reader_without_ddl_rights_is_told_to_migrate(old_ledger_url: str) -> None:
    """create_tables=False on a revision-0005 database refuses with `chatledger migrate`."""
    with pytest.raises(StoreUnavailable, match="chatledger migrate"):
        SessionLedger(old_ledger_url, create_tables=False)
