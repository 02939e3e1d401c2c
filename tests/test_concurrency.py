"""Races on one session: threads, several ledgers, several processes, concurrent commits.

Every writer is released by one ``threading.Barrier`` (or, across processes, by
one line on stdin) so the writes really overlap; every join has a timeout. The
checks are the ledger's promises: no acknowledged message is lost, versions
are 1..N with no gaps or duplicates, each ``add_messages`` batch is one
contiguous run of versions, and a commit archives exactly its snapshot, once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from conftest import ALICE
from test_faults import assert_session_consistent

from chatledger import (
    AddedMessage,
    CommitResult,
    Committed,
    ExtractiveSummarizer,
    LedgerEvent,
    MessageAdded,
    SessionLedger,
    Summary,
)
from chatledger.domain.values import ArchiveSummary, Message

KEY = "race"
JOIN_TIMEOUT = 60.0  # seconds; a thread or process still running then is a hang


# ------------------------------------------------------------------ helpers
def run_together(count: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(0..count-1)`` on threads released at once; return results, re-raise errors."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            barrier.wait(timeout=JOIN_TIMEOUT)
            results[index] = work(index)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=JOIN_TIMEOUT)
    assert not any(t.is_alive() for t in threads), f"threads still running after {JOIN_TIMEOUT}s"
    if errors:
        raise errors[0]
    return results


def add_in_batches(ledger: SessionLedger, prefix: str, count: int) -> list[list[AddedMessage]]:
    """Add ``count`` messages, alternating single adds and batches of two; one list per call."""
    calls: list[list[AddedMessage]] = []
    n = 0
    while n < count:
        size = 1 if len(calls) % 2 == 0 or n + 1 == count else 2
        ids = [f"{prefix}-{n + i}" for i in range(size)]
        specs = [{"role": "user", "content": f"{i} says hi", "message_id": i} for i in ids]
        calls.append(ledger.add_messages(ALICE, KEY, specs))
        n += size
    return calls


def assert_linear(
    ledger: SessionLedger, writers: Sequence[Sequence[Sequence[AddedMessage]]], expected: int
) -> list[LedgerEvent]:
    """Nothing lost or doubled; versions 1..N; each writer in order; each call contiguous."""
    history = ledger.history(ALICE, KEY)
    assert [e.version for e in history] == list(range(1, len(history) + 1))
    added = [e for e in history if isinstance(e.event, MessageAdded)]
    ids = [e.event.message.id for e in added]
    assert len(ids) == expected, f"{expected - len(ids)} messages lost"
    assert len(set(ids)) == len(ids), "a message was recorded twice"

    acknowledged = [m for writer in writers for call in writer for m in call]
    assert len(acknowledged) == expected
    assert len({m.version for m in acknowledged}) == expected, "two messages share a version"
    assert len({m.position for m in acknowledged}) == expected, "two events share a position"
    by_version = {e.version: e.event for e in history}
    for message in acknowledged:
        event = by_version[message.version]
        assert isinstance(event, MessageAdded) and event.message.id == message.message_id
    for writer in writers:
        versions = [m.version for call in writer for m in call]
        assert versions == sorted(versions), "one writer's messages out of order"
        for call in writer:
            first = call[0].version
            assert [m.version for m in call] == list(range(first, first + len(call))), (
                "an add_messages batch was split"
            )
    # The global log order agrees with each stream's order.
    positions = [m.position for m in sorted(acknowledged, key=lambda m: m.version)]
    assert positions == sorted(positions)
    assert_session_consistent(history, ledger.session(ALICE, KEY))
    return history


class GatedSummarizer:
    """Summarises like the default, but holds each summarize() until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self._inner = ExtractiveSummarizer()

    def summarize(self, messages: Sequence[Message]) -> Summary:
        self.entered.set()
        assert self.release.wait(timeout=JOIN_TIMEOUT), "summarizer never released"
        return self._inner.summarize(messages)

    def merge(self, archives: Sequence[ArchiveSummary]) -> Summary:
        return self._inner.merge(archives)


