"""verify() vs a raw scan of the same rows: the chain check and the deep replay check.

Builds a ledger of ``--events`` events (default 100k; the mix of
``bench_rebuild.py``: ``add_messages`` batches of 100 across many sessions
and accounts, a commit after each batch, 30% of the messages carrying
tool-call data; snapshots as the ledger takes them), then per round measures,
on the same database, in an order rotated round by round:

* ``raw scan`` (the baseline): ``SELECT id, originator_id,
  originator_version, topic, state, timestamp_us, hash FROM chatledger_events
  ORDER BY originator_id, originator_version`` on a DB-API cursor
  (``fetchmany(5000)``), and ``hashlib.sha256`` over each row's position,
  version, timestamp, topic and state -- the least any check of the hashes
  must do: read every hashed byte and hash it;
* ``verify``: ``SessionLedger.verify(admin)``, the default check: every
  session's hash chain (positions, versions, timestamps, payloads), the
  identity of its first event and the stored facts that name it;
* ``verify deep``: ``SessionLedger.verify(admin, deep=True)``: the same plus
  every session replayed, every event's stored facts recomputed and every
  snapshot compared with the replayed state.

It prints median events/s with the min-max spread, and the ratios verify /
raw scan (target >= 0.5x) and verify deep / raw scan (target >= 0.2x), as the
ratio of medians and the median (min-max) of the per-round ratios.

Run::

    python benchmarks/bench_verify.py                      # SQLite, 100k events, 5 rounds
    python benchmarks/bench_verify.py --events 20000 --rounds 3 --check
    python benchmarks/bench_verify.py --url postgresql+psycopg://postgres@127.0.0.1/bench
    python benchmarks/bench_verify.py --profile deep       # cProfile one verify(deep=True)
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import os
import pstats
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench_rebuild import build
from common import console, provenance
from rich.table import Table

from chatledger import Principal, SessionLedger
from chatledger.read_models import ReadModels

ADMIN = Principal(account_id="ops", user_id="auditor", role="admin")
TARGET_CHAIN = 0.5
TARGET_DEEP = 0.2
RAW = "raw scan"
CHAIN = "verify"
DEEP = "verify deep"
_PACK = struct.Struct(">qqq")


def raw_scan(ledger: SessionLedger) -> int:
    """The baseline: read every hashed column in chain order and hash each row."""
    connection = ledger.core.store.event_recorder.engine.raw_connection()
    try:
        cursor = connection.cursor()
        cursor.execute(
            "SELECT id, originator_id, originator_version, topic, state, timestamp_us, hash "
            "FROM chatledger_events ORDER BY originator_id, originator_version"
        )
        count = 0
        sha256, pack = hashlib.sha256, _PACK.pack
        while rows := cursor.fetchmany(5000):
            for position, _oid, version, topic, state, timestamp_us, _digest in rows:
                sha256(b"".join((pack(position, version, timestamp_us), topic.encode(), state)))
            count += len(rows)
        cursor.close()
    finally:
        connection.close()
    return count


def run_verify(ledger: SessionLedger, *, deep: bool) -> int:
    report = ledger.verify(ADMIN, deep=deep)
    if not report.ok:
        raise SystemExit(f"verify found issues in a ledger nobody touched: {report.issues[:3]}")
    return report.events_checked


def rate(work: Callable[[], int]) -> float:
    gc.collect()
    started = time.perf_counter()
    count = work()
    return count / (time.perf_counter() - started)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


def measure(url: str, events: int, rounds: int) -> dict[str, list[float]]:
    with SessionLedger(url) as ledger:
        head = ReadModels(ledger).head()
        if head < events:
            build(ledger, events - head)
        contenders: dict[str, Callable[[], int]] = {
            RAW: lambda: raw_scan(ledger),
            CHAIN: lambda: run_verify(ledger, deep=False),
            DEEP: lambda: run_verify(ledger, deep=True),
        }
        names = list(contenders)
        rates: dict[str, list[float]] = {name: [] for name in names}
        for n in range(rounds):
            order = names[n % len(names) :] + names[: n % len(names)]
            for name in order:
                rates[name].append(rate(contenders[name]))
            console.print(
                f"  round {n + 1}/{rounds}: "
                + " | ".join(f"{name} {rates[name][-1]:,.0f}/s" for name in names),
                highlight=False,
            )
    return rates


def report(rates: dict[str, list[float]], events: int, dialect: str) -> bool:
    raw = rates[RAW]
    table = Table(title=f"verify vs raw scan ({dialect}, {events:,} events)")
    table.add_column("contender")
    table.add_column("median events/s (min-max)", justify="right")
    table.add_column("vs raw: medians", justify="right")
    table.add_column("vs raw: per round, median (min-max)", justify="right")
    for name, values in rates.items():
        paired = [v / r for v, r in zip(values, raw, strict=True)]
        table.add_row(
            name,
            f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})",
            f"{statistics.median(values) / statistics.median(raw):.2f}x",
            spread(paired),
        )
    console.print(table)
    ok = True
    for name, target in ((CHAIN, TARGET_CHAIN), (DEEP, TARGET_DEEP)):
        ratio = statistics.median(rates[name]) / statistics.median(raw)
        met = ratio >= target
        ok &= met
        console.print(
            f"  target {name} / raw scan >= {target}: {ratio:.2f}x -> "
            f"{'MET' if met else 'NOT MET'}",
            highlight=False,
        )
    return ok


def profile(url: str, events: int, deep: bool) -> None:
    with SessionLedger(url) as ledger:
        head = ReadModels(ledger).head()
        if head < events:
            build(ledger, events - head)
        profiler = cProfile.Profile()
        profiler.enable()
        run_verify(ledger, deep=deep)
        profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats(pstats.SortKey.CUMULATIVE).print_stats(25)
    stats.sort_stats(pstats.SortKey.TIME).print_stats(25)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--url", help="ledger URL (default: a fresh SQLite file)")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is not met")
    parser.add_argument(
        "--profile", choices=["chain", "deep"], help="instead, cProfile one verify and print it"
    )
    args = parser.parse_args(argv)
    if args.events < 1 or args.rounds < 1:
        parser.error("--events and --rounds must be >= 1")
    with tempfile.TemporaryDirectory() as folder:
        url = args.url or f"sqlite:///{Path(folder) / 'bench.db'}"
        if args.profile:
            profile(url, args.events, args.profile == "deep")
            return 0
        console.print(
            f"{provenance()}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
            f"events={args.events:,}, rounds={args.rounds}",
            highlight=False,
        )
        rates = measure(url, args.events, args.rounds)
        ok = report(rates, args.events, url.split(":")[0])
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    raise SystemExit(main())
