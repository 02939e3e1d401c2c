"""Read-side queries a timeline needs: paged and sampled event facts, working-set filters,
and verify() of one session of another account (admins)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chatledger import (
    AccessDenied,
    AuditEntry,
    InvalidInput,
    ReadModels,
    SessionLedger,
    TimelineEntry,
    UnknownSession,
)
from support import ADMIN, ALICE, BOB


@pytest.fixture
def models(ledger: SessionLedger) -> Iterator[ReadModels]:
    """Read models of the test ledger (closed afterwards)."""
    with ReadModels(ledger) as opened:
        yield opened


def _grow(ledger: SessionLedger, key: str = "long", count: int = 30) -> None:
    """A session of ``count`` messages plus a commit and a tool call: 33 events."""
    ledger.add_messages(
        ALICE, key, [{"role": "user", "content": f"question {i}"} for i in range(count)]
    )
    ledger.commit(ALICE, key)
    ledger.add_message(
        ALICE,
        key,
        "tool",
        "3 rows",
        tool_call={"tool_name": "db.query", "prompt_tokens": 5, "completion_tokens": 7},
    )


def test_timeline_pages_from_either_end_with_the_counters_after_each_event(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """Pages come oldest first; ``newest`` pages back from the end; counters match the session."""
    _grow(ledger)
    first = models.timeline(ALICE, "long", limit=5)
    assert [e.version for e in first] == [1, 2, 3, 4, 5]
    assert first[0].event_type == "Started" and first[1].event_type == "MessageAdded"
    assert models.timeline(ALICE, "long", after_version=5, limit=2)[0].version == 6
    last = models.timeline(ALICE, "long", newest=True, limit=3)
    assert [e.version for e in last] == [31, 32, 33]
    before = models.timeline(ALICE, "long", newest=True, before_version=31, limit=2)
    assert [e.version for e in before] == [29, 30]
    for entry in (*first, *last):
        view = ledger.session(ALICE, "long", at_version=entry.version)
        assert (entry.message_count, entry.pending_tokens, entry.turn_count) == (
            view.message_count,
            view.pending_tokens,
            view.turn_count,
        )
        assert (entry.commit_count, entry.archive_count, entry.status) == (
            view.commit_count,
            view.archive_count,
            view.status,
        )
    tool = last[-1]
    assert (tool.tool_name, tool.tool_status, tool.prompt_tokens, tool.completion_tokens) == (
        "db.query",
        "success",
        5,
        7,
    )
    assert last[-2].event_type == "Committed" and last[-2].last_commit_at is not None
    assert models.timeline(ALICE, "long", after_version=33) == []


def test_timeline_entries_agree_with_the_audit_log(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """A timeline row carries exactly the audit entry of its event, plus the counters."""
    _grow(ledger, count=3)
    audit = models.audit(ALICE, session="long")
    timeline = models.timeline(ALICE, "long")
    assert all(isinstance(e, TimelineEntry) for e in timeline)
    fields = set(AuditEntry.model_fields)
    assert [e.model_dump(include=fields) for e in timeline] == [e.model_dump() for e in audit]


def test_timeline_sample_spreads_points_evenly_and_keeps_both_ends(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """A long session is sampled at evenly spaced versions; a short one comes whole."""
    _grow(ledger)
    sample = models.timeline_sample(ALICE, "long", points=5)
    assert [e.version for e in sample] == [1, 9, 17, 25, 33]
    assert [e.version for e in models.timeline_sample(ALICE, "long", points=40)] == list(
        range(1, 34)
    )
    ledger.add_message(ALICE, "short", "user", "hi")
    assert [e.version for e in models.timeline_sample(ALICE, "short")] == [1, 2]


def test_timeline_is_tenant_scoped_and_refuses_bad_arguments(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """Another account's key is unknown to a member, naming it is denied; bad pages are invalid."""
    ledger.add_message(BOB, "secret", "user", "bob's")
    with pytest.raises(UnknownSession):
        models.timeline(ALICE, "secret")
    with pytest.raises(UnknownSession):
        models.timeline_sample(ALICE, "secret")
    with pytest.raises(AccessDenied):
        models.timeline(ALICE, "secret", account_id="globex")
    assert [e.account_id for e in models.timeline(ADMIN, "secret", account_id="globex")] == [
        "globex",
        "globex",
    ]
    for bad in (
        {"limit": 0},
        {"after_version": -1},
        {"before_version": 0},
        {"after_version": True},
    ):
        with pytest.raises(InvalidInput):
            models.timeline(BOB, "secret", **bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        models.timeline_sample(BOB, "secret", points=1)


def test_working_set_filters_by_status_and_key_and_orders_by_pending_tokens(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """``status`` keeps one status, ``search`` matches part of a key ignoring case."""
    ledger.add_message(ALICE, "Ticket-1", "user", "short")
    ledger.add_message(ALICE, "ticket-2", "user", "a much longer message " * 20)
    ledger.add_message(ALICE, "chat-3", "user", "medium length " * 3)
    ledger.add_message(ALICE, "100%_done", "user", "x")
    ledger.evict(ALICE, "chat-3")
    models.catch_up()

    def keys(**kwargs: object) -> list[str]:
        return [r.session_key for r in models.working_set(ALICE, **kwargs)]  # type: ignore[arg-type]

    assert keys(status="evicted") == ["chat-3"]
    assert keys(status="closed") == []
    assert sorted(keys(search="TICKET")) == ["Ticket-1", "ticket-2"]
    assert keys(search="%_") == ["100%_done"]  # LIKE wildcards match themselves
    assert keys(order="pending_tokens")[0] == "ticket-2"
    assert keys(search="") == keys()
    for bad in ({"status": "gone"}, {"search": 7}, {"search": "x" * 257}, {"order": "size"}):
        with pytest.raises(InvalidInput):
            models.working_set(ALICE, **bad)  # type: ignore[arg-type]


def test_admins_verify_one_session_of_another_account(ledger: SessionLedger) -> None:
    """verify(account_id=) checks that account's session; members may not name another account."""
    ledger.add_message(ALICE, "same", "user", "alice")
    ledger.add_message(BOB, "same", "user", "bob")
    report = ledger.verify(ADMIN, "same", account_id="globex")
    assert report.ok and [h.tenant for h in report.heads] == ["globex"]
    assert [h.tenant for h in ledger.verify(ADMIN, account_id="acme").heads] == ["acme"]
    with pytest.raises(AccessDenied):
        ledger.verify(ALICE, "same", account_id="globex")
    with pytest.raises(AccessDenied):
        ledger.verify(ALICE, account_id="globex")


def test_forks_lists_the_sessions_forked_from_a_session(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """forks() names each fork and the origin version it copies; other origins' forks are not
    listed, nor another account's; an unknown origin is UnknownSession."""
    _grow(ledger, count=4)
    ledger.add_message(ALICE, "other", "user", "another origin")
    ledger.fork(ALICE, "long", 3, "retry-a")
    ledger.fork(ALICE, "other", 2, "retry-other")
    ledger.fork(ALICE, "long", 6, "retry-b")
    ledger.add_message(BOB, "long", "user", "same key, other account")
    ledger.fork(BOB, "long", 2, "bobs-fork")
    forks = models.forks(ALICE, "long")
    assert [(f.session_key, f.origin_version) for f in forks] == [("retry-a", 3), ("retry-b", 6)]
    assert forks[0].actor.user_id == "alice" and forks[0].account_id == "acme"
    assert models.forks(ALICE, "retry-a") == []
    assert [f.session_key for f in models.forks(ADMIN, "long", account_id="globex")] == [
        "bobs-fork"
    ]
    with pytest.raises(UnknownSession):
        models.forks(ALICE, "missing")
    with pytest.raises(AccessDenied):
        models.forks(ALICE, "long", account_id="globex")