def commits_of(history: Sequence[LedgerEvent]) -> list[Committed]:
    return [e.event for e in history if isinstance(e.event, Committed)]


def seed_messages(ledger: SessionLedger, prefix: str, count: int) -> list[str]:
    ids = [f"{prefix}-{i}" for i in range(count)]
    ledger.add_messages(
        ALICE, KEY, [{"role": "user", "content": f"{i}.", "message_id": i} for i in ids]
    )
    return ids


# ------------------------------------------------- (a) threads, one ledger
def _threads_one_ledger(make_ledger: Callable[..., SessionLedger], threads: int, each: int) -> None:
    ledger = make_ledger()
    writers = run_together(threads, lambda i: add_in_batches(ledger, f"t{i}", each))
    assert_linear(ledger, writers, threads * each)
    assert_linear(make_ledger(), writers, threads * each)  # as stored, not only as cached


def test_threads_sharing_one_ledger_lose_nothing(make_ledger: Callable[..., SessionLedger]) -> None:
    """Given 8 threads on one ledger, when they add at once, then all land in one linear history."""
    _threads_one_ledger(make_ledger, threads=8, each=20)


@pytest.mark.slow
def test_threads_sharing_one_ledger_lose_nothing_heavy(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Given 16 threads on one ledger, when each adds 100, then all land in one linear history."""
    _threads_one_ledger(make_ledger, threads=16, each=100)


# --------------------------------------------- (b) threads, a ledger each
def _threads_own_ledgers(
    make_ledger: Callable[..., SessionLedger], threads: int, each: int
) -> None:
    ledgers = [make_ledger() for _ in range(threads)]
    writers = run_together(threads, lambda i: add_in_batches(ledgers[i], f"t{i}", each))
    assert_linear(make_ledger(), writers, threads * each)
    for ledger in ledgers:  # every writer's cached copy caught up with the others
        assert ledger.session(ALICE, KEY).message_count == threads * each


def test_threads_with_own_ledgers_lose_nothing(make_ledger: Callable[..., SessionLedger]) -> None:
    """Given 8 ledgers on one database, when they add at once, then conflicts retry, none lost."""
    _threads_own_ledgers(make_ledger, threads=8, each=20)


@pytest.mark.slow
def test_threads_with_own_ledgers_lose_nothing_heavy(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Given 8 ledgers each adding 100 at once, then conflicts retry and none is lost."""
    _threads_own_ledgers(make_ledger, threads=8, each=100)


# ------------------------------------------------------- (c) processes
_PROCESS_WRITER = """
import json, sys
from chatledger import Principal, SessionLedger
url, key, prefix, count, principal, opening = sys.argv[1:7]
actor = Principal.model_validate_json(principal)
if opening == "early":
    ledger = SessionLedger(url)
print("READY", flush=True)
if sys.stdin.readline() != "go\\n":
    sys.exit(3)
if opening == "late":
    ledger = SessionLedger(url)
calls = []
for n in range(int(count)):
    spec = {"role": "user", "content": f"{prefix} {n}.", "message_id": f"{prefix}-{n}"}
    added = ledger.add_messages(actor, key, [spec])
    calls.append([m.model_dump(mode="json") for m in added])
ledger.close()
print(json.dumps(calls), flush=True)
"""


def _readline_within(process: subprocess.Popen[str], timeout: float) -> str:
    box: list[str] = []
    stream = process.stdout
    assert stream is not None
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout=timeout)
    assert box and box[0], f"no line from writer process (rc={process.poll()})"
    return box[0]


