"""Crash safety with real processes: a writer is SIGKILLed at random points.

``tests/crash_worker.py`` adds messages and commits in a loop, printing one
line per acknowledged operation. Each trial kills it (after a random number of
acknowledgements, sometimes mid-start-up) and then reopens the ledger in this
process to check that nothing acknowledged was lost and that the recorded
history is one consistent, linear story. Trials run one after another on the
same database, so later workers resume sessions left behind by killed ones.

Set ``CHATLEDGER_FAULT_SEED`` to replay a failing run (the seed is in every
failure message).
"""

from __future__ import annotations

import os
import queue
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest
from conftest import ALICE

from chatledger import (
    Committed,
    LedgerEvent,
    MessageAdded,
    SessionLedger,
    SessionView,
    Started,
    UnknownSession,
)
from chatledger.projections import project

WORKER = Path(__file__).with_name("crash_worker.py")
KEY = "crash-session"
LINE_TIMEOUT = 30.0  # seconds to wait for the worker's next line before giving up


# ------------------------------------------------------------------ invariants
def assert_session_consistent(history: Sequence[LedgerEvent], view: SessionView) -> None:
    """The aggregate agrees with a fold of its events, and the events tell one linear story."""
    versions = [e.version for e in history]
    assert versions == list(range(1, len(history) + 1)), f"versions not 1..N: {versions}"
    assert [e.event.originator_version for e in history] == versions
    assert view.version == len(history)
    assert isinstance(history[0].event, Started)
    assert not any(isinstance(e.event, Started) for e in history[1:])

    live: dict[str, None] = {}
    archived: set[str] = set()
    for entry in history:
        event = entry.event
        if isinstance(event, MessageAdded):
            assert event.message.id not in live, f"v{entry.version}: {event.message.id} twice"
            live[event.message.id] = None
        elif isinstance(event, Committed):
            covered = event.archive.message_ids
            assert covered, f"v{entry.version}: a commit covering nothing"
            assert len(set(covered)) == len(covered), f"v{entry.version}: duplicate ids"
            outside = set(covered) - live.keys()
            assert not outside, f"v{entry.version} commits ids not in the buffer: {outside}"
            assert not archived & set(covered), f"v{entry.version} archives ids twice"
            archived.update(covered)
            for message_id in covered:
                del live[message_id]

    folded = project([e.event for e in history])
    buffer_ids = tuple(m.id for m in view.buffer)
    assert buffer_ids == folded.buffer.message_ids == tuple(live)
    assert [a.archive_id for a in view.archives] == [a.archive_id for a in folded.archives.live]
    assert [a.message_ids for a in view.archives] == [a.message_ids for a in folded.archives.live]
    assert view.commit_count == folded.meta.commit_count
    assert view.message_count == folded.meta.message_count
    assert view.archive_count == folded.meta.archive_count == len(view.archives)
    assert view.pending_tokens == folded.buffer.pending_tokens
    assert view.turn_count == folded.buffer.turn_count
    assert folded.meta.version == view.version

    in_archives = [i for a in view.archives for i in a.message_ids]
    assert len(in_archives) == len(set(in_archives)), "a message is in two archives"
    assert not set(buffer_ids) & set(in_archives), "a message is both live and archived"


# ------------------------------------------------------------- worker plumbing
@dataclass
class Acks:
    """What the workers acknowledged, parsed from their output."""

    added: set[str] = field(default_factory=set)
    commits: dict[str, tuple[str, ...]] = field(default_factory=dict)
    in_flight: tuple[str, tuple[str, ...]] | None = None  # a commit begun, outcome unknown

    def feed(self, line: str) -> None:
        word, *rest = line.split()
        if word == "ADD":
            self.added.update(rest)
        elif word == "TRY":
            self.in_flight = (rest[0], tuple(rest[1:]))
        elif word == "COMMIT":
            self.commits[rest[0]] = tuple(rest[1:])
            self.in_flight = None
        elif word in ("SKIP", "FAILED"):
            raise AssertionError(f"the worker's commit did not archive: {line}")
        else:
            assert word == "READY", f"unexpected worker line {line!r}"


class Worker:
    """One ``crash_worker.py`` process, started gated (imports done, ledger not yet open)."""

    def __init__(self, url: str, prefix: str, seed: int, stderr_path: Path) -> None:
        self.stderr_path = stderr_path
        self._stderr: IO[str] = stderr_path.open("w")
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(WORKER),
                url,
                KEY,
                prefix,
                str(seed),
                "--principal",
                ALICE.model_dump_json(),
                "--gate",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._killed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def release(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def next_line(self) -> str:
        try:
            line = self.lines.get(timeout=LINE_TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"worker silent for {LINE_TIMEOUT}s") from None
        if line is None:
            self.process.wait(timeout=LINE_TIMEOUT)
            raise AssertionError(
                f"worker exited early (rc={self.process.returncode}):\n{self.stderr()}"
            )
        return line

    def kill(self) -> list[str]:
        """SIGKILL the worker; return every line it printed that was not read yet."""
        if self._killed:
            return []
        self._killed = True
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=LINE_TIMEOUT)
        self._reader.join(timeout=LINE_TIMEOUT)
        assert not self._reader.is_alive()
        rest: list[str] = []
        while (line := self.lines.get_nowait()) is not None:
            rest.append(line)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()
        return rest

    def stderr(self) -> str:
        return self.stderr_path.read_text()  # written by the child only


