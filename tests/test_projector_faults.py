"""Exactly once under crashes: a projector process is SIGKILLed at random points of a catch-up.

Each trial appends more history, starts ``python -m chatledger.projector
--progress`` with a random batch size, waits for a random number of committed
batches plus a random few milliseconds (so most kills land inside a batch
transaction), and kills it. After every kill each read model must hold
exactly the events up to its tracking position (its totals equal the stored
facts summed up to there: an event applied twice or skipped would show);
after the last one a normal catch-up must leave rows equal to a fresh
rebuild. ``CHATLEDGER_FAULT_SEED`` replays a failing run.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest
from sqlalchemy import text

from chatledger import Principal, SessionLedger, UnknownSession
from chatledger.adapters.schema import LogCursor
from chatledger.adapters.sql_read_models import READ_MODEL_NAMES, dump_rows
from chatledger.read_models import ReadModels
from support import ADMIN, ALICE, BOB

LINE_TIMEOUT = 60.0
TOOLS = (
    {"tool_name": "search", "prompt_tokens": 7, "completion_tokens": 3},
    {"tool_name": "fetch"},
)


def seed() -> int:
    return int(os.environ.get("CHATLEDGER_FAULT_SEED", random.randrange(1 << 30)))


def grow(ledger: SessionLedger, rng: random.Random, events: int) -> None:
    """Append roughly ``events`` events: messages (some tool calls), commits, merges, evictions."""
    appended = 0
    while appended < events:
        who = rng.choice([ALICE, BOB])
        key = f"s{rng.randrange(8)}"
        roll = rng.random()
        if not _exists(ledger, who, key):
            roll = 1.0  # only messages start sessions
        if roll < 0.1:
            appended += ledger.commit(who, key).archived
        elif roll < 0.13:
            appended += ledger.merge_archives(who, key, threshold=1, max_count=2).merged
        elif roll < 0.16:
            ledger.evict(ADMIN, key, account_id=who.account_id)
            appended += 1
        else:
            count = rng.randint(1, 12)
            messages = [
                {
                    "role": rng.choice(["user", "assistant", "tool"]),
                    "content": "x" * rng.randint(1, 90),
                }
                | ({"tool_call": rng.choice(TOOLS)} if rng.random() < 0.3 else {})
                for _ in range(count)
            ]
            ledger.add_messages(who, key, messages)
            appended += count


def _exists(ledger: SessionLedger, who: Principal, key: str) -> bool:
    try:
        ledger.session(who, key)
    except UnknownSession:
        return False
    return True


def lines_of(stream: IO[str]) -> queue.Queue[str | None]:
    """The stream's lines, read by a thread (``None`` at end of stream)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line.strip())
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def next_line(lines: queue.Queue[str | None], context: str) -> str | None:
    try:
        return lines.get(timeout=LINE_TIMEOUT)
    except queue.Empty:
        pytest.fail(f"the projector said nothing for {LINE_TIMEOUT}s ({context})")


def kill_during_catch_up(url: str, cwd: Path, rng: random.Random, context: str) -> bool:
    """Run a projector, SIGKILL it at a random point; True if it died before finishing."""
    batch = rng.randint(2, 40)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "chatledger.projector",
            "--url",
            url,
            "--progress",
            "--batch-size",
            str(batch),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )
    assert process.stdout is not None
    lines = lines_of(process.stdout)
    finished = False
    try:
        first = next_line(lines, context)
        assert first is not None and first.startswith("READY"), (first, context)
        for _ in range(rng.randint(0, 5)):
            line = next_line(lines, context)
            if line is None or line.startswith("DONE"):
                finished = True
                break
        time.sleep(rng.uniform(0, 0.03))  # into the next batch's transaction, usually
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL or finished, process.stderr
    return not finished


