"""Message ids the ledger gives: its place in the stream, stored packed into runs.

- A message recorded without an id gets ``message_id_at(session, version)``; one with its
  own keeps it; an own id in that form for another place is refused, nothing recorded.
- ``packed_ids`` / ``unpacked_ids`` give back exactly the ids packed, in order; a run of
  the ledger's ids of consecutive versions is stored as ``[first, last]``.
- Events that name many messages (a commit's archive, a removal) store them packed and
  read back the same ids -- through the event decode, a cold load and the read models.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from uuid import UUID, uuid4

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import create_engine, text

from chatledger import InvalidInput, SessionLedger
from chatledger.domain import identity
from chatledger.domain.identity import (
    message_id_at,
    message_ids_at,
    packed_ids,
    session_id,
    unpacked_ids,
    version_named,
)
from support import ALICE

SID = UUID("0123456789abcdef0123456789abcdef")


def test_a_message_id_is_the_session_prefix_and_the_version_in_hex() -> None:
    """The id of version 300 of a session: its id's first 16 hex digits, then 300 in 16."""
    assert message_id_at(SID, 300) == "0123456789abcdef000000000000012c"
    assert version_named(SID, message_id_at(SID, 300)) == 300


@pytest.mark.parametrize(
    "other",
    [
        "0123456789abcdef000000000000012C",  # upper case: not the ledger's form
        "0123456789abcdef0x0000000000012c",  # int() would read it; the form is not its
        "0123456789abcdef0000000000000000",  # version 0 is never a message's
        "fedcba9876543210000000000000012c",  # another session's prefix
        "0123456789abcdef000000000000012",  # too short
        "msg-1",
    ],
)
def test_ids_not_in_the_ledgers_exact_form_name_no_version(other: str) -> None:
    """Only the exact form names a version: anything else is an id like any other."""
    assert version_named(SID, other) is None


@given(st.integers(1, 10**7), st.integers(0, 9000))
def test_ids_of_a_range_of_versions_are_each_ones_id(first: int, count: int) -> None:
    """message_ids_at of a range (built block by block) is message_id_at of each version."""
    versions = range(first, first + count)
    assert message_ids_at(SID, versions) == [message_id_at(SID, v) for v in versions]
    assert message_ids_at(SID, list(versions)) == [message_id_at(SID, v) for v in versions]


ids = st.lists(
    st.integers(1, 40).map(lambda v: message_id_at(SID, v))
    | st.text("0123456789abcdef", min_size=1, max_size=32)
    | st.sampled_from(["a", "msg-1", message_id_at(uuid4(), 5)]),
    max_size=30,
)


@given(ids)
def test_unpacking_packed_ids_gives_them_back_in_order(message_ids: list[str]) -> None:
    """Any list of ids survives packing exactly: order, repeats and foreign ids included."""
    stored = json.loads(json.dumps(packed_ids(SID, message_ids)))
    assert unpacked_ids(SID, stored) == tuple(message_ids)


def test_consecutive_versions_pack_into_one_run() -> None:
    """200 ids of versions 2..201 store as one [2, 201]; a gap or a foreign id starts anew."""
    run = [message_id_at(SID, v) for v in range(2, 202)]
    assert packed_ids(SID, run) == [[2, 201]]
    mixed = [message_id_at(SID, 5), message_id_at(SID, 7), "own", message_id_at(SID, 8)]
    assert packed_ids(SID, mixed) == [[5, 5], [7, 7], "own", [8, 8]]


