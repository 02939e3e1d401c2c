"""Reading a session as it was: by version, by time, across snapshots."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from chatledger import InvalidInput, SessionLedger, UnknownSession
from chatledger.projections import project
from support import ALICE, FixedClock


def test_view_at_version_equals_fold_of_the_prefix(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """session(at_version=N) matches folding the first N events, for every N (with snapshots)."""
    ledger = make_ledger(snapshot_interval=3)
    for i in range(6):
        ledger.add_message(ALICE, "s1", "user", f"m{i}")
        if i % 2:
            ledger.commit(ALICE, "s1")
    ledger.merge_archives(ALICE, "s1", threshold=1)
    events = [e.event for e in ledger.history(ALICE, "s1")]
    for n in range(1, len(events) + 1):
        view = ledger.session(ALICE, "s1", at_version=n)
        folded = project(events[:n])
        assert view.version == n
        assert view.buffer == folded.buffer.messages
        assert view.archives == folded.archives.live
        assert (view.message_count, view.commit_count) == (
            folded.meta.message_count,
            folded.meta.commit_count,
        )


def test_view_at_time_picks_the_last_event_at_or_before(
    ledger: SessionLedger, clock: FixedClock
) -> None:
    """at_time=T gives the state after the last event recorded at or before T."""
    ledger.add_message(ALICE, "s1", "user", "first")
    moment = clock.now
    clock.now += timedelta(minutes=5)
    ledger.add_message(ALICE, "s1", "user", "second")
    assert [m.content for m in ledger.session(ALICE, "s1", at_time=moment).buffer] == ["first"]
    with pytest.raises(UnknownSession):
        ledger.session(ALICE, "s1", at_time=moment - timedelta(days=1))


def test_context_at_version_is_the_prompt_as_it_was(ledger: SessionLedger) -> None:
    """context(at_version=N) returns the archive summary and messages live at version N."""
    ledger.add_message(ALICE, "s1", "user", "Question about Kafka.")
    ledger.commit(ALICE, "s1")
    ledger.add_message(ALICE, "s1", "user", "follow-up")
    then = ledger.context(ALICE, "s1", 10_000, at_version=2)
    assert then.archive_id is None and [m.content for m in then.messages] == [
        "Question about Kafka."
    ]
    now = ledger.context(ALICE, "s1", 10_000)
    assert now.archive_id is not None and "Kafka" in now.overview
    assert [m.content for m in now.messages] == ["follow-up"]


def test_context_keeps_the_newest_messages_that_fit(ledger: SessionLedger) -> None:
    """With a small budget the oldest live messages are dropped first."""
    for i in range(4):
        ledger.add_message(ALICE, "s1", "user", str(i) * 40)  # 10 tokens each
    context = ledger.context(ALICE, "s1", 25)
    assert [m.content[0] for m in context.messages] == ["2", "3"]
    assert (context.tokens, context.dropped_messages) == (20, 2)


def test_versions_beyond_the_head_are_rejected(ledger: SessionLedger) -> None:
    """at_version past the current version, zero, or both selectors raise InvalidInput."""
    ledger.add_message(ALICE, "s1", "user", "hi")
    for bad in (3, 0, -1):
        with pytest.raises(InvalidInput):
            ledger.session(ALICE, "s1", at_version=bad)
    with pytest.raises(InvalidInput):
        ledger.session(ALICE, "s1", at_version=1, at_time=ledger.history(ALICE, "s1")[0].timestamp)


def _snapshot_versions(ledger: SessionLedger, key: str) -> list[int]:
    sid = ledger.session(ALICE, key).session_id
    return [s.originator_version for s in ledger.core.store.snapshots.get(sid)]  # type: ignore[union-attr]


def test_snapshots_bound_the_replay(make_ledger: Callable[..., SessionLedger]) -> None:
    """A session whose commits fold messages away is snapshotted every interval or so."""
    ledger = make_ledger(snapshot_interval=5)
    for i in range(12):
        ledger.add_message(ALICE, "s1", "user", f"m{i}")
        ledger.commit(ALICE, "s1")
    # Archives accumulate (1 per commit), so each snapshot saves a little less.
    assert _snapshot_versions(ledger, "s1") == [5, 11, 17, 23]
    assert make_ledger().session(ALICE, "s1") == ledger.session(ALICE, "s1")


def test_a_buffer_that_only_grows_is_not_snapshotted_again_and_again(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Without commits a snapshot would be as big as the replay it saves, so none is taken."""
    ledger = make_ledger(snapshot_interval=5)
    for i in range(23):
        ledger.add_message(ALICE, "s1", "user", f"m{i}")
    assert _snapshot_versions(ledger, "s1") == []
    ledger.commit(ALICE, "s1")  # the commit folds all 23 away: now a snapshot pays
    assert _snapshot_versions(ledger, "s1") == [25]
    assert make_ledger().session(ALICE, "s1") == ledger.session(ALICE, "s1")