def store_totals(ledger: SessionLedger, cursor: LogCursor) -> dict[str, tuple[int, ...]]:
    """What each read model must add up to after applying the log up to ``cursor``.

    Up to it in the log order, (tx_id, id): on PostgreSQL positions alone are not
    the order the read models apply (on SQLite tx_id is 0, and they are).
    """
    last_facts = (
        "SELECT COUNT(*), SUM(e.message_count), SUM(e.pending_tokens), SUM(e.commit_count) "
        "FROM chatledger_events e WHERE e.id = (SELECT MAX(l.id) FROM chatledger_events l "
        "WHERE l.originator_id = e.originator_id AND (l.tx_id, l.id) <= (:t, :p))"
    )
    created = (
        "SELECT SUM(CASE WHEN event_type IN ('Committed', 'ArchiveMerged') THEN 1 "
        "WHEN event_type = 'Forked' THEN archive_count ELSE 0 END), "
        "SUM(CASE WHEN tool_name IS NULL THEN 0 ELSE 1 END), SUM(prompt_tokens) "
        "FROM chatledger_events WHERE (tx_id, id) <= (:t, :p)"
    )
    bounds = {"t": cursor.tx, "p": cursor.position}
    with ledger.core.store.event_recorder.engine.connect() as connection:
        sessions = [int(v or 0) for v in connection.execute(text(last_facts), bounds).one()]
        archives, calls, prompt = [
            int(v or 0) for v in connection.execute(text(created), bounds).one()
        ]
    return {
        "working_set": tuple(sessions),
        "archives": (archives,),
        "usage": (calls, prompt),
    }


MODEL_TOTALS = {
    "working_set": "SELECT COUNT(*), SUM(message_count), SUM(pending_tokens), SUM(commit_count) "
    "FROM chatledger_working_set",
    "archives": "SELECT COUNT(*) FROM chatledger_archives",
    "usage": "SELECT SUM(call_count), SUM(prompt_tokens) FROM chatledger_usage",
}


def assert_exactly_up_to_positions(ledger: SessionLedger, models: ReadModels, context: str) -> None:
    """Each read model adds up to the stored facts up to its position: nothing twice or missing."""
    for name, cursor in models.projector.cursors().items():
        with models.engine.connect() as connection:
            found = tuple(int(v or 0) for v in connection.execute(text(MODEL_TOTALS[name])).one())
        assert found == store_totals(ledger, cursor)[name], f"{name} at {cursor} ({context})"


def snapshot(models: ReadModels) -> dict[str, object]:
    with models.engine.connect() as connection:
        return {name: dump_rows(connection, name) for name in READ_MODEL_NAMES}


def run_trials(url: str, cwd: Path, trials: int) -> None:
    chosen = seed()
    rng = random.Random(chosen)
    ledger = SessionLedger(url)
    models = ReadModels(ledger)
    try:
        killed = 0
        for trial in range(trials):
            context = f"seed {chosen}, trial {trial}"
            grow(ledger, rng, rng.randint(150, 400))
            killed += kill_during_catch_up(url, cwd, rng, context)
            assert_exactly_up_to_positions(ledger, models, context)
        assert killed >= trials // 2, f"most kills should land mid-catch-up (seed {chosen})"
        models.catch_up()
        recovered = snapshot(models)
        assert min(models.positions().values()) == models.head()
        assert_exactly_up_to_positions(ledger, models, f"seed {chosen}, recovered")
        models.rebuild()
        assert snapshot(models) == recovered, (
            f"recovered rows differ from a rebuild (seed {chosen})"
        )
    finally:
        models.close()
        ledger.close()


def test_killed_projector_resumes_without_duplicates_or_gaps(
    database_url: str, tmp_path: Path
) -> None:
    """A few SIGKILLs mid-catch-up: every model stays exact, and recovery equals a rebuild."""
    run_trials(database_url, tmp_path, trials=4)


@pytest.mark.slow
def test_killed_projector_resumes_without_duplicates_or_gaps_many_times(
    database_url: str, tmp_path: Path
) -> None:
    """Twenty-five SIGKILLs at random points of catch-up leave read models equal to a rebuild."""
    run_trials(database_url, tmp_path, trials=25)
