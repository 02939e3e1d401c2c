"""Append throughput of structured agent-framework items: ``add_items`` vs raw sqlite3.

One item = one committed transaction, on fresh SQLite files (WAL mode), the
same ``synchronous`` level for every contender. The items cycle through the
shapes an OpenAI Agents run stores: a user message with content parts, a
function call, its output, a reasoning item, an assistant message with
output text (180-330 bytes of JSON each).

* ``raw sqlite3`` (the baseline): ``BEGIN IMMEDIATE`` / ``INSERT`` the item's
  JSON (``json.dumps``) into a table shaped like ``chatledger_events`` /
  ``COMMIT``.
* ``ledger add_items``: ``SessionLedger.add_items(p, key, [item])`` on one session.
* ``ChatLedgerSession`` (info): the OpenAI Agents adapter's ``add_items([item])``
  driven by asyncio (a worker-thread hop per call, an idempotency key per write).
* ``SQLiteSession`` (info): openai-agents' own store, when installed.

Rounds interleave the contenders (order rotated each round); the table gives
median items/s, the IQR, and ledger/raw as ratio of medians and median of
the paired per-round ratios. Target: ``ledger add_items`` >= 0.5x raw.

Then each integration against its framework's own store, in the same run
(``framework_stores.py``: OpenAI Agents SDK, Google ADK, AG2, LangGraph):
appends/s and loads/s, median over the rounds, and chatledger / the
framework's store. Target: >= 1.0x (not slower than the store it replaces);
a framework that is not installed is skipped and said so.

Run::

    python benchmarks/bench_items.py                       # NORMAL and FULL, 2000 x 5
    python benchmarks/bench_items.py --synchronous normal --n 1000 --rounds 3 --check
    python benchmarks/bench_items.py --profile 3000        # cProfile of add_items (NORMAL)
    python benchmarks/bench_items.py --only-frameworks --framework-n 300 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import pstats
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_append import LEVELS, AgentsRunner, Level, Samples, load_agents, paired_ratio
from common import console, provenance
from framework_stores import PAIRS
from rich.table import Table

from chatledger import Principal, SessionLedger

PRINCIPAL = Principal(account_id="acme", user_id="u", agent_id="a")
TARGET_VS_RAW = 0.5
RAW = "raw sqlite3"
LEDGER = "ledger add_items"
ADAPTER = "ChatLedgerSession"
AGENTS = "SQLiteSession"
Runner = Callable[[Path, int, Level], float]


def item(i: int) -> dict[str, Any]:
    """The ``i``-th item: the five Responses shapes in turn, distinct per ``i``."""
    call = f"call_{i // 5:07d}"
    shapes: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": f"Turn {i}: where is order {i}? It was due Monday."}]},
        {"type": "function_call", "call_id": call, "name": "lookup_order",
         "arguments": json.dumps({"order_id": i, "fields": ["status", "eta"]}),
         "id": f"fc_{i:08d}", "status": "completed"},
        {"type": "function_call_output", "call_id": call,
         "output": json.dumps({"status": "shipped", "eta": "2026-01-05", "carrier": "PC"})},
        {"type": "reasoning", "id": f"rs_{i:08d}", "summary": [
            {"type": "summary_text", "text": "The order shipped; tell the ETA."}]},
        {"type": "message", "role": "assistant", "id": f"msg_{i:08d}", "status": "completed",
         "content": [{"type": "output_text", "annotations": [],
                      "text": f"Order {i} shipped and should arrive on 5 January."}]},
    ]  # fmt: skip
    return shapes[i % 5]


def run_raw(directory: Path, n: int, level: Level) -> float:
    """Baseline: raw sqlite3, one INSERT of the item's JSON per transaction."""
    connection = sqlite3.connect(directory / "raw.db", isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute(f"PRAGMA synchronous={level.upper()}")
        connection.execute(
            "CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, "
            "originator_id CHAR(32) NOT NULL, originator_version INTEGER NOT NULL, "
            "topic TEXT NOT NULL, state BLOB NOT NULL, timestamp_us INTEGER NOT NULL, "
            "UNIQUE (originator_id, originator_version))"
        )
        originator = os.urandom(16).hex()
        topic = "chatledger.domain.events:MessageAdded"
        sql = (
            "INSERT INTO events (originator_id, originator_version, topic, state, "
            "timestamp_us) VALUES (?, ?, ?, ?, ?)"
        )
        cursor = connection.cursor()
        start = time.perf_counter()
        for version in range(1, n + 1):
            state = json.dumps(item(version)).encode()
            cursor.execute("BEGIN IMMEDIATE")
            cursor.execute(sql, (originator, version, topic, state, time.time_ns() // 1000))
            cursor.execute("COMMIT")
        return time.perf_counter() - start
    finally:
        connection.close()


def run_ledger(directory: Path, n: int, level: Level) -> float:
    """``SessionLedger.add_items`` with one item per call, one session (created untimed)."""
    with SessionLedger(f"sqlite:///{directory / 'ledger.db'}", sqlite_synchronous=level) as ledger:
        ledger.add_items(PRINCIPAL, "bench", [item(0)])
        start = time.perf_counter()
        for i in range(1, n + 1):
            ledger.add_items(PRINCIPAL, "bench", [item(i)])
        return time.perf_counter() - start


def run_adapter(directory: Path, n: int, level: Level) -> float:
    """The OpenAI Agents adapter's ``add_items([item])`` under asyncio."""
    from chatledger.integrations.openai_agents import ChatLedgerSession

    async def drive(session: Any) -> float:
        await session.add_items([item(0)])
        start = time.perf_counter()
        for i in range(1, n + 1):
            await session.add_items([item(i)])
        return time.perf_counter() - start

    with SessionLedger(f"sqlite:///{directory / 'adapter.db'}", sqlite_synchronous=level) as ledger:
        return asyncio.run(drive(ChatLedgerSession("bench", ledger, PRINCIPAL)))


def agents_runner(agents: Any) -> Runner:
    """openai-agents' ``SQLiteSession`` with these items (its connections at ``level``)."""
    base = AgentsRunner(agents)

    def run(directory: Path, n: int, level: Level) -> float:
        async def drive() -> float:
            session = base.session_class(level)("bench", db_path=str(directory / "agents.db"))
            try:
                await session.add_items([item(0)])
                start = time.perf_counter()
                for i in range(1, n + 1):
                    await session.add_items([item(i)])
                return time.perf_counter() - start
            finally:
                session.close()

        return asyncio.run(drive())

    return run


def measure(level: Level, n: int, rounds: int, agents: Any) -> dict[str, Samples]:
    """Every contender ``rounds`` times, interleaved, each on a fresh file."""
    contenders: dict[str, Runner] = {RAW: run_raw, LEDGER: run_ledger}
    if agents is not None:
        contenders[ADAPTER] = run_adapter
        contenders[AGENTS] = agents_runner(agents)
    results = {name: Samples(name) for name in contenders}
    names = list(contenders)
    for r in range(rounds):
        parts = []
        for name in names[r % len(names) :] + names[: r % len(names)]:
            directory = Path(tempfile.mkdtemp(prefix="bench-items-"))
            try:
                gc.collect()
                elapsed = contenders[name](directory, n, level)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
            results[name].ops.append(n / elapsed)
            parts.append(f"{name} {n / elapsed:,.0f}")
        console.print(f"  round {r + 1}/{rounds}: " + " | ".join(parts), highlight=False)
    return results


def report(level: Level, n: int, results: dict[str, Samples]) -> bool:
    """The table and the verdict; True if ledger/raw meets the target."""
    raw = results[RAW]
    table = Table(title=f"structured items, 1 per transaction, synchronous={level.upper()}, n={n}")
    for column in ("contender", "median items/s", "IQR", "vs raw (medians | paired)"):
        table.add_column(column, justify="left" if column == "contender" else "right")
    for samples in results.values():
        table.add_row(
            samples.name,
            f"{samples.median:,.0f}",
            f"{samples.iqr:,.0f}",
            f"{samples.median / raw.median:.2f}x | {paired_ratio(samples, raw):.2f}x",
        )
    console.print(table)
    ratio = results[LEDGER].median / raw.median
    met = ratio >= TARGET_VS_RAW
    console.print(
        f"  target ledger add_items/raw >= {TARGET_VS_RAW}: {ratio:.2f}x -> "
        f"{'MET' if met else 'NOT MET'}",
        highlight=False,
    )
    return met


def profile(n: int, level: Level, top: int) -> None:
    """cProfile ``n`` single-item ``add_items`` calls and print the top costs."""
    directory = Path(tempfile.mkdtemp(prefix="bench-items-profile-"))
    try:
        with SessionLedger(f"sqlite:///{directory / 'p.db'}", sqlite_synchronous=level) as ledger:
            ledger.add_items(PRINCIPAL, "profiled", [item(0)])
            profiler = cProfile.Profile()
            profiler.enable()
            for i in range(1, n + 1):
                ledger.add_items(PRINCIPAL, "profiled", [item(i)])
            profiler.disable()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    stats = pstats.Stats(profiler)
    stats.sort_stats(pstats.SortKey.CUMULATIVE).print_stats(top)
    stats.sort_stats(pstats.SortKey.TIME).print_stats(top)


def measure_frameworks(n: int, loads: int, rounds: int) -> bool:
    """Each integration and its framework's store, ``rounds`` times, alternating which goes
    first, on fresh files; prints the table. True if no integration is slower at either."""
    table = Table(title=f"integrations vs the framework's own store, n={n} appends, {loads} loads")
    for column in (
        "framework",
        "contender",
        "appends/s",
        "loads/s",
        "vs own store (append | load)",
    ):
        table.add_column(
            column, justify="left" if column in ("framework", "contender") else "right"
        )
    ok = True
    for framework, (ours_name, theirs_name, pair) in PAIRS.items():
        try:
            ours, theirs = pair()
        except ImportError as missing:
            console.print(f"  {framework}: skipped ({missing.name or missing} is not installed)")
            continue
        samples: dict[str, tuple[list[float], list[float]]] = {
            ours_name: ([], []),
            theirs_name: ([], []),
        }
        runners = {ours_name: ours, theirs_name: theirs}
        for r in range(rounds):
            for name in [ours_name, theirs_name] if r % 2 == 0 else [theirs_name, ours_name]:
                directory = Path(tempfile.mkdtemp(prefix="bench-frameworks-"))
                try:
                    gc.collect()
                    appended, loaded = runners[name](directory, n, loads)
                finally:
                    shutil.rmtree(directory, ignore_errors=True)
                samples[name][0].append(n / appended)
                samples[name][1].append(loads / loaded)
        medians = {k: (statistics.median(a), statistics.median(b)) for k, (a, b) in samples.items()}
        append_ratio = medians[ours_name][0] / medians[theirs_name][0]
        load_ratio = medians[ours_name][1] / medians[theirs_name][1]
        for name in (ours_name, theirs_name):
            appends, reads = medians[name]
            spread = f"{min(samples[name][0]):,.0f}-{max(samples[name][0]):,.0f}"
            ratio = f"{append_ratio:.2f}x | {load_ratio:.2f}x" if name == ours_name else ""
            table.add_row(
                framework if name == ours_name else "", name,
                f"{appends:,.0f} ({spread})", f"{reads:,.1f}", ratio,
            )  # fmt: skip
        ok &= append_ratio >= 1.0 and load_ratio >= 1.0
    console.print(table)
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=2000, help="items per round (default 2000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--synchronous", choices=["full", "normal", "both"], default=None)
    parser.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    parser.add_argument("--profile", type=int, metavar="N", help="cProfile N add_items calls")
    parser.add_argument("--framework-n", type=int, default=500, help="appends per framework round")
    parser.add_argument("--loads", type=int, default=20, help="loads per framework round")
    parser.add_argument("--only-frameworks", action="store_true", help="only the framework table")
    args = parser.parse_args(argv)
    if args.n < 1 or args.rounds < 1:
        parser.error("--n and --rounds must be >= 1")
    if args.profile is not None:
        profile(args.profile, "full" if args.synchronous == "full" else "normal", top=30)
        return 0
    agents = load_agents()
    if agents is None:
        console.print("NOTE: openai-agents is not installed: the adapter and SQLiteSession rows "
                      "are skipped (pip install 'chatledger[openai-agents]').")  # fmt: skip
    console.print(
        f"{provenance()}, python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} CPUs, n={args.n}, rounds={args.rounds}",
        highlight=False,
    )
    ok = True
    if not args.only_frameworks:
        for level in LEVELS[args.synchronous or "both"]:
            console.print(f"[bold]synchronous={level.upper()}[/bold]")
            ok &= report(level, args.n, measure(level, args.n, args.rounds, agents))
    console.print(
        "[bold]integrations, synchronous=FULL (the frameworks' SQLite stores' level)[/bold]"
    )
    frameworks_ok = measure_frameworks(args.framework_n, args.loads, args.rounds)
    console.print(
        f"  target: every integration >= 1.0x its framework's store -> "
        f"{'MET' if frameworks_ok else 'NOT MET'}",
        highlight=False,
    )
    return 0 if (ok and frameworks_ok) or not args.check else 1


if __name__ == "__main__":
    raise SystemExit(main())