def _processes(
    make_ledger: Callable[..., SessionLedger],
    database_url: str,
    processes: int,
    each: int,
    *,
    open_at_once: bool = False,
) -> None:
    if not open_at_once:
        make_ledger()  # the tables exist before the writers start
    opening = "late" if open_at_once else "early"
    argv = [sys.executable, "-c", _PROCESS_WRITER, database_url, KEY]
    procs = [
        subprocess.Popen(
            [*argv, f"p{i}", str(each), ALICE.model_dump_json(), opening],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    try:
        for proc in procs:
            assert _readline_within(proc, JOIN_TIMEOUT).strip() == "READY"
        for proc in procs:  # the release: every writer is ready and waiting on stdin
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        writers = []
        for proc in procs:
            out, err = proc.communicate(timeout=JOIN_TIMEOUT)
            assert proc.returncode == 0, err
            calls = json.loads(out.strip().splitlines()[-1])
            writers.append([[AddedMessage.model_validate(m) for m in call] for call in calls])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=JOIN_TIMEOUT)
    assert_linear(make_ledger(), writers, processes * each)


def test_processes_lose_nothing(
    make_ledger: Callable[..., SessionLedger], database_url: str
) -> None:
    """Given 4 processes with a ledger each, when they add at once, then none lost or doubled."""
    _processes(make_ledger, database_url, processes=4, each=25)


def test_processes_opening_a_fresh_database_at_once(
    make_ledger: Callable[..., SessionLedger], database_url: str
) -> None:
    """Given a fresh database, when 6 processes open a ledger at once and add, then all succeed."""
    _processes(make_ledger, database_url, processes=6, each=2, open_at_once=True)


@pytest.mark.slow
def test_processes_lose_nothing_heavy(
    make_ledger: Callable[..., SessionLedger], database_url: str
) -> None:
    """Given 8 processes adding 150 each at once, then no message is lost or doubled."""
    _processes(make_ledger, database_url, processes=8, each=150)


# ------------------------------------------- (d) commit while another adds
def test_commit_covers_its_snapshot_while_another_ledger_adds(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Given one ledger committing, when another adds meanwhile, then just the snapshot archives."""
    gate = GatedSummarizer()
    committer, writer = make_ledger(summarizer=gate), make_ledger()
    snapshot = seed_messages(writer, "early", 5)
    outcome: list[CommitResult] = []
    thread = threading.Thread(
        target=lambda: outcome.append(committer.commit(ALICE, KEY)), daemon=True
    )
    thread.start()
    assert gate.entered.wait(timeout=JOIN_TIMEOUT)
    late = seed_messages(writer, "late", 3)
    late.append(committer.add_message(ALICE, KEY, "user", "me too", message_id="own").message_id)
    gate.release.set()
    thread.join(timeout=JOIN_TIMEOUT)
    assert not thread.is_alive() and outcome

    result = outcome[0]
    assert result.status == "completed" and result.archived, result
    assert list(result.message_ids) == snapshot
    fresh = make_ledger()
    for ledger in (committer, writer, fresh):
        view = ledger.session(ALICE, KEY)
        assert [m.id for m in view.buffer] == late
        assert [a.message_ids for a in view.archives] == [tuple(snapshot)]
    history = fresh.history(ALICE, KEY)
    assert [c.archive.message_ids for c in commits_of(history)] == [tuple(snapshot)]
    assert_session_consistent(history, fresh.session(ALICE, KEY))


def _commit_during_adds(make_ledger: Callable[..., SessionLedger], rounds: int, each: int) -> None:
    committer, writer = make_ledger(), make_ledger()
    seed_messages(writer, "seed", 3)
    results: list[CommitResult] = []

    def work(index: int) -> Any:
        if index == 0:
            return add_in_batches(writer, "w", rounds * each)
        for _ in range(rounds):
            results.append(committer.commit(ALICE, KEY))
        return None

    run_together(2, work)
    history = committer.history(ALICE, KEY)
    commits = commits_of(history)
    archived = [r for r in results if r.archived]
    assert [c.archive.message_ids for c in commits] == [r.message_ids for r in archived]
    for result in results:
        assert result.archived or result.reason == "empty_buffer", result
    view = make_ledger().session(ALICE, KEY)
    covered = {i for c in commits for i in c.archive.message_ids}
    assert covered | {m.id for m in view.buffer} == {
        e.event.message.id for e in history if isinstance(e.event, MessageAdded)
    }
    assert_session_consistent(history, view)


def test_commits_racing_adds_from_another_ledger(make_ledger: Callable[..., SessionLedger]) -> None:
    """Given commits racing another ledger's adds, then each archives its snapshot; none lost."""
    _commit_during_adds(make_ledger, rounds=5, each=6)


@pytest.mark.slow
def test_commits_racing_adds_from_another_ledger_heavy(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Given 60 commits racing adds of another ledger, then each archives its snapshot once."""
    _commit_during_adds(make_ledger, rounds=60, each=10)


# ------------------------------------------- (e) two commits, one ledger
def test_second_commit_during_a_commit_is_skipped(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Given a commit under way, when the same ledger commits again, then it is skipped."""
    gate = GatedSummarizer()
    ledger = make_ledger(summarizer=gate)
    ids = seed_messages(ledger, "m", 4)
    outcome: list[CommitResult] = []
    thread = threading.Thread(target=lambda: outcome.append(ledger.commit(ALICE, KEY)), daemon=True)
    thread.start()
    assert gate.entered.wait(timeout=JOIN_TIMEOUT)
    second = ledger.commit(ALICE, KEY)
    gate.release.set()
    thread.join(timeout=JOIN_TIMEOUT)
    assert not thread.is_alive() and outcome
    assert second.status == "skipped" and not second.archived
    assert second.reason == "commit_in_progress"
    assert outcome[0].archived and list(outcome[0].message_ids) == ids
    history = ledger.history(ALICE, KEY)
    assert len(commits_of(history)) == 1
    assert_session_consistent(history, ledger.session(ALICE, KEY))


def _racing_commits(make_ledger: Callable[..., SessionLedger], rounds: int) -> None:
    ledger = make_ledger()
    for n in range(rounds):
        ids = seed_messages(ledger, f"r{n}", 3)
        results = run_together(2, lambda _: ledger.commit(ALICE, KEY))
        winners = [r for r in results if r.archived]
        assert len(winners) == 1, results
        assert list(winners[0].message_ids) == ids
        (loser,) = (r for r in results if not r.archived)
        assert loser.status == "skipped", loser
        assert loser.reason in ("commit_in_progress", "empty_buffer"), loser
    history = ledger.history(ALICE, KEY)
    assert len(commits_of(history)) == rounds
    assert ledger.session(ALICE, KEY).commit_count == rounds
    assert_session_consistent(history, make_ledger().session(ALICE, KEY))


def test_two_threads_committing_at_once_archive_once(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Given two threads committing one session at once, then exactly one archives, each round."""
    _racing_commits(make_ledger, rounds=10)


@pytest.mark.slow
def test_two_threads_committing_at_once_archive_once_heavy(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Given 200 rounds of two threads committing at once, then exactly one archives each time."""
    _racing_commits(make_ledger, rounds=200)


def test_two_ledgers_committing_at_once_archive_once(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Given two ledgers committing one buffer at once, then it is archived once, never twice."""
    ledgers = [make_ledger(), make_ledger()]
    for n in range(10):
        ids = seed_messages(ledgers[0], f"r{n}", 3)
        results = run_together(2, lambda i: ledgers[i].commit(ALICE, KEY))
        winners = [r for r in results if r.archived]
        assert len(winners) == 1, results
        assert list(winners[0].message_ids) == ids
        (loser,) = (r for r in results if not r.archived)
        assert (loser.status, loser.reason) == ("skipped", "empty_buffer"), loser
    history = ledgers[0].history(ALICE, KEY)
    assert len(commits_of(history)) == 10
    assert not [e for e in history if e.type == "CommitFailed"]
    assert_session_consistent(history, make_ledger().session(ALICE, KEY))


_COMMIT_WORKER = """
import json, sys, time
from chatledger import ExtractiveSummarizer, Principal, SessionLedger
url, key, actor = sys.argv[1], sys.argv[2], Principal.model_validate_json(sys.argv[3])
class Slow(ExtractiveSummarizer):  # a summarizer that takes a second: commits overlap
    calls = 0
    def summarize(self, messages):
        Slow.calls += 1
        time.sleep(1.0)
        return super().summarize(messages)
ledger = SessionLedger(url, summarizer=Slow())
print("READY", flush=True)
for line in sys.stdin:
    Slow.calls = 0
    result = ledger.commit(actor, key)
    print(json.dumps([result.model_dump(mode="json"), Slow.calls]), flush=True)
ledger.close()
"""


def test_two_processes_committing_one_session_take_turns_without_failures(
    make_ledger: Callable[..., SessionLedger], database_url: str
) -> None:
    """Two processes commit one session at once (their summarizers overlap): the one that
    records second does not record a CommitFailed -- it starts over after the other, and
    archives what that one left (a message added meanwhile) or finds the buffer empty. No
    message is archived twice or lost; the audit log has no failures."""
    ledger = make_ledger()
    seed_messages(ledger, "seed", 1)
    argv = [sys.executable, "-c", _COMMIT_WORKER, database_url, KEY, ALICE.model_dump_json()]
    procs = [
        subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        for proc in procs:
            assert _readline_within(proc, JOIN_TIMEOUT).strip() == "READY"
        ledger.commit(ALICE, KEY)  # the seed: both workers have loaded the session by now
        archived: list[str] = []
        for n in range(3):
            ids = seed_messages(ledger, f"r{n}", 3)
            for proc in procs:  # released together: both take the same buffer
                assert proc.stdin is not None
                proc.stdin.write("commit\n")
                proc.stdin.flush()
            late = []
            if n == 2:  # added while both summarise: the loser's second turn archives it
                time.sleep(0.3)
                late = seed_messages(ledger, "late", 1)
            outcomes = [json.loads(_readline_within(p, JOIN_TIMEOUT)) for p in procs]
            results = [CommitResult.model_validate(r) for r, _ in outcomes]
            assert all(calls >= 1 for _, calls in outcomes), outcomes  # both summarised: a race
            assert not [r for r in results if r.status == "failed"], results
            covered = sorted(i for r in results for i in r.message_ids if r.archived)
            assert covered == sorted(ids + late), results
            archived += covered
            if not late:
                assert sorted((r.status, r.reason) for r in results) == [
                    ("completed", None), ("skipped", "empty_buffer"),
                ], results  # fmt: skip
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=JOIN_TIMEOUT)
    history = ledger.history(ALICE, KEY)
    assert [e.type for e in history].count("CommitFailed") == 0
    assert sorted(i for c in commits_of(history)[1:] for i in c.archive.message_ids) == sorted(
        archived
    )
    assert_session_consistent(history, make_ledger().session(ALICE, KEY))


@pytest.mark.parametrize("kind", ["message", "items"])
def test_a_write_returns_what_it_left_though_another_writes_right_after(
    ledger: SessionLedger, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """An append's result (version, position, pending tokens) is what that write left, even
    when another thread writes to the shared cached session the moment the lock is
    released -- before the result is built."""
    ledger.add_message(ALICE, KEY, "user", "first message")
    store = ledger.core.sessions
    write = store.write
    others: list[AddedMessage] = []
    busy: list[bool] = []

    def write_then_another(*args: Any, **kwargs: Any) -> Any:
        written = write(*args, **kwargs)
        if not busy:  # another thread's write, between the lock's release and the result
            busy.append(True)
            others.append(ledger.add_message(ALICE, KEY, "user", "a message from elsewhere"))
        return written

    monkeypatch.setattr(store, "write", write_then_another)
    if kind == "message":
        mine = ledger.add_message(ALICE, KEY, "user", "my message")
    else:
        (mine,) = ledger.add_items(ALICE, KEY, [{"role": "user", "content": "my message"}])
    (other,) = others
    assert (mine.version, other.version) == (3, 4)
    assert 0 < mine.position < other.position
    assert mine.pending_tokens < other.pending_tokens
