"""Idempotency keys: a retry after an unknown outcome records nothing twice.

Every write takes ``idempotency_key``; the key is stored with the first event
of the write (unique per session), so a retry of the same call returns the
result of the write that landed. On PostgreSQL the backend is killed around
COMMIT to produce the unknown outcome for real.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest

from chatledger import (
    ClientContext,
    InvalidInput,
    SessionErased,
    SessionLedger,
    WriteOutcomeUnknown,
)
from support import ALICE, store_state


def test_a_keyed_message_retried_is_recorded_once(ledger: SessionLedger) -> None:
    """add_message twice with one key: one event, and the retry returns the first result."""
    first = ledger.add_message(ALICE, "s1", "user", "hello", idempotency_key="req-1")
    state = store_state(ledger)
    again = ledger.add_message(ALICE, "s1", "user", "hello", idempotency_key="req-1")
    assert again == first
    assert store_state(ledger) == state
    assert [e.type for e in ledger.history(ALICE, "s1")] == ["Started", "MessageAdded"]


def test_a_keyed_batch_on_an_evicted_session_is_recorded_once(ledger: SessionLedger) -> None:
    """add_messages (with a Reactivated in front) retried returns the same ids and positions."""
    ledger.add_message(ALICE, "s1", "user", "hi")
    ledger.evict(ALICE, "s1")
    batch = [{"role": "user", "content": "back"}, {"role": "assistant", "content": "welcome"}]
    first = ledger.add_messages(ALICE, "s1", batch, idempotency_key="batch-7")
    state = store_state(ledger)
    assert ledger.add_messages(ALICE, "s1", batch, idempotency_key="batch-7") == first
    assert store_state(ledger) == state
    ledger.add_message(ALICE, "s1", "user", "later")
    assert ledger.add_messages(ALICE, "s1", batch, idempotency_key="batch-7") == first


def test_a_key_reused_for_a_different_write_is_refused(ledger: SessionLedger) -> None:
    """The same key with other content is InvalidInput, and nothing is recorded."""
    ledger.add_message(ALICE, "s1", "user", "hello", idempotency_key="req-1")
    state = store_state(ledger)
    with pytest.raises(InvalidInput, match="idempotency key"):
        ledger.add_message(ALICE, "s1", "user", "something else", idempotency_key="req-1")
    with pytest.raises(InvalidInput, match="idempotency key"):
        ledger.commit(ALICE, "s1", idempotency_key="req-1")
    assert store_state(ledger) == state


@pytest.mark.parametrize("bad", ["", "x" * 300, "tab\t", 7])
def test_a_bad_idempotency_key_is_invalid_input(ledger: SessionLedger, bad: Any) -> None:
    """Keys follow the rule of session keys (1-256 printable characters)."""
    with pytest.raises(InvalidInput, match="idempotency key"):
        ledger.add_message(ALICE, "s1", "user", "x", idempotency_key=bad)
    assert store_state(ledger).events == 0


def test_every_kind_of_write_takes_a_key(ledger: SessionLedger) -> None:
    """commit, commit_snapshot, merge, fork, evict and close retried return the first result."""
    for i in range(4):
        ledger.add_message(ALICE, "s1", "user", f"Question {i}.")
        first = ledger.commit(ALICE, "s1", idempotency_key=f"c{i}")
        assert first.archived
        assert ledger.commit(ALICE, "s1", idempotency_key=f"c{i}") == first
    ids = [ledger.add_message(ALICE, "s1", "user", f"m{i}").message_id for i in range(2)]
    snap = ledger.commit_snapshot(ALICE, "s1", ids[:1], idempotency_key="snap")
    assert ledger.commit_snapshot(ALICE, "s1", ids[:1], idempotency_key="snap") == snap
    merged = ledger.merge_archives(ALICE, "s1", threshold=2, idempotency_key="merge")
    assert merged.merged
    assert ledger.merge_archives(ALICE, "s1", threshold=2, idempotency_key="merge") == merged
    forked = ledger.fork(ALICE, "s1", 3, "s1-copy", idempotency_key="fork")
    assert ledger.fork(ALICE, "s1", 3, "s1-copy", idempotency_key="fork") == forked
    evicted = ledger.evict(ALICE, "s1", idempotency_key="evict")
    assert ledger.evict(ALICE, "s1", idempotency_key="evict") == evicted
    closed = ledger.close_session(ALICE, "s1-copy", idempotency_key="close")
    assert ledger.close_session(ALICE, "s1-copy", idempotency_key="close") == closed
    types = [e.type for e in ledger.history(ALICE, "s1")]
    assert types.count("Committed") == 5 and types.count("ArchiveMerged") == 1
    assert types.count("Evicted") == 1


def test_racing_retries_with_one_key_record_one_write(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Eight threads (two ledgers) sending the same keyed call at once record it once."""
    ledgers = [make_ledger(), make_ledger()]
    ledgers[0].add_message(ALICE, "s1", "user", "start")
    go = threading.Event()
    results: list[Any] = []

    def send(ledger: SessionLedger) -> None:
        go.wait()
        results.append(ledger.add_message(ALICE, "s1", "user", "once", idempotency_key="k"))

    threads = [threading.Thread(target=send, args=(ledgers[i % 2],)) for i in range(8)]
    for thread in threads:
        thread.start()
    go.set()
    for thread in threads:
        thread.join(30)
    assert len(results) == 8 and all(r == results[0] for r in results)
    contents = [m.content for m in ledgers[0].session(ALICE, "s1").buffer]
    assert contents == ["start", "once"]


