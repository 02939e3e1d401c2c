"""Erasure by crypto-shredding, through the public API, on SQLite and PostgreSQL.

A session's content is encrypted at rest with a data key of its own (or of its
user); ``erase`` destroys the key and records ``Erased``. Afterwards every read
shows the content as erased while event types, actors, times, counters and the
hash chain stay -- ``verify`` still passes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

from chatledger import (
    ERASED,
    AccessDenied,
    Erased,
    InMemoryArchiveStore,
    InvalidInput,
    MessageAdded,
    SessionErased,
    SessionLedger,
    StoreUnavailable,
    UnknownSession,
)
from erasure_support import SECRET, fill, holds_secret
from support import ADMIN, ALICE, BOB


@pytest.fixture
def make_ledger(make_ledger: Callable[..., SessionLedger]) -> Callable[..., SessionLedger]:
    """Ledgers on the test database with encryption on (the default is off)."""
    return functools.partial(make_ledger, encryption=True)


def test_an_erased_session_reads_as_erased_and_keeps_its_facts(ledger: SessionLedger) -> None:
    """After erase: session, context, state and history show ERASED; ids, roles, counters,
    types, actors and times are as before, and verify passes."""
    fill(ledger)
    before = ledger.session(ALICE, "s1")
    history_before = ledger.history(ALICE, "s1")
    assert holds_secret(before)

    result = ledger.erase(ALICE, "s1")

    assert result.erased == ("s1",) and result.key_ids and result.unencrypted_events == 0
    assert result.purged
    after = ledger.session(ALICE, "s1")
    assert not holds_secret(after) and after.status == "erased"
    assert [m.content for m in after.buffer] == [ERASED] * len(before.buffer)
    assert [(m.id, m.role, m.tokens) for m in after.buffer] == [
        (m.id, m.role, m.tokens) for m in before.buffer
    ]
    counters = ("message_count", "commit_count", "pending_tokens", "turn_count", "archive_count")
    assert {c: getattr(after, c) for c in counters} == {c: getattr(before, c) for c in counters}
    assert after.archives[0].overview == ERASED and after.state == {"code": ERASED}
    assert after.task.objective == ERASED and after.extraction_summary == ERASED
    assert not holds_secret(ledger.context(ALICE, "s1"))
    assert ledger.state(ALICE, "s1").state == {"code": ERASED}
    history = ledger.history(ALICE, "s1")
    assert not holds_secret([h.event.model_dump(mode="json") for h in history])
    assert [(h.type, h.actor, h.timestamp) for h in history[:-1]] == [
        (h.type, h.actor, h.timestamp) for h in history_before
    ]
    assert isinstance(history[-1].event, Erased) and history[-1].actor == ALICE
    assert ledger.verify(ALICE, "s1").ok


def test_time_travel_to_before_the_erasure_shows_erased_content(ledger: SessionLedger) -> None:
    """Every earlier version, by number or by time, reads as erased (never the old text)."""
    fill(ledger)
    first = ledger.history(ALICE, "s1")[0]
    ledger.erase(ALICE, "s1")
    view = ledger.session(ALICE, "s1", at_version=2)
    assert view.buffer[0].content == ERASED and view.buffer[0].tokens > 1
    assert not holds_secret(ledger.session(ALICE, "s1", at_time=first.timestamp))
    assert not holds_secret(ledger.diff(ALICE, "s1", 1, 6))
    for version in range(1, ledger.session(ALICE, "s1").version + 1):
        assert not holds_secret(ledger.session(ALICE, "s1", at_version=version))


def test_a_cold_ledger_replays_the_erased_session_to_the_same_state(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Redacted in memory by Erased, or read without its key from the store: the same state."""
    writer = make_ledger()
    fill(writer)
    writer.erase(ALICE, "s1")
    warm = writer.session(ALICE, "s1")
    cold = make_ledger(cache_size=0).session(ALICE, "s1")
    assert cold == warm


def test_an_erased_session_takes_no_more_writes(ledger: SessionLedger) -> None:
    """Every write to an erased session raises SessionErased and records nothing; so does a
    fork of it."""
    fill(ledger)
    ledger.erase(ALICE, "s1")
    version = ledger.session(ALICE, "s1").version
    writes: list[Callable[[], object]] = [
        lambda: ledger.add_message(ALICE, "s1", "user", "hello again"),
        lambda: ledger.add_items(ALICE, "s1", [{"role": "user", "content": "x"}]),
        lambda: ledger.update_state(ALICE, "s1", {"a": 1}),
        lambda: ledger.set_task(ALICE, "s1", {"objective": "new"}),
        lambda: ledger.commit(ALICE, "s1"),
        lambda: ledger.close_session(ALICE, "s1"),
        lambda: ledger.delete_session(ALICE, "s1"),
        lambda: ledger.fork(ALICE, "s1", 2, "s1-copy"),
    ]
    for write in writes:
        with pytest.raises(SessionErased):
            write()
    assert ledger.session(ALICE, "s1").version == version
    with pytest.raises(UnknownSession):
        ledger.session(ALICE, "s1-copy")


