"""Read-model rebuild rate vs a raw scan of the events table, and follower latency.

Rebuild: builds a ledger of ``--events`` events (default 200k: ``add_messages``
batches of 100 across many sessions, a commit after each batch, 30% of
messages carrying tool-call data), then per round measures, on the same
database:

* ``raw scan``: ``SELECT id, originator_id, originator_version, topic, state,
  timestamp_us FROM chatledger_events ORDER BY id`` on a DB-API cursor,
  ``fetchmany(5000)`` until exhausted (the floor: no decoding, no writes);
* ``rebuild all``: ``ReadModels.rebuild()`` -- drop every read model and
  replay the whole log into the working set, the archive history and usage
  (set-wise SQL over the stored facts; the archive history decodes the
  commits, merges and forks);
* ``rebuild <model>``: the same for each read model alone (the breakdown).

It prints the median events/s and the ratio rebuild / raw scan (target 0.5x).

Latency (``--latency``): a follower thread (``ReadModels.start()``) and a
writer on a second ledger (as another process would be) appending one
message at random intervals; reports how long after ``add_message`` returned
the read models had applied it, for several idle back-off caps, and the
in-process read-your-writes time of ``wait_for_projections``.

Run::

    python benchmarks/bench_rebuild.py                  # SQLite, 200k events, 3 rounds
    python benchmarks/bench_rebuild.py --url postgresql+psycopg://postgres@127.0.0.1/bench
    python benchmarks/bench_rebuild.py --events 50000 --rounds 1 --latency
    python benchmarks/bench_rebuild.py --interleave 50   # 50 sessions at a time take turns
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from chatledger import Principal, SessionLedger
from chatledger.read_models import ReadModels

console = Console()
TARGET = 0.5
PRINCIPALS = [Principal(account_id=f"tenant{n}", user_id="u", agent_id="bench") for n in range(4)]
TOOL = {"tool_name": "search", "prompt_tokens": 12, "completion_tokens": 30}


def build(ledger: SessionLedger, events: int, *, interleave: int = 1, seed: int = 7) -> int:
    """Append about ``events`` events; returns the log head.

    Each session gets 1-4 batches of 100 messages, each followed by a commit;
    with ``interleave`` N, groups of N sessions take their batches in turns
    (so sessions overlap in the log, as concurrent agents would).
    """
    rng = random.Random(seed)
    plan: list[int] = []  # batches per session
    while sum(plan) * 101 < events:
        plan.append(rng.randint(1, 4))
    turns: list[int] = []  # session numbers, in the order their batches are appended
    for first in range(0, len(plan), interleave):
        group = range(first, min(first + interleave, len(plan)))
        for turn in range(max(plan[s] for s in group)):
            turns.extend(s for s in group if turn < plan[s])
    started = time.perf_counter()
    for session in turns:
        who = PRINCIPALS[session % len(PRINCIPALS)]
        key = f"session-{session}"
        batch = [
            {
                "role": rng.choice(("user", "assistant", "tool")),
                "content": "lorem ipsum dolor " * rng.randint(1, 12),
            }
            | ({"tool_call": TOOL} if rng.random() < 0.3 else {})
            for _ in range(100)
        ]
        ledger.add_messages(who, key, batch)
        ledger.commit(who, key)
    head = ReadModels(ledger).head()
    console.print(
        f"built {head} events in {len(plan)} sessions (interleaved by {interleave}) "
        f"in {time.perf_counter() - started:.1f}s"
    )
    return head


def raw_scan(ledger: SessionLedger) -> int:
    connection = ledger.core.store.event_recorder.engine.raw_connection()
    try:
        cursor = connection.cursor()
        cursor.execute(
            "SELECT id, originator_id, originator_version, topic, state, timestamp_us "
            "FROM chatledger_events ORDER BY id"
        )
        count = 0
        while rows := cursor.fetchmany(5000):
            count += len(rows)
        cursor.close()
    finally:
        connection.close()
    return count


def timed(work: Callable[[], int]) -> float:
    started = time.perf_counter()
    count = work()
    return count / (time.perf_counter() - started)


def bench_rebuild(url: str, events: int, rounds: int, interleave: int) -> None:
    with SessionLedger(url, snapshot_interval=10_000) as ledger:
        models = ReadModels(ledger)
        if models.head() < events:
            build(ledger, events - models.head(), interleave=interleave)
        contenders: dict[str, Callable[[], int]] = {
            "raw scan": lambda: raw_scan(ledger),
            "rebuild all": models.rebuild,
        }
        for name in models.names:
            contenders[f"rebuild {name}"] = lambda name=name: models.rebuild(name)
        rates: dict[str, list[float]] = {name: [] for name in contenders}
        for n in range(rounds):
            for name, work in contenders.items():
                rates[name].append(timed(work))
            console.print(
                f"round {n + 1}: " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in rates.items())
            )
        models.close()
    raw = statistics.median(rates["raw scan"])
    table = Table(
        title=f"Rebuild vs raw scan ({ledger.settings.url.split(':')[0]}, {events:,} events)"
    )
    table.add_column("contender")
    table.add_column("median events/s", justify="right")
    table.add_column("vs raw scan", justify="right")
    for name, values in rates.items():
        median = statistics.median(values)
        table.add_row(name, f"{median:,.0f}", f"{median / raw:.2f}x")
    console.print(table)
    ratio = statistics.median(rates["rebuild all"]) / raw
    verdict = "meets" if ratio >= TARGET else "misses"
    console.print(f"rebuild / raw scan = {ratio:.2f}x ({verdict} the {TARGET}x target)")


def bench_latency(url: str, samples: int) -> None:
    table = Table(title="Follower latency: add_message returned -> applied by every read model")
    for column in ("poll cap", "p50 ms", "p95 ms", "max ms"):
        table.add_column(column, justify="right")
    for cap in (0.01, 0.05, 0.1):
        with SessionLedger(url) as reader, SessionLedger(url) as writer:
            models = ReadModels(reader, poll_interval=cap)
            models.catch_up()
            models.start()
            delays = []
            rng = random.Random(1)
            for n in range(samples):
                time.sleep(rng.uniform(0, 2 * cap))  # the follower is somewhere in its back-off
                position = writer.add_message(PRINCIPALS[0], "latency", "user", f"m{n}").position
                started = time.perf_counter()
                assert models.projector.wait(position, 5), "the follower never applied it"
                delays.append((time.perf_counter() - started) * 1000)
            models.close()
        delays.sort()
        table.add_row(
            f"{cap * 1000:.0f} ms",
            f"{statistics.median(delays):.1f}",
            f"{delays[int(len(delays) * 0.95) - 1]:.1f}",
            f"{delays[-1]:.1f}",
        )
    console.print(table)
    with SessionLedger(url) as ledger:
        models = ReadModels(ledger)
        models.start()
        waits = []
        for n in range(samples):
            position = ledger.add_message(PRINCIPALS[1], "ryw", "user", f"m{n}").position
            started = time.perf_counter()
            models.wait_for_projections(position, timeout=5)
            waits.append((time.perf_counter() - started) * 1000)
        models.close()
    console.print(
        f"read-your-writes (wait_for_projections wakes the follower): "
        f"median {statistics.median(waits):.1f} ms, max {max(waits):.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", help="ledger URL (default: a fresh SQLite file)")
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--interleave", type=int, default=1, help="sessions taking turns while the log is built"
    )
    parser.add_argument("--latency", action="store_true", help="also measure follower latency")
    parser.add_argument("--samples", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        url = args.url or f"sqlite:///{Path(folder) / 'bench.db'}"
        bench_rebuild(url, args.events, args.rounds, max(1, args.interleave))
        if args.latency:
            bench_latency(url, args.samples)


if __name__ == "__main__":
    main()