# ------------------------------------------------ unknown outcome (PostgreSQL)
@contextmanager
def _connection_lost_at_commit(*, after_commit: bool) -> Iterator[list[int]]:
    """Make the next append lose its connection where it commits -- PostgreSQL appends are
    one autocommitted INSERT -- : the backend is terminated just before that statement is
    sent, or just after it succeeded (its answer then 'lost')."""
    import psycopg

    from chatledger.adapters.append_postgres import PostgresAppender

    real_insert = PostgresAppender.insert
    fired: list[int] = []

    def insert(
        appender: PostgresAppender, cursor: Any, numbered: Any, *, draw: bool = False
    ) -> list[int]:
        if fired:
            return real_insert(appender, cursor, numbered, draw=draw)
        connection = cursor.connection
        fired.append(connection.info.backend_pid)
        if after_commit:
            real_insert(appender, cursor, numbered, draw=draw)
        with psycopg.connect(connection.info.dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (fired[0],))
        if after_commit:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return real_insert(appender, cursor, numbered, draw=draw)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PostgresAppender, "insert", insert)
        yield fired


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("after_commit", [False, True], ids=["lost-before", "landed"])
def test_a_connection_lost_at_commit_is_an_unknown_outcome_a_keyed_retry_settles(
    ledger: SessionLedger, after_commit: bool
) -> None:
    """Killed around COMMIT: WriteOutcomeUnknown says 'may or may not'; the retry records once."""
    ledger.add_message(ALICE, "s1", "user", "before")
    with (
        _connection_lost_at_commit(after_commit=after_commit) as fired,
        pytest.raises(WriteOutcomeUnknown, match="may or may not"),
    ):
        ledger.add_message(ALICE, "s1", "user", "the one", idempotency_key="req-9")
    assert fired, "the COMMIT was never intercepted"
    landed = [m.content for m in ledger.session(ALICE, "s1").buffer]
    assert landed == (["before", "the one"] if after_commit else ["before"])
    retried = ledger.add_message(ALICE, "s1", "user", "the one", idempotency_key="req-9")
    assert [m.content for m in ledger.session(ALICE, "s1").buffer] == ["before", "the one"]
    assert retried.version == 3
    assert ledger.verify(ALICE).ok


# ------------------------------------- every kind of write compares its whole payload
L = SessionLedger
ITEM = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
TWO = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]


def _ids(ledger: L) -> list[str]:
    return [m.id for m in ledger.items(ALICE, "s")]