def test_erasing_twice_records_nothing_the_second_time(ledger: SessionLedger) -> None:
    """A second erase is not an error: it lists the session under already_erased."""
    fill(ledger)
    first = ledger.erase(ALICE, "s1")
    version = ledger.session(ALICE, "s1").version
    second = ledger.erase(ALICE, "s1")
    assert (second.erased, second.already_erased) == ((), ("s1",))
    assert set(second.key_ids) == set(first.key_ids)
    assert ledger.session(ALICE, "s1").version == version


def test_the_tenant_rule_holds_for_erasure(ledger: SessionLedger) -> None:
    """A member cannot erase another account's session or erase an account; an admin can."""
    fill(ledger, "s1", ALICE)
    fill(ledger, "s1", BOB)
    ledger.update_state(ALICE, "s1", {}, shared_state={"app:shop": {"code": SECRET}})
    with pytest.raises(AccessDenied):
        ledger.erase(BOB, "s1", account_id="acme")
    with pytest.raises(AccessDenied):
        ledger.erase_user(BOB, "alice", account_id="acme")
    with pytest.raises(AccessDenied):
        ledger.erase_tenant(ALICE, "acme")
    with pytest.raises(UnknownSession):
        ledger.erase(ALICE, "no-such-session")
    assert holds_secret(ledger.session(ALICE, "s1"))
    result = ledger.erase_tenant(ADMIN, "acme")
    assert result.erased == ("s1", "~state:app:shop") and result.scope == "tenant"
    assert not holds_secret(ledger.session(ALICE, "s1"))
    assert not holds_secret(ledger.shared_state(ALICE, "app:shop"))  # the account's scopes too
    assert holds_secret(ledger.session(BOB, "s1"))  # another account: untouched


def test_erase_leaves_other_sessions_alone(ledger: SessionLedger) -> None:
    """Only the erased session's content goes; a session of the same account stays readable."""
    fill(ledger, "s1")
    fill(ledger, "s2")
    ledger.erase(ALICE, "s1")
    assert not holds_secret(ledger.session(ALICE, "s1"))
    assert holds_secret(ledger.session(ALICE, "s2"))
    assert ledger.verify(ALICE).ok


def test_erase_user_erases_the_sessions_the_user_started(ledger: SessionLedger) -> None:
    """erase_user takes every session the user started in the account, and no other."""
    carol = ALICE.model_copy(update={"user_id": "carol"})
    fill(ledger, "a1", ALICE)
    fill(ledger, "a2", ALICE)
    fill(ledger, "c1", carol)
    ledger.update_state(ALICE, "a1", {}, shared_state={"app:shop": {"code": SECRET}})
    result = ledger.erase_user(carol, "alice")
    assert sorted(result.erased) == ["a1", "a2"] and result.user_id == "alice"
    assert not holds_secret(ledger.session(ALICE, "a1"))
    assert not holds_secret(ledger.session(ALICE, "a2"))
    assert holds_secret(ledger.session(carol, "c1"))
    assert holds_secret(ledger.shared_state(ALICE, "app:shop"))  # the account's, not alice's
    assert ledger.verify(ALICE).ok