def test_diff_lists_messages_commits_merges_and_counters(ledger: SessionLedger) -> None:
    """diff(v1, v2) names what happened after v1 up to v2, with counters at both ends."""
    ledger.add_message(ALICE, "s1", "user", "one")  # v2
    ledger.commit(ALICE, "s1")  # v3
    ledger.add_message(ALICE, "s1", "user", "two")  # v4
    ledger.commit(ALICE, "s1")  # v5
    ledger.merge_archives(ALICE, "s1", threshold=1)  # v6
    ledger.add_message(ALICE, "s1", "user", "three")  # v7
    change = ledger.diff(ALICE, "s1", 2, 7)
    assert [m.content for m in change.messages_added] == ["two", "three"]
    assert [list(a.message_ids) for a in change.commits] == [
        [m.id for m in ledger.session(ALICE, "s1", at_version=2).buffer],
        [ledger.history(ALICE, "s1")[3].event.message.id],  # type: ignore[attr-defined]
    ]
    assert len(change.merges) == 1 and len(change.merges[0].source_archive_ids) == 2
    assert change.event_types == (
        "Committed",
        "MessageAdded",
        "Committed",
        "ArchiveMerged",
        "MessageAdded",
    )
    assert (change.before.buffer_size, change.after.buffer_size) == (1, 1)
    assert (change.before.commit_count, change.after.commit_count) == (0, 2)
    assert change.after.archive_count == 1


def test_diff_rejects_reversed_or_invalid_versions(ledger: SessionLedger) -> None:
    """from_version after to_version, or versions below 1, raise InvalidInput."""
    ledger.add_message(ALICE, "s1", "user", "one")
    for bad in ((2, 1), (0, 2)):
        with pytest.raises(InvalidInput):
            ledger.diff(ALICE, "s1", *bad)


def test_fork_copies_the_state_at_a_version_and_leaves_the_origin(ledger: SessionLedger) -> None:
    """fork(at_version=N) starts a new session with Forked carrying the origin's state at N."""
    for i in range(3):
        ledger.add_message(ALICE, "s1", "user", f"m{i}")
    ledger.commit(ALICE, "s1")  # v5
    ledger.add_message(ALICE, "s1", "user", "later")  # v6
    origin_before = ledger.history(ALICE, "s1")
    forked = ledger.fork(ALICE, "s1", 3, "s1-retry")
    then = ledger.session(ALICE, "s1", at_version=3)
    assert (forked.buffer, forked.archives) == (then.buffer, then.archives)
    assert forked.message_count == then.message_count and forked.version == 1
    (first,) = ledger.history(ALICE, "s1-retry")
    assert first.type == "Forked"
    assert (first.event.origin_key, first.event.origin_version) == ("s1", 3)  # type: ignore[attr-defined]
    assert ledger.history(ALICE, "s1") == origin_before
    ledger.add_message(ALICE, "s1-retry", "user", "try again")
    assert [m.content for m in ledger.session(ALICE, "s1-retry").buffer] == [
        "m0",
        "m1",
        "try again",
    ]
    folded = project(e.event for e in ledger.history(ALICE, "s1-retry"))
    assert folded.buffer.messages == ledger.session(ALICE, "s1-retry").buffer


def test_fork_refuses_an_existing_key(ledger: SessionLedger) -> None:
    """Forking onto a key in use raises InvalidInput and records nothing."""
    ledger.add_message(ALICE, "s1", "user", "a")
    ledger.add_message(ALICE, "taken", "user", "b")
    with pytest.raises(InvalidInput):
        ledger.fork(ALICE, "s1", 2, "taken")
    with pytest.raises(InvalidInput):
        ledger.fork(ALICE, "s1", 2, "s1")
    assert len(ledger.history(ALICE, "taken")) == 2


def test_history_pages_through_a_session_after_a_version(ledger: SessionLedger) -> None:
    """history(after_version=, limit=) returns the next page of events, oldest first."""
    for i in range(7):
        ledger.add_message(ALICE, "paged", "user", f"m{i}")
    first = ledger.history(ALICE, "paged", limit=3)
    assert [e.version for e in first] == [1, 2, 3]
    second = ledger.history(ALICE, "paged", after_version=first[-1].version, limit=3)
    assert [e.version for e in second] == [4, 5, 6]
    last = ledger.history(ALICE, "paged", after_version=6, limit=3)
    assert [e.version for e in last] == [7, 8]
    assert ledger.history(ALICE, "paged", after_version=8, limit=3) == []
    with pytest.raises(InvalidInput, match="limit"):
        ledger.history(ALICE, "paged", limit=0)
