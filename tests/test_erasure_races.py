"""Erasure racing writers in other processes, on SQLite and PostgreSQL.

``erase_user`` with ``key_scope="user"`` destroys the key every session of the
user shares, while other processes go on starting sessions of that user
(``tests/erasure_race_worker.py``). What must hold when it returns: every session
of the user carries ``Erased`` and is in the result, or was written wholly under
a key that still exists -- and no acknowledged write reads as erased in a
session without an ``Erased`` event.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

from chatledger import ERASED, Principal, SessionLedger
from chatledger.adapters.shredding import started_sessions, survey
from erasure_support import fill
from support import ALICE

WORKER = Path(__file__).with_name("erasure_race_worker.py")
BUSY = 2.0  # the ledgers' busy_timeout: the erasure's sweep lasts about this + 1 s


class Writer:
    """One racing writer process, started gated (imports done, ledger not yet open)."""

    def __init__(self, url: str, prefix: str, stderr_path: Path) -> None:
        self._stderr: IO[str] = stderr_path.open("w")
        self.stderr_path = stderr_path
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), url, prefix, "--busy-timeout", str(BUSY)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
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

    def wait_for(self, word: str, count: int) -> None:
        seen = 0
        deadline = time.monotonic() + 60
        while seen < count:
            line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, f"writer exited early:\n{self.stderr_path.read_text()}"
            self.read.append(line)
            seen += line.startswith(word)

    read: list[str]

    def stop(self) -> list[str]:
        """Close its stdin (it stops after the write in hand), return every line it printed."""
        assert self.process.stdin is not None
        self.process.stdin.write("stop\n")
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self._reader.join(timeout=60)
        while (line := self.lines.get_nowait()) is not None:
            self.read.append(line)
        self._stderr.close()
        assert self.process.returncode == 0, self.stderr_path.read_text()
        return self.read


def test_erase_user_leaves_no_session_of_the_user_stranded(
    database_url: str, make_ledger: Callable[..., SessionLedger], tmp_path: Path
) -> None:
    """Three processes start sessions of alice (user keys) while erase_user(alice) runs:
    afterwards each of her sessions is Erased and in the result, or every row of it is
    sealed with a live key; no acknowledged write reads [erased] without an Erased."""
    ledger = make_ledger(encryption=True, key_scope="user", busy_timeout=BUSY)
    for key in ("old-1", "old-2"):
        fill(ledger, key)
    writers = [Writer(database_url, f"w{i}", tmp_path / f"w{i}.err") for i in range(3)]
    for writer in writers:
        writer.read = []
        writer.release()
    for writer in writers:
        writer.wait_for("ACK", 6)  # each is writing
    result = ledger.erase_user(ALICE, "alice")
    lines = [line for writer in writers for line in writer.stop()]

    checker = make_ledger(encryption=True, key_scope="user", cache_size=0)
    store, keys = checker.core.store, checker.key_store
    erased_in_result = set(result.erased) | set(result.already_erased)
    stranded: list[str] = []
    erased_late = live = 0
    for sid, key in started_sessions(store, "acme", "alice"):
        history = checker.history(ALICE, key)
        if any(e.type == "Erased" for e in history):
            assert key in erased_in_result, f"{key} carries Erased but is not in the result"
            erased_late += key not in ("old-1", "old-2")
            continue
        dead = [k for k in survey(store, sid).key_ids if keys.get(k) is None]
        if dead:
            stranded.append(key)
        live += 1
    assert not stranded, f"sessions sealed with destroyed keys and no Erased: {stranded}"
    assert {"old-1", "old-2"} <= erased_in_result
    for line in lines:
        word, _, rest = line.partition(" ")
        if word != "ACK":
            continue
        key, _, text = rest.partition(" ")
        history = checker.history(ALICE, key)
        if any(e.type == "Erased" for e in history):
            continue
        contents = [e.event.message.content for e in history if e.type == "MessageAdded"]  # type: ignore[attr-defined]
        assert text in contents and ERASED not in contents, f"{line}: acknowledged, unreadable"
    assert live > 0  # sessions started after the erasure, under the user's new key, stay
    print(f"erased while racing: {erased_late}; left live under new keys: {live}")


KILLER = Path(__file__).with_name("erasure_kill_worker.py")
SERVICE = Principal(account_id="acme", agent_id="framework-adapter")


@pytest.mark.parametrize("delay", [0.05, 0.3, 0.8])
def test_an_erasure_killed_midway_is_completed_by_running_it_again(
    database_url: str, make_ledger: Callable[..., SessionLedger], delay: float
) -> None:
    """erase_user of a framework user (pseudonym) SIGKILLed part-way: running it again erases
    every session of the user -- the pseudonym's key goes last, so the rerun still finds
    them -- and afterwards the user's pseudonym is a new one."""
    ledger = make_ledger(encryption=True, busy_timeout=1)
    ann = ledger.pseudonym(SERVICE, "ann@example.com")
    as_ann = SERVICE.model_copy(update={"user_id": ann})
    keys = [f"chat/{ann}/{i}" for i in range(60)]
    for key in keys:
        ledger.add_message(as_ann, key, "user", f"private {key}")
    worker = subprocess.Popen(
        [sys.executable, str(KILLER), database_url, "ann@example.com"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert worker.stdout is not None and worker.stdin is not None
    assert worker.stdout.readline().strip() == "READY"
    worker.stdin.write("go\n")
    worker.stdin.flush()
    time.sleep(delay)
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait(timeout=30)
    checker = make_ledger(encryption=True, busy_timeout=1, cache_size=0)
    erased_before = sum(checker.history(SERVICE, k)[-1].type == "Erased" for k in keys)
    result = checker.erase_user(SERVICE, "ann@example.com")
    # Killed after the pseudonym's key went (every session erased by then), the rerun can no
    # longer link the user to them -- by design -- and has nothing left to do.
    assert set(result.erased) | set(result.already_erased) in (set(keys), set())
    for key in keys:
        history = checker.history(SERVICE, key)
        assert history[-1].type == "Erased"
        assert history[1].event.message.content == ERASED  # type: ignore[attr-defined]
    assert checker.pseudonym(SERVICE, "ann@example.com") != ann
    assert checker.verify(SERVICE).ok
    print(f"killed after {delay}s: {erased_before} of {len(keys)} erased before the rerun")