def test_with_user_keys_a_user_is_erased_at_once_and_a_session_alone_is_refused(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """key_scope 'user': erase of one session is refused (its key is the user's); erase_user
    destroys the one key of the user; the user's next session gets a new key."""
    ledger = make_ledger(key_scope="user", busy_timeout=1)  # the sweep lasts 1 s + this
    fill(ledger, "a1")
    fill(ledger, "a2")
    ledger.update_state(ALICE, "a1", {}, shared_state={"app:shop": {"code": SECRET}})
    with pytest.raises(InvalidInput, match="erase_user"):
        ledger.erase(ALICE, "a1")
    result = ledger.erase_user(ALICE, "alice")
    assert sorted(result.erased) == ["a1", "a2"] and len(result.key_ids) == 1
    assert not holds_secret(ledger.session(ALICE, "a2"))
    assert holds_secret(ledger.shared_state(ALICE, "app:shop"))  # the account's, not alice's
    fill(ledger, "a3")
    assert holds_secret(ledger.session(ALICE, "a3"))
    assert ledger.verify(ALICE).ok


def test_read_models_show_the_erasure(ledger: SessionLedger) -> None:
    """The working set marks the session erased, archives read as erased, the audit log
    records Erased -- and a rebuild from the ledger shows the same."""
    fill(ledger)
    ledger.erase(ALICE, "s1")
    ledger.read_models.catch_up()
    (entry,) = ledger.working_set(ALICE, include_evicted=True)
    assert entry.status == "erased"
    assert entry.status not in {e.status for e in ledger.working_set(ALICE)}
    archives = ledger.archives(ALICE, "s1", include_merged=True)
    assert archives and all(a.overview == a.abstract == ERASED for a in archives)
    assert ledger.audit(ALICE, types=["Erased"])[0].summary.startswith("content erased")
    assert [u.call_count for u in ledger.usage(ALICE)] == [1]
    ledger.read_models.rebuild()
    assert not holds_secret(ledger.archives(ALICE, "s1", include_merged=True))


def test_archive_bodies_are_sealed_and_erased(make_ledger: Callable[..., SessionLedger]) -> None:
    """The archive store holds the body encrypted; archive_body opens it, until erasure."""
    store = InMemoryArchiveStore()
    ledger = make_ledger(archive_store=store)
    ledger.add_message(ALICE, "s1", "user", f"My code is {SECRET}.")
    archive_id = ledger.commit(ALICE, "s1").archive_id
    assert archive_id is not None
    stored = store.get(archive_id)
    assert stored is not None and not holds_secret(stored)
    body = ledger.archive_body(ALICE, "s1", archive_id)
    assert body is not None and SECRET in body.messages[0].content
    ledger.erase(ALICE, "s1")
    erased = ledger.archive_body(ALICE, "s1", archive_id)
    assert erased is not None and erased.messages[0].content == ERASED
    assert erased.messages[0].id == body.messages[0].id


def test_snapshots_of_an_erased_session_are_deleted(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Erasure deletes the session's snapshots; loads replay its (erased) events instead."""
    ledger = make_ledger(snapshot_interval=2)
    for n in range(4):
        ledger.add_message(ALICE, "s1", "user", f"{SECRET} {n}")
        ledger.commit(ALICE, "s1")
    assert ledger.verify(ALICE).snapshots_checked > 0
    result = ledger.erase(ALICE, "s1")
    assert result.snapshots_deleted > 0
    assert ledger.verify(ALICE).snapshots_checked == 0
    assert not holds_secret(make_ledger(cache_size=0).session(ALICE, "s1"))


def test_exports_after_erasure_hold_no_content_and_import_as_erased(
    make_ledger: Callable[..., SessionLedger], tmp_path: Any
) -> None:
    """An export carries the data keys of what it exports, so it imports readable; one made
    after erasure carries neither key nor content, and imports as erased, verified."""
    ledger = make_ledger()
    fill(ledger, "s1")
    fill(ledger, "s2")
    before = list(ledger.export(ALICE))
    ledger.erase(ALICE, "s1")
    after = list(ledger.export(ALICE))
    assert SECRET not in "\n".join(after)
    assert SECRET not in "\n".join(before)  # encrypted at rest, keys beside it
    copy = SessionLedger(f"sqlite:///{tmp_path / 'copy.db'}", encryption=True)
    try:
        copy.import_(before)
        assert holds_secret(copy.session(ALICE, "s1"))
    finally:
        copy.close()
    erased_copy = SessionLedger(f"sqlite:///{tmp_path / 'erased.db'}", encryption=True)
    try:
        erased_copy.import_(after)
        assert not holds_secret(erased_copy.session(ALICE, "s1"))
        assert holds_secret(erased_copy.session(ALICE, "s2"))
        assert erased_copy.verify(ALICE).ok
    finally:
        erased_copy.close()


def test_content_stored_unencrypted_is_erased_only_when_the_caller_accepts_it(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """encryption=False stores content in the clear, which no key can erase: erase refuses
    (nothing recorded); with allow_unencrypted it records Erased and redacts the session's
    state, says how many events keep their content, and those keep it."""
    ledger = make_ledger(encryption=False)
    fill(ledger)
    fill(ledger, "s2")
    version = ledger.session(ALICE, "s1").version
    for erase in (
        lambda: ledger.erase(ALICE, "s1"),
        lambda: ledger.erase_user(ALICE, "alice"),
        lambda: ledger.erase_tenant(ADMIN, "acme"),
    ):
        with pytest.raises(InvalidInput, match="allow_unencrypted"):
            erase()
    assert ledger.session(ALICE, "s1").version == version
    result = ledger.erase(ALICE, "s1", allow_unencrypted=True)
    assert result.unencrypted_events > 0 and result.key_ids == ()
    assert not holds_secret(ledger.session(ALICE, "s1"))
    assert any(
        isinstance(h.event, MessageAdded) and SECRET in h.event.message.content
        for h in ledger.history(ALICE, "s1")
    )
    assert ledger.verify(ALICE).ok


def test_a_deleted_incarnation_leaves_no_readable_content(
    make_ledger: Callable[..., SessionLedger], tmp_path: Any
) -> None:
    """Deleting (encryption on) destroys the incarnation's key: a member's history, time
    travel, context and archives show only the new incarnation; the admin's audit and a
    member's export (imported elsewhere) keep the old events with their content erased;
    the new incarnation has a key of its own and reads back."""
    ledger = make_ledger()
    fill(ledger, "s1")
    old_version = ledger.session(ALICE, "s1").version
    ledger.delete_session(ALICE, "s1")
    ledger.add_message(ALICE, "s1", "user", "after the deletion")
    assert [e.type for e in ledger.history(ALICE, "s1")] == ["Restarted", "MessageAdded"]
    for read in (ledger.session, ledger.context, ledger.state):
        with pytest.raises(UnknownSession):
            read(ALICE, "s1", at_version=old_version)
    ledger.read_models.catch_up()
    assert ledger.archives(ALICE, "s1", include_merged=True) == []
    assert len(ledger.archives(ADMIN, "s1", account_id="acme", include_merged=True)) == 1
    audit = ledger.history(ADMIN, "s1", account_id="acme")
    assert not holds_secret([e.model_dump(mode="json") for e in audit])
    assert not holds_secret(ledger.session(ADMIN, "s1", at_version=old_version, account_id="acme"))
    lines = list(ledger.export(ALICE))
    copy = SessionLedger(f"sqlite:///{tmp_path / 'copy.db'}", encryption=True)
    try:
        copy.import_(lines)
        assert not holds_secret(copy.history(ADMIN, "s1", account_id="acme"))
        assert copy.session(ALICE, "s1").buffer[0].content == "after the deletion"
        assert copy.verify(ALICE).ok
    finally:
        copy.close()
    assert ledger.verify(ALICE).ok


def test_a_delete_that_must_erase_is_refused_where_it_cannot(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """delete_session(erase=True) with encryption off, with one key per user, or over content
    stored unencrypted is InvalidInput and records nothing."""
    for ledger in (make_ledger(encryption=False), make_ledger(key_scope="user")):
        ledger.add_message(ALICE, "d1", "user", "hello")
        version = ledger.session(ALICE, "d1").version
        with pytest.raises(InvalidInput, match="encryption"):
            ledger.delete_session(ALICE, "d1", erase=True)
        assert ledger.session(ALICE, "d1").version == version
        ledger.delete_session(ALICE, "d1")  # a plain delete: hidden from members
        assert [e.type for e in ledger.history(ALICE, "d1")] == ["Deleted"]


def test_a_delete_killed_between_key_and_event_is_completed_by_deleting_again(
    make_ledger: Callable[..., SessionLedger], monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the Deleted cannot be recorded after the incarnation's key was destroyed (a crash,
    here a failing write), the session reads erased content and takes no more writes until
    delete_session runs again -- which records Erased and Deleted, and the key starts
    afresh."""
    ledger = make_ledger()
    fill(ledger, "s1")
    sessions = ledger.core.sessions
    real_write = sessions.write

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise StoreUnavailable("the process died here")

    monkeypatch.setattr(sessions, "write", failing)
    with pytest.raises(StoreUnavailable):
        ledger.delete_session(ALICE, "s1")
    monkeypatch.setattr(sessions, "write", real_write)
    assert not holds_secret(ledger.session(ALICE, "s1"))
    with pytest.raises(SessionErased):
        ledger.add_message(ALICE, "s1", "user", "written under a destroyed key")
    ledger.delete_session(ALICE, "s1")
    assert [e.type for e in ledger.history(ADMIN, "s1", account_id="acme")][-2:] == [
        "Erased",
        "Deleted",
    ]
    ledger.add_message(ALICE, "s1", "user", "a new start")
    assert ledger.session(ALICE, "s1").buffer[0].content == "a new start"