# (name, the first write -- made with key "k" --, the same key with a different write)
REUSES: list[tuple[str, Callable[[L], Any], Callable[[L], Any]]] = [
    (
        "update_state, other value",
        lambda e: e.update_state(ALICE, "s", {"a": 1}, idempotency_key="k"),
        lambda e: e.update_state(ALICE, "s", {"a": 2}, idempotency_key="k"),
    ),
    (
        "update_state, other keys",
        lambda e: e.update_state(ALICE, "s", {"a": 1}, idempotency_key="k"),
        lambda e: e.update_state(ALICE, "s", {"a": 1, "b": 1}, idempotency_key="k"),
    ),
    (
        "update_state, other shared scope value",
        lambda e: e.update_state(ALICE, "s", {"a": 1}, shared_state={"app:x": {"n": 1}},
                                 idempotency_key="k"),
        lambda e: e.update_state(ALICE, "s", {"a": 1}, shared_state={"app:x": {"n": 2}},
                                 idempotency_key="k"),
    ),
    (
        "update_state, another shared scope",
        lambda e: e.update_state(ALICE, "s", {"a": 1}, shared_state={"app:x": {"n": 1}},
                                 idempotency_key="k"),
        lambda e: e.update_state(ALICE, "s", {"a": 1}, shared_state={"app:y": {"n": 1}},
                                 idempotency_key="k"),
    ),
    (
        "update_state of shared state only, on a session that exists",
        lambda e: (
            e.add_message(ALICE, "s", "user", "hi"),
            e.update_state(ALICE, "s", shared_state={"app:x": {"n": 1}}, idempotency_key="k"),
        ),
        lambda e: e.update_state(ALICE, "s", shared_state={"app:x": {"n": 2}},
                                 idempotency_key="k"),
    ),
    (
        "shared-only update_state, then a message under its key",
        lambda e: (
            e.add_message(ALICE, "s", "user", "hi"),
            e.update_state(ALICE, "s", shared_state={"app:x": {"n": 1}}, idempotency_key="k"),
        ),
        lambda e: e.add_message(ALICE, "s", "user", "hi", idempotency_key="k"),
    ),
    (
        "add_message with state, other state",
        lambda e: e.add_message(ALICE, "s", "user", "hi", state={"a": 1}, idempotency_key="k"),
        lambda e: e.add_message(ALICE, "s", "user", "hi", state={"a": 2}, idempotency_key="k"),
    ),
    (
        "add_message with state, retried without",
        lambda e: e.add_message(ALICE, "s", "user", "hi", state={"a": 1}, idempotency_key="k"),
        lambda e: e.add_message(ALICE, "s", "user", "hi", idempotency_key="k"),
    ),
    (
        "add_message, retried with state",
        lambda e: e.add_message(ALICE, "s", "user", "hi", idempotency_key="k"),
        lambda e: e.add_message(ALICE, "s", "user", "hi", state={"a": 1}, idempotency_key="k"),
    ),
    (
        "add_message with shared state, other shared state",
        lambda e: e.add_message(ALICE, "s", "user", "hi", shared_state={"app:x": {"n": 1}},
                                idempotency_key="k"),
        lambda e: e.add_message(ALICE, "s", "user", "hi", shared_state={"app:x": {"n": 2}},
                                idempotency_key="k"),
    ),
    (
        "add_message, retried with shared state",
        lambda e: e.add_message(ALICE, "s", "user", "hi", idempotency_key="k"),
        lambda e: e.add_message(ALICE, "s", "user", "hi", shared_state={"app:x": {"n": 1}},
                                idempotency_key="k"),
    ),
    (
        "add_message, other role",
        lambda e: e.add_message(ALICE, "s", "user", "hi", idempotency_key="k"),
        lambda e: e.add_message(ALICE, "s", "assistant", "hi", idempotency_key="k"),
    ),
    (
        "add_message, other name",
        lambda e: e.add_message(ALICE, "s", "user", "hi", idempotency_key="k"),
        lambda e: e.add_message(ALICE, "s", "user", "hi", name="bo", idempotency_key="k"),
    ),
    (
        "add_message, other message id",
        lambda e: e.add_message(ALICE, "s", "user", "hi", message_id="m1", idempotency_key="k"),
        lambda e: e.add_message(ALICE, "s", "user", "hi", message_id="m2", idempotency_key="k"),
    ),
    (
        "add_message, other context of the session it started",
        lambda e: e.add_message(ALICE, "s", "user", "hi", context=ClientContext(cwd="/a"),
                                idempotency_key="k"),
        lambda e: e.add_message(ALICE, "s", "user", "hi", context=ClientContext(cwd="/b"),
                                idempotency_key="k"),
    ),
    (
        "add_messages, one message of the two",
        lambda e: e.add_messages(ALICE, "s", TWO, idempotency_key="k"),
        lambda e: e.add_messages(ALICE, "s", TWO[:1], idempotency_key="k"),
    ),
    (
        "add_messages, one more than recorded (and the next write holds it)",
        lambda e: (e.add_messages(ALICE, "s", TWO[:1], idempotency_key="k"),
                   e.add_message(ALICE, "s", "user", "b")),
        lambda e: e.add_messages(ALICE, "s", TWO, idempotency_key="k"),
    ),
    (
        "add_messages, other created_at",
        lambda e: e.add_messages(ALICE, "s", [{**TWO[0], "created_at": datetime(2025, 1, 1,
                                 tzinfo=UTC)}], idempotency_key="k"),
        lambda e: e.add_messages(ALICE, "s", [{**TWO[0], "created_at": datetime(2025, 1, 2,
                                 tzinfo=UTC)}], idempotency_key="k"),
    ),
    (
        "add_items, other item",
        lambda e: e.add_items(ALICE, "s", [ITEM], idempotency_key="k"),
        lambda e: e.add_items(ALICE, "s", [{**ITEM, "id": "x"}], idempotency_key="k"),
    ),
    (
        "add_items, other state",
        lambda e: e.add_items(ALICE, "s", [ITEM], state={"a": [1]}, idempotency_key="k"),
        lambda e: e.add_items(ALICE, "s", [ITEM], state={"a": [2]}, idempotency_key="k"),
    ),
    (
        "remove_items, other ids",
        lambda e: (e.add_messages(ALICE, "s", TWO), e.remove_items(ALICE, "s", _ids(e)[:1],
                   idempotency_key="k")),
        lambda e: e.remove_items(ALICE, "s", _ids(e)[:1], idempotency_key="k"),
    ),
    (
        "pop_item, another expected id",
        lambda e: (e.add_messages(ALICE, "s", TWO), e.pop_item(ALICE, "s", idempotency_key="k")),
        lambda e: e.pop_item(ALICE, "s", expected_id=_ids(e)[0], idempotency_key="k"),
    ),
    (
        "clear_buffer under a pop's key",
        lambda e: (e.add_messages(ALICE, "s", TWO), e.pop_item(ALICE, "s", idempotency_key="k")),
        lambda e: e.clear_buffer(ALICE, "s", idempotency_key="k"),
    ),
    (
        "replace_tail, other items",
        lambda e: (e.add_items(ALICE, "s", [ITEM]), e.replace_tail(ALICE, "s", _ids(e),
                   [{"type": "compaction", "n": 1}], idempotency_key="k")),
        lambda e: e.replace_tail(ALICE, "s", _ids(e), [{"type": "compaction", "n": 2}],
                                 idempotency_key="k"),
    ),
    (
        "commit_snapshot, other ids",
        lambda e: (e.add_messages(ALICE, "s", TWO), e.commit_snapshot(ALICE, "s", _ids(e)[:1],
                   idempotency_key="k")),
        lambda e: e.commit_snapshot(ALICE, "s", _ids(e)[:1], idempotency_key="k"),
    ),
    (
        "commit_snapshot kept, retried not kept",
        lambda e: (e.add_messages(ALICE, "s", TWO), e.commit_snapshot(ALICE, "s", _ids(e)[:1],
                   keep=True, idempotency_key="k")),
        lambda e: e.commit_snapshot(ALICE, "s", _ids(e)[:1], idempotency_key="k"),
    ),
    (
        "evict, other reason",
        lambda e: (e.add_message(ALICE, "s", "user", "hi"),
                   e.evict(ALICE, "s", reason="idle", idempotency_key="k")),
        lambda e: e.evict(ALICE, "s", reason="admin", idempotency_key="k"),
    ),
    (
        "close under a delete's key",
        lambda e: (e.add_message(ALICE, "s", "user", "hi"),
                   e.delete_session(ALICE, "s", idempotency_key="k")),
        lambda e: e.close_session(ALICE, "s", idempotency_key="k"),
    ),
    (
        "delete under a close's key",
        lambda e: (e.add_message(ALICE, "s", "user", "hi"),
                   e.close_session(ALICE, "s", idempotency_key="k")),
        lambda e: e.delete_session(ALICE, "s", idempotency_key="k"),
    ),
    (
        "fork of another version",
        lambda e: (e.add_messages(ALICE, "o", TWO), e.fork(ALICE, "o", 2, "s",
                   idempotency_key="k")),
        lambda e: e.fork(ALICE, "o", 3, "s", idempotency_key="k"),
    ),
]  # fmt: skip