def test_a_run_longer_than_unpacking_takes_is_stored_as_several(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Packing splits runs at MAX_ID_RUN, so any list it writes unpacks again."""
    monkeypatch.setattr(identity, "MAX_ID_RUN", 3)
    run = [message_id_at(SID, v) for v in range(1, 8)]
    assert packed_ids(SID, run) == [[1, 3], [4, 6], [7, 7]]
    assert unpacked_ids(SID, packed_ids(SID, run)) == tuple(run)


@pytest.mark.parametrize(
    "entry", [[3, 2], [0, 4], [1, 2, 3], [1], ["1", "2"], [True, 2], 7, None, [1, 10**12]]
)
def test_a_damaged_run_is_refused(entry: object) -> None:
    """A stored entry that is neither an id nor a sane [first, last] run raises ValueError."""
    with pytest.raises(ValueError):
        unpacked_ids(SID, [entry])


def test_recorded_messages_get_the_ids_of_their_versions(ledger: SessionLedger) -> None:
    """add_messages without ids: each id is message_id_at(session, its version)."""
    added = ledger.add_messages(
        ALICE, "s", [{"role": "user", "content": f"m{i}"} for i in range(3)]
    )
    sid = session_id(ALICE.account_id, "s")
    assert [a.message_id for a in added] == [message_id_at(sid, a.version) for a in added]
    items = ledger.add_items(ALICE, "s", [{"role": "user", "content": "an item"}])
    assert items[0].message_id == message_id_at(sid, items[0].version)
    view = ledger.session(ALICE, "s")
    assert [m.id for m in view.buffer] == [a.message_id for a in [*added, *items]]


def test_a_callers_own_id_is_kept(ledger: SessionLedger) -> None:
    """A message given its own id keeps it (the ledger names only those without)."""
    added = ledger.add_messages(ALICE, "s", [{"role": "user", "content": "x", "id": "mine-1"}])
    assert added[0].message_id == "mine-1"


def test_an_own_id_in_the_ledgers_form_for_another_place_is_refused(
    ledger: SessionLedger,
) -> None:
    """An id the ledger would give a later message is InvalidInput, and nothing is recorded."""
    ledger.add_message(ALICE, "s", "user", "first")
    before = ledger.session(ALICE, "s").version
    taken = message_id_at(session_id(ALICE.account_id, "s"), before + 5)
    with pytest.raises(InvalidInput, match="form of the ids this ledger gives"):
        ledger.add_messages(ALICE, "s", [{"role": "user", "content": "x", "id": taken}])
    assert ledger.session(ALICE, "s").version == before


def _stored(url: str, topic: str) -> list[dict[str, object]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT state FROM chatledger_events WHERE topic = :t ORDER BY id"),
                {"t": topic},
            ).all()
    finally:
        engine.dispose()
    return [json.loads(bytes(row[0])) for row in rows]


def test_a_commit_stores_its_messages_as_one_run_and_reads_them_back(
    database_url: str, make_ledger: Callable[..., SessionLedger]
) -> None:
    """A commit of 50 messages stores [first, last]; every reader gets the 50 ids back."""
    ledger = make_ledger()
    added = ledger.add_messages(
        ALICE, "s", [{"role": "user", "content": f"message {i}"} for i in range(50)]
    )
    ledger.commit(ALICE, "s")
    ids = [a.message_id for a in added]
    (committed,) = _stored(database_url, "Committed")
    assert committed["archive"]["message_ids"] == [[added[0].version, added[-1].version]]  # type: ignore[index]
    assert list(ledger.session(ALICE, "s").archives[0].message_ids) == ids
    cold = make_ledger()  # a new ledger on the same database: loads from the rows
    assert list(cold.session(ALICE, "s").archives[0].message_ids) == ids
    history = [e for e in cold.history(ALICE, "s") if e.type == "Committed"]
    assert len(history) == 1


def test_removed_items_are_stored_packed_and_read_back(
    database_url: str, make_ledger: Callable[..., SessionLedger]
) -> None:
    """clear_buffer names every live item: stored as one run, the same ids come back."""
    ledger = make_ledger()
    added = ledger.add_items(ALICE, "s", [{"role": "user", "content": f"i{n}"} for n in range(20)])
    removed = ledger.clear_buffer(ALICE, "s")
    assert [m.id for m in removed] == [a.message_id for a in added]
    (event,) = _stored(database_url, "ItemsRemoved")
    assert event["message_ids"] == [[added[0].version, added[-1].version]]
    assert make_ledger().session(ALICE, "s").buffer == ()


def test_an_own_id_of_exactly_its_place_is_taken_past_a_reactivation(
    ledger: SessionLedger,
) -> None:
    """An evicted session records a Reactivated first: an own id in the ledger's form is
    taken for the place after it, refused for the Reactivated's, nothing recorded then."""
    ledger.add_message(ALICE, "s", "user", "first")
    ledger.evict(ALICE, "s", reason="admin")
    before = ledger.session(ALICE, "s")
    sid = session_id(ALICE.account_id, "s")
    wrong = message_id_at(sid, before.version + 1)
    with pytest.raises(InvalidInput, match="form of the ids this ledger gives"):
        ledger.add_messages(ALICE, "s", [{"role": "user", "content": "x", "id": wrong}])
    assert ledger.session(ALICE, "s") == before
    right = message_id_at(sid, before.version + 2)
    added = ledger.add_messages(ALICE, "s", [{"role": "user", "content": "x", "id": right}])
    assert (added[0].message_id, added[0].version) == (right, before.version + 2)
