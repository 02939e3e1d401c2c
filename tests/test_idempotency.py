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
from typing import Any

import pytest

from chatledger import (
    InvalidInput,
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
    """Make the next COMMIT of an append lose its connection: the backend is terminated
    just before the COMMIT is sent, or just after it succeeded (its answer then 'lost')."""
    import psycopg

    real_commit = psycopg.Connection.commit
    fired: list[int] = []

    def commit(connection: Any) -> None:
        if fired:
            return real_commit(connection)
        fired.append(connection.info.backend_pid)
        if after_commit:
            real_commit(connection)
        with psycopg.connect(connection.info.dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (fired[0],))
        if after_commit:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return real_commit(connection)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(psycopg.Connection, "commit", commit)
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