@pytest.mark.parametrize(("name", "first", "again"), REUSES, ids=[r[0] for r in REUSES])
def test_a_key_reused_for_any_other_write_is_refused_and_records_nothing(
    ledger: SessionLedger, name: str, first: Callable[[L], Any], again: Callable[[L], Any]
) -> None:
    """Every kind of keyed write compares what it asks for -- messages, items, state, shared
    state, context, what it removes, replaces, commits or forks -- with what was recorded
    under the key: any difference is InvalidInput, and nothing is recorded."""
    first(ledger)
    state = store_state(ledger)
    with pytest.raises(InvalidInput, match="idempotency key was already used"):
        again(ledger)
    assert store_state(ledger) == state


# (name, a keyed write -- retried as it is)
RETRIES: list[tuple[str, Callable[[L], Any]]] = [
    ("update_state", lambda e: e.update_state(ALICE, "s", {"a": [1, {"b": None}]},
                                              idempotency_key="k")),
    ("update_state with shared state", lambda e: e.update_state(
        ALICE, "s", {"a": 1}, shared_state={"app:x": {"n": 1}, "app:y": {"n": 2}},
        idempotency_key="k")),
    ("add_message with state and shared state", lambda e: e.add_message(
        ALICE, "s", "user", "hi", state={"a": 1}, shared_state={"app:x": {"n": 1}},
        context=ClientContext(cwd="/a"), idempotency_key="k")),
    ("add_messages with times and ids", lambda e: e.add_messages(
        ALICE, "s", [{**TWO[0], "id": "m1", "created_at": datetime(2025, 1, 1, tzinfo=UTC)},
                     TWO[1]], idempotency_key="k")),
    ("add_items with state", lambda e: e.add_items(ALICE, "s", [ITEM, ITEM], state={"a": 1},
                                                   idempotency_key="k")),
]  # fmt: skip


