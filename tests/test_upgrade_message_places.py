"""A ledger written before message ids came from their place keeps working.

The fixtures (``tests/fixtures/make_pre_message_places.py``, run with the code of
b48d188) hold sessions whose rows name random ids: live buffers, a commit, removed
items, a replaced tail. Opened with today's code they verify (deeply), export the very
same events, read the same live ids -- and take new messages, commits and removals
that name old ids and new ones together, which read back the same from a cold load
and through an export and import.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from chatledger import SessionLedger
from chatledger.domain.identity import message_id_at, session_id
from chatledger.domain.values import Principal
from support import ADMIN, restore_fixture

FIXTURES = Path(__file__).parent / "fixtures"
ALICE = Principal(account_id="acme", user_id="alice", agent_id="bot")


def _name(backend: str) -> str:
    return "pre_message_places." + ("sqlite" if backend == "sqlite" else "postgres")


@pytest.fixture
def old_url(backend: str, database_url: str, tmp_path: Path) -> str:
    """A database exactly as the earlier version left it."""
    return restore_fixture("pre_message_places", backend, database_url, tmp_path)


@pytest.fixture
def live_before(backend: str) -> dict[str, list[str]]:
    """The ids of each session's live messages, as the earlier version read them."""
    loaded: dict[str, list[str]] = json.loads(
        (FIXTURES / f"{_name(backend)}.live.json").read_text()
    )
    return loaded


def test_an_old_ledger_verifies_exports_and_reads_its_ids_as_before(
    old_url: str, backend: str, live_before: dict[str, list[str]]
) -> None:
    """Deep verify passes, the export holds the earlier one's rows (every hashed value, the
    stored payload byte for byte) in the same order, live ids are kept."""
    with SessionLedger(old_url) as ledger:
        assert ledger.verify(ADMIN, deep=True).ok
        exported = list(ledger.export(ADMIN))
        for key, ids in live_before.items():
            assert [m.id for m in ledger.session(ALICE, key).buffer] == ids
    before = (FIXTURES / f"{_name(backend)}.export.jsonl").read_text().splitlines()
    assert [_hashed(line) for line in exported[1:]] == [_hashed(line) for line in before[1:]]


def _hashed(line: str) -> tuple[object, ...]:
    """What an export line says of its stored row, whatever its format version (the stored
    payload is ``stored`` since format 4, ``event`` before, or ``state`` text)."""
    record = json.loads(line)
    stored = record["stored"] if "stored" in record else record.get("event", record.get("state"))
    return (
        record["position"], record["session_id"], record["version"], record["topic"],
        record["timestamp_us"], stored, record["hash"],
    )  # fmt: skip


def _committed_ids(url: str) -> list[object]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            state = connection.execute(
                text("SELECT state FROM chatledger_events WHERE topic = 'Committed' ORDER BY id")
            ).all()[-1][0]
    finally:
        engine.dispose()
    ids: list[object] = json.loads(bytes(state))["archive"]["message_ids"]
    return ids


def test_new_messages_and_a_commit_mix_old_ids_with_new_ones(
    old_url: str,
    live_before: dict[str, list[str]],
    other_database_url: str,
) -> None:
    """A commit of old and new messages stores old ids as they are and new ones as a run;
    a cold load, a deep verify and an export imported elsewhere all read the same ids."""
    ledger = SessionLedger(old_url)
    try:
        added = ledger.add_messages(ALICE, "chat", [{"role": "user", "content": "new"}] * 3)
        ledger.commit(ALICE, "chat")
        sid = session_id(ALICE.account_id, "chat")
        new_ids = [message_id_at(sid, a.version) for a in added]
        assert [a.message_id for a in added] == new_ids
        expected = [*live_before["chat"], *new_ids]
        assert list(ledger.session(ALICE, "chat").archives[-1].message_ids) == expected
        assert _committed_ids(old_url) == [
            *live_before["chat"],
            [added[0].version, added[-1].version],
        ]
        items = ledger.add_items(ALICE, "items", [{"role": "user", "content": "more"}])
        removed = ledger.clear_buffer(ALICE, "items")
        assert [m.id for m in removed] == [*live_before["items"], items[0].message_id]
        assert ledger.verify(ADMIN, deep=True).ok
        exported = list(ledger.export(ADMIN))
    finally:
        ledger.close()
    with SessionLedger(old_url) as cold:
        assert list(cold.session(ALICE, "chat").archives[-1].message_ids) == expected
        assert cold.session(ALICE, "items").buffer == ()
    with SessionLedger(other_database_url) as copy:
        copy.import_(exported)
        assert list(copy.session(ALICE, "chat").archives[-1].message_ids) == expected
        assert copy.verify(ADMIN, deep=True).ok
