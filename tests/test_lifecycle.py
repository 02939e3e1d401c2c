"""Starting sessions explicitly, concurrent get-or-create, eviction and deletion."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from chatledger import ClientContext, InvalidInput, SessionLedger, UnknownSession
from support import ADMIN, ALICE, BOB


def test_get_or_create_starts_once_and_then_returns_the_session(ledger: SessionLedger) -> None:
    """The first call creates the session with its context; later calls return it unchanged."""
    context = ClientContext(cwd="/srv", meta={"model": "m"})
    view, created = ledger.get_or_create(ALICE, "s1", context=context)
    assert created and view.version == 1 and view.context == context
    again, created_again = ledger.get_or_create(ALICE, "s1", context=ClientContext(cwd="/other"))
    assert not created_again and again.context == context
    assert [e.type for e in ledger.history(ALICE, "s1")] == ["Started"]


def test_concurrent_get_or_create_yields_one_session(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Eight threads on eight ledgers creating one key at once record exactly one Started."""
    ledgers = [make_ledger() for _ in range(8)]
    barrier = threading.Barrier(len(ledgers))
    outcomes: list[bool] = []

    def worker(ledger: SessionLedger) -> None:
        barrier.wait(10)
        outcomes.append(ledger.get_or_create(ALICE, "race")[1])

    threads = [threading.Thread(target=worker, args=(ledger,)) for ledger in ledgers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == [False] * 7 + [True]
    assert [e.type for e in ledgers[0].history(ALICE, "race")] == ["Started"]


def test_evict_records_the_reason_and_keeps_history(ledger: SessionLedger) -> None:
    """Evicted is recorded with reason and idle seconds; buffer and archives stay readable."""
    ledger.add_message(ALICE, "s1", "user", "hi")
    view = ledger.evict(ALICE, "s1", reason="idle", idle_seconds=900.0)
    assert view.evicted and [m.content for m in view.buffer] == ["hi"]
    last = ledger.history(ALICE, "s1")[-1]
    assert last.type == "Evicted"
    assert (last.event.reason, last.event.idle_seconds) == ("idle", 900.0)  # type: ignore[attr-defined]


def test_a_message_after_eviction_makes_the_session_live_again(ledger: SessionLedger) -> None:
    """Adding a message to an evicted session clears the evicted flag."""
    ledger.add_message(ALICE, "s1", "user", "hi")
    ledger.evict(ALICE, "s1")
    ledger.add_message(ALICE, "s1", "user", "back")
    assert not ledger.session(ALICE, "s1").evicted


def test_evict_is_tenant_scoped(ledger: SessionLedger) -> None:
    """Members cannot evict another tenant's session; admins can, recorded as the admin."""
    ledger.add_message(BOB, "s1", "user", "hi")
    with pytest.raises(UnknownSession):
        ledger.evict(ALICE, "s1")
    ledger.evict(ADMIN, "s1", account_id=BOB.account_id, reason="admin")
    assert ledger.history(BOB, "s1")[-1].actor == ADMIN


@pytest.mark.parametrize(("reason", "idle"), [("bored", None), ("idle", -1.0), ("idle", "x")])
def test_bad_eviction_arguments_record_nothing(
    ledger: SessionLedger, reason: str, idle: object
) -> None:
    """An unknown reason or a negative/non-numeric idle time raises InvalidInput."""
    ledger.add_message(ALICE, "s1", "user", "hi")
    with pytest.raises(InvalidInput):
        ledger.evict(ALICE, "s1", reason=reason, idle_seconds=idle)  # type: ignore[arg-type]
    assert len(ledger.history(ALICE, "s1")) == 2


def test_close_session_records_closed_and_a_message_reopens_it(ledger: SessionLedger) -> None:
    """close_session records Closed (out of the working set); a new message makes it live."""
    ledger.add_message(ALICE, "s1", "user", "hi")
    assert ledger.close_session(ALICE, "s1").evicted
    assert ledger.history(ALICE, "s1")[-1].type == "Closed"
    ledger.add_message(ALICE, "s1", "user", "again")
    assert not ledger.session(ALICE, "s1").evicted


def test_a_deleted_session_is_gone_but_its_history_stays(ledger: SessionLedger) -> None:
    """delete_session: reads raise UnknownSession, writes that cannot start one too; the
    earlier versions are an admin's to read (a member's history is the Deleted alone), and
    the chain verifies."""
    ledger.add_message(ALICE, "d1", "user", "Order 7?")
    ledger.commit(ALICE, "d1")
    ledger.update_state(ALICE, "d1", {"k": 1})
    before = ledger.session(ALICE, "d1").version
    ledger.delete_session(ALICE, "d1")
    with pytest.raises(UnknownSession, match="deleted"):
        ledger.session(ALICE, "d1")
    with pytest.raises(UnknownSession):
        ledger.session(ALICE, "d1", at_version=before + 1)
    with pytest.raises(UnknownSession, match="only an admin"):
        ledger.session(ALICE, "d1", at_version=before)
    assert ledger.session(ADMIN, "d1", at_version=before, account_id="acme").commit_count == 1
    for call in (
        lambda: ledger.commit(ALICE, "d1"),
        lambda: ledger.evict(ALICE, "d1"),
        lambda: ledger.close_session(ALICE, "d1"),
        lambda: ledger.delete_session(ALICE, "d1"),
        lambda: ledger.items(ALICE, "d1"),
    ):
        with pytest.raises(UnknownSession):
            call()
    assert [e.type for e in ledger.history(ALICE, "d1")] == ["Deleted"]
    assert ledger.history(ADMIN, "d1", account_id="acme")[-1].type == "Deleted"
    assert ledger.verify(ALICE).ok
    ledger.read_models.catch_up()
    assert [r.session_key for r in ledger.working_set(ALICE)] == []
    assert [r.status for r in ledger.working_set(ALICE, include_evicted=True)] == ["deleted"]
    assert ledger.archives(ALICE, "d1") == []
    assert ledger.archives(ALICE, "d1", include_merged=True) == []  # a member: gone
    audit = ledger.archives(ADMIN, "d1", include_merged=True, account_id="acme")
    assert [a.live for a in audit] == [False]


def test_a_deleted_sessions_key_starts_afresh(ledger: SessionLedger) -> None:
    """The next message under a deleted key starts a fresh session: no buffer, archives,
    counters or state from before, a new context."""
    ledger.add_message(ALICE, "d1", "user", "old", context=ClientContext(cwd="/old"))
    ledger.commit(ALICE, "d1")
    ledger.update_state(ALICE, "d1", {"k": 1})
    ledger.delete_session(ALICE, "d1")
    ledger.add_message(ALICE, "d1", "user", "new", context=ClientContext(cwd="/new"))
    view = ledger.session(ALICE, "d1")
    assert [m.content for m in view.buffer] == ["new"]
    assert (view.message_count, view.commit_count, view.archives, view.state) == (1, 0, (), {})
    assert view.context.cwd == "/new" and view.status == "live"
    assert [e.type for e in ledger.history(ALICE, "d1")] == ["Restarted", "MessageAdded"]
    assert [e.type for e in ledger.history(ADMIN, "d1", account_id="acme")][-3:] == [
        "Deleted", "Restarted", "MessageAdded",
    ]  # fmt: skip
    created = ledger.get_or_create(ALICE, "d2")
    ledger.delete_session(ALICE, "d2")
    assert ledger.get_or_create(ALICE, "d2")[1] is True and created[1] is True
    ledger.commit(ALICE, "d1")
    ledger.read_models.catch_up()
    assert [a.live for a in ledger.archives(ALICE, "d1", include_merged=True)] == [True]
    audit = ledger.archives(ADMIN, "d1", include_merged=True, account_id="acme")
    assert [a.live for a in audit] == [False, True]  # the deleted incarnation's, for audit


def test_a_deletion_by_another_ledger_hides_the_old_incarnation_at_once(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """A ledger holding the session in its cache sees another ledger's (process's) deletion
    on its next read: its member reads start at the Deleted."""
    reader, deleter = make_ledger(), make_ledger()
    reader.add_message(ALICE, "d1", "user", "cached here")
    assert [e.type for e in reader.history(ALICE, "d1")] == ["Started", "MessageAdded"]
    deleter.delete_session(ALICE, "d1")
    assert [e.type for e in reader.history(ALICE, "d1")] == ["Deleted"]
    with pytest.raises(UnknownSession):
        reader.session(ALICE, "d1", at_version=2)


def test_a_member_paging_into_a_deleted_incarnation_is_told_so(ledger: SessionLedger) -> None:
    """history(after_version=) inside a deleted incarnation is UnknownSession for a member
    (never a silent jump to the new one); from 0 it starts at the current incarnation."""
    for text in ("one", "two", "three"):
        ledger.add_message(ALICE, "d1", "user", text)
    ledger.delete_session(ALICE, "d1")
    ledger.add_message(ALICE, "d1", "user", "again")
    with pytest.raises(UnknownSession, match="deleted"):
        ledger.history(ALICE, "d1", after_version=2)
    assert [e.version for e in ledger.history(ALICE, "d1")] == [6, 7]
    assert [e.version for e in ledger.history(ALICE, "d1", after_version=5)] == [6, 7]
    assert len(ledger.history(ADMIN, "d1", after_version=2, account_id="acme")) == 5