@pytest.mark.parametrize(("name", "write"), RETRIES, ids=[r[0] for r in RETRIES])
def test_a_keyed_write_retried_as_it_was_returns_its_result_and_records_nothing(
    ledger: SessionLedger, name: str, write: Callable[[L], Any]
) -> None:
    """The same call with the same key -- state and shared state included -- returns what
    the first returned, and records nothing, even after later writes to the session."""
    first = write(ledger)
    state = store_state(ledger)
    assert write(ledger) == first
    assert store_state(ledger) == state
    ledger.add_message(ALICE, "s", "user", "later")
    ledger.update_state(ALICE, "s", {"later": True}, shared_state={"app:x": {"later": 1}})
    assert write(ledger) == first


def test_a_shared_only_keyed_write_on_a_session_that_exists_is_recorded_once(
    ledger: SessionLedger,
) -> None:
    """A keyed update of shared scopes alone leaves an (empty) StateChanged in the session's
    own stream, where its key is kept: a retry finds it and changes the scope only once."""
    ledger.add_message(ALICE, "s", "user", "hi")
    for _ in range(2):
        ledger.update_state(ALICE, "s", shared_state={"app:x": {"n": 1}}, idempotency_key="k")
    assert ledger.shared_state(ALICE, "app:x").version == 2  # Started, one StateChanged
    session = ledger.history(ALICE, "s")
    assert [e.type for e in session] == ["Started", "MessageAdded", "StateChanged"]
    assert ledger.state(ALICE, "s").state == {}
    assert ledger.verify(ALICE, deep=True).ok


def test_a_keyed_retry_after_the_session_was_erased_is_session_erased(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """A write that landed, then its session erased: the retry says SessionErased (not 'the
    key was used for a different write'), and records nothing."""
    ledger = make_ledger(encryption=True)
    ledger.add_message(ALICE, "s", "user", "secret", state={"a": 1}, idempotency_key="k")
    ledger.commit(ALICE, "s", idempotency_key="c")
    ledger.erase(ALICE, "s")
    state = store_state(ledger)
    retries: list[Callable[[], Any]] = [
        lambda: ledger.add_message(ALICE, "s", "user", "secret", state={"a": 1},
                                   idempotency_key="k"),
        lambda: ledger.commit(ALICE, "s", idempotency_key="c"),
    ]  # fmt: skip
    for retry in retries:
        with pytest.raises(SessionErased, match="was erased after the write under"):
            retry()
    assert store_state(ledger) == state


def test_a_keyed_delete_retried_returns_and_records_nothing(ledger: SessionLedger) -> None:
    """delete_session with a key, retried (the session is deleted by now): it returns as the
    first call did, and records nothing."""
    ledger.add_message(ALICE, "s", "user", "hi")
    ledger.delete_session(ALICE, "s", idempotency_key="del")
    state = store_state(ledger)
    assert ledger.delete_session(ALICE, "s", idempotency_key="del") is None
    assert store_state(ledger) == state
