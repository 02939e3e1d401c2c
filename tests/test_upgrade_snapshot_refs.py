"""Snapshots that only count their live archives, on ledgers whose snapshots list them.

Before revision 0009 a snapshot listed where each live archive was recorded
(``archive_refs``), so a session's snapshots grew with the square of its
commits; now it counts them (``live_archives``) and loading folds the
session's events that change archives to find them. The fixtures were made by
chatledger at commit ea9b431 (``tests/fixtures/make_pre_derived_refs.py``): a
SQLite file and a ``pg_dump`` restored here into the test's schema, three
sessions with commits, a merge, a fork and a deletion, and eleven snapshots of
the listing form. Opening one upgrades it in place; its snapshots still load
and verify; the next ones only count. Its rows also hold the commit counters
on every row (rows written since leave them out unless they change archives):
both kinds read alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from chatledger import Principal, SessionLedger
from chatledger.adapters.migrations import SCHEMA_HEAD, schema_revision
from chatledger.adapters.recorders import StreamColumns
from chatledger.adapters.store import EventStoreApplication
from chatledger.domain.session import Session
from chatledger.read_models import ReadModels
from support import ADMIN, restore_fixture

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ALICE = Principal(account_id="acme", user_id="alice", agent_id="bot")
KEYS = ("s1", "s1-fork", "s2")
OLD_SNAPSHOTS = 11


@pytest.fixture
def old_ledger_url(backend: str, database_url: str, tmp_path: Path) -> str:
    """A database exactly as revision 0008 left it."""
    return restore_fixture("pre_derived_refs", backend, database_url, tmp_path)


def _replayed(store: EventStoreApplication, sid: UUID, version: int) -> Session:
    """The session at ``version`` replayed from its first event, no snapshot used."""
    rows = StreamColumns.of_rows(store.event_recorder.stream(sid, lte=version))
    session = store.replay_columns(sid, None, rows, trusted=False)
    assert session is not None
    return session


def _snapshots(ledger: SessionLedger) -> list[tuple[UUID, int, dict[str, Any]]]:
    store = ledger.core.store
    found = []
    for key in KEYS:
        sid = ledger.session(ALICE, key).session_id
        for row in store.snapshot_rows(sid):
            found.append((sid, row.originator_version, json.loads(row.state)["state"]))
    return found


def test_snapshots_listing_their_archives_still_load_and_verify(old_ledger_url: str) -> None:
    """After the upgrade (revision 0009) every old snapshot -- listing the events of its
    archives, a merged one and a fork's among them -- loads to the state a full replay
    gives, and a deep verify passes."""
    with SessionLedger(old_ledger_url) as ledger:
        engine = ledger.core.store.event_recorder.engine
        with engine.connect() as connection:
            assert schema_revision(connection) == SCHEMA_HEAD == "0009"
        store = ledger.core.store
        old = _snapshots(ledger)
        assert len(old) == OLD_SNAPSHOTS
        assert all("live_archives" not in s for _, _, s in old)
        assert any(len(s["archive_refs"]) > 1 for _, _, s in old)
        for sid, version, _ in old:
            loaded = store.load(sid, version)
            assert loaded.to_state() == _replayed(store, sid, version).to_state()
        report = ledger.verify(ADMIN, deep=True)
        assert report.ok, report.issues
        assert report.snapshots_checked == OLD_SNAPSHOTS


def test_the_next_snapshots_count_their_archives_and_load_from_the_events(
    old_ledger_url: str,
) -> None:
    """A commit on each old session writes a snapshot that neither embeds nor lists its
    archives; a cold load from it gives the archives a full replay gives (after a merge,
    a fork and a deletion alike), with their message ids, and everything verifies."""
    with SessionLedger(old_ledger_url, snapshot_interval=2) as ledger:
        for key in KEYS:
            ledger.add_messages(ALICE, key, [{"role": "user", "content": "after"}] * 3)
            ledger.commit(ALICE, key)
        warm = {key: ledger.session(ALICE, key) for key in KEYS}
        newest = {}
        for sid, version, state in _snapshots(ledger):
            if version > newest.get(sid, (0, None))[0]:
                newest[sid] = (version, state)
        assert len(newest) == len(KEYS)
        for _version, state in newest.values():
            assert state["archives"] == [] and state["archive_refs"] == []
            assert state["live_archives"] > 0
        assert ledger.verify(ADMIN, deep=True).ok
    with SessionLedger(old_ledger_url, create_tables=False) as cold:
        store = cold.core.store
        for key in KEYS:
            view = cold.session(ALICE, key)
            assert view == warm[key]
            assert view.archives and all(archive.covered_count for archive in view.archives)
            loaded = store.load(view.session_id)
            assert loaded.to_state() == _replayed(store, view.session_id, view.version).to_state()


def test_rows_holding_the_commit_counters_and_rows_leaving_them_out_read_alike(
    old_ledger_url: str,
) -> None:
    """The timeline of an old session -- its message rows holding the commit counters --
    and of the rows appended after the upgrade, which leave them out, shows after every
    event the counters a replay gives; the working set too; everything verifies."""
    with SessionLedger(old_ledger_url) as ledger, ReadModels(ledger) as models:
        ledger.add_messages(ALICE, "s1", [{"role": "user", "content": "after"}] * 3)
        store = ledger.core.store
        for key in KEYS:
            sid = ledger.session(ALICE, key).session_id
            for entry in models.timeline(ALICE, key, limit=1000):
                session = store.load(sid, entry.version)
                shown = (entry.commit_count, entry.archive_count, entry.last_commit_at)
                replayed = (session.commit_count, len(session.archives), session.last_commit_at)
                assert shown == replayed, (key, entry.version)
        models.rebuild()
        (entry,) = [e for e in models.working_set(ADMIN) if e.session_key == "s1"]
        view = ledger.session(ALICE, "s1")
        assert (entry.commit_count, entry.archive_count) == (view.commit_count, view.archive_count)
        assert entry.commit_count == 7
        assert ledger.verify(ADMIN, deep=True).ok
