"""Time travel cost: the prompt context at a random version vs loading the head.

What it measures: one long session (default 100,000 events, built exactly as
``bench_load.py`` builds it: batches of messages, regular commits, merges, so
snapshots every ``--snapshot-interval`` events). Each timed read opens a NEW
``SessionLedger`` (no in-process cache) and times one call alone:

* ``head``: ``ledger.session(p, key)``, the current state;
* ``context@v``: ``ledger.context(p, key, at_version=v)`` for a random ``v``
  (a fresh random version per round): the exact prompt context as it was.

Reads alternate head / time travel round by round. It prints medians, IQRs
and the ratio time-travel / head (target: <= 2; the cost is bounded by the
snapshot interval, not by the length of the history).

Run::

    python benchmarks/bench_time_travel.py                        # 100k events
    python benchmarks/bench_time_travel.py --events 5000 --reads 5 # quick
    python benchmarks/bench_time_travel.py --keep /tmp/bench-load  # reuse bench_load's build
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import tempfile
import time
from pathlib import Path

from bench_load import (
    DB_NAME,
    LONG_KEY,
    PRINCIPAL,
    BuildParams,
    build,
    kept_stats,
    spread,
)
from rich.console import Console
from rich.table import Table

from chatledger import SessionLedger

console = Console()


def timed(url: str, snapshot_interval: int, version: int | None) -> float:
    """Open a new ledger, time one read (head or context at ``version``), close it."""
    ledger = SessionLedger(url, snapshot_interval=snapshot_interval, create_tables=False)
    try:
        gc.collect()
        start = time.perf_counter()
        if version is None:
            ledger.session(PRINCIPAL, LONG_KEY)
        else:
            ledger.context(PRINCIPAL, LONG_KEY, 128_000, at_version=version)
        return time.perf_counter() - start
    finally:
        ledger.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--reads", type=int, default=9, help="timed reads of each kind (9)")
    parser.add_argument("--snapshot-interval", type=int, default=200)
    parser.add_argument("--keep", type=Path, help="build into/reuse this directory")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--check", action="store_true", help="exit 1 if the target is missed")
    args = parser.parse_args(argv)
    params = BuildParams(
        events=args.events, short_events=100, batch=20, commit_every=20, merge_threshold=8,
        snapshot_interval=args.snapshot_interval,
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="chatledger-tt-") as scratch:
        directory = args.keep or Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        stats = kept_stats(directory, params)
        if stats is None:
            console.print(f"building a {args.events:,}-event session in {directory} ...")
            stats = build(directory, params, "normal")
        version = stats[LONG_KEY].version
        url = f"sqlite:///{directory / DB_NAME}"
        rng = random.Random(args.seed)
        head: list[float] = []
        travel: list[float] = []
        timed(url, args.snapshot_interval, None)  # warm the OS page cache once
        for _ in range(args.reads):
            head.append(timed(url, args.snapshot_interval, None))
            travel.append(timed(url, args.snapshot_interval, rng.randint(2, version)))
    ratio = statistics.median(travel) / statistics.median(head)
    table = Table(title=f"cold reads of a {version:,}-event session (snapshots every "
                        f"{args.snapshot_interval})")  # fmt: skip
    table.add_column("read")
    table.add_column("median ms", justify="right")
    table.add_column("IQR ms", justify="right")
    for name, values in (("head: session()", head), ("context(at_version=random)", travel)):
        table.add_row(name, f"{statistics.median(values) * 1e3:.2f}", f"{spread(values) * 1e3:.2f}")
    console.print(table)
    verdict = "met" if ratio <= 2 else "MISSED"
    console.print(f"time travel / head = {ratio:.2f}x (target <= 2x: {verdict})")
    return 1 if args.check and ratio > 2 else 0


if __name__ == "__main__":
    raise SystemExit(main())