def run_trial(worker: Worker, rng: random.Random) -> Acks:
    """Let the worker run, kill it at a random point, return what it acknowledged."""
    acks = Acks()
    worker.release()
    if rng.random() < 0.1:
        # Fault injection (not synchronisation): die while opening the ledger.
        time.sleep(rng.uniform(0.0, 0.05))
    else:
        target = rng.randint(0, 40)
        seen = -1  # READY is not an acknowledged operation
        while seen < target:
            acks.feed(worker.next_line())
            seen += 1
        if rng.random() < 0.7:
            time.sleep(rng.uniform(0.0, 0.008))  # fault injection: land mid-operation
    for line in worker.kill():
        acks.feed(line)
    rc = worker.process.returncode
    assert rc == -signal.SIGKILL, f"worker was not killed but exited {rc}:\n{worker.stderr()}"
    return acks


# ------------------------------------------------------------------ the checks
def check_after_crash(url: str, total: Acks, trial: Acks, label: str) -> None:
    """Reopen the ledger and check everything acknowledged is there, consistently."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as raw:
            assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",), label
    with SessionLedger(url) as ledger:  # opens cleanly after the crash
        try:
            history = ledger.history(ALICE, KEY)
        except UnknownSession:  # killed before its first write was recorded
            assert not total.added, f"{label}: the session with acknowledged messages is gone"
            history = []
        if history:
            check_history(ledger, history, total, trial, label)

        # And the ledger is writable again.
        probe = f"probe-{label.replace(' ', '-')}"
        ledger.add_message(ALICE, KEY, "user", "still here?", message_id=probe)
        result = ledger.commit_snapshot(ALICE, KEY, [probe])
        assert result.status == "completed", result
        assert result.archive_id is not None
        total.added.add(probe)
        total.commits[result.archive_id] = (probe,)


def check_history(
    ledger: SessionLedger, history: list[LedgerEvent], total: Acks, trial: Acks, label: str
) -> None:
    """The reopened session: consistent, with every acknowledgement in it."""
    view = ledger.session(ALICE, KEY)
    assert_session_consistent(history, view)

    added = [e.event.message.id for e in history if isinstance(e.event, MessageAdded)]
    lost = total.added - set(added)
    assert not lost, f"{label}: acknowledged messages lost: {sorted(lost)}"
    committed = {
        e.event.archive.archive_id: e.event.archive.message_ids
        for e in history
        if isinstance(e.event, Committed)
    }
    for archive_id, ids in total.commits.items():
        assert committed.get(archive_id) == ids, f"{label}: acknowledged commit {archive_id}"

    if trial.in_flight is not None:  # killed during a commit: all of it or none of it
        kind, ids = trial.in_flight
        recorded = [a for a, covered in committed.items() if set(covered) == set(ids)]
        live = {m.id for m in view.buffer}
        if recorded:
            assert len(recorded) == 1, f"{label}: in-flight {kind} commit recorded twice"
            assert not live & set(ids), f"{label}: committed ids still live"
        else:
            assert set(ids) <= live, f"{label}: half an in-flight {kind} commit"

    # Time travel still agrees with the fold at an arbitrary past version.
    at = random.Random(label).randint(1, view.version)
    past = ledger.session(ALICE, KEY, at_version=at)
    assert_session_consistent(history[:at], past)


def run_kill_trials(url: str, tmp_path: Path, trials: int) -> None:
    seed = int(os.environ.get("CHATLEDGER_FAULT_SEED", "0")) or random.randrange(1, 2**31)
    rng = random.Random(seed)
    total = Acks()
    workers: list[Worker] = []

    def spawn(n: int) -> Worker:
        worker = Worker(url, f"w{n}", rng.randrange(2**31), tmp_path / f"worker{n}.err")
        workers.append(worker)
        return worker

    try:
        upcoming = spawn(0)
        for n in range(trials):
            current = upcoming
            if n + 1 < trials:
                upcoming = spawn(n + 1)  # imports while this trial runs
            label = f"seed={seed} trial={n}"
            trial = run_trial(current, rng)
            total.added |= trial.added
            total.commits.update(trial.commits)
            check_after_crash(url, total, trial, label)
    finally:
        for worker in workers:
            worker.kill()


# ------------------------------------------------------------------ the tests
def test_kill_trials_lose_nothing_acknowledged(database_url: str, tmp_path: Path) -> None:
    """Given 10 random SIGKILLs of a writer, when reopened, then all acks survive, consistently."""
    run_kill_trials(database_url, tmp_path, trials=10)


@pytest.mark.slow
def test_many_kill_trials_lose_nothing_acknowledged(database_url: str, tmp_path: Path) -> None:
    """Given 50 random SIGKILLs of a writer, when reopened, then all acks survive, consistently."""
    run_kill_trials(database_url, tmp_path, trials=50)
