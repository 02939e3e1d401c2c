"""Append throughput: one message per transaction, ledger vs raw sqlite3 vs SQLiteSession.

What it measures (ops/s, one message = one committed transaction, on fresh
SQLite files in a temporary directory, WAL mode, the same ``synchronous`` level
for every contender):

* ``raw sqlite3`` (baseline A): ``BEGIN IMMEDIATE`` / one ``INSERT`` / ``COMMIT``
  into a table shaped like ``chatledger_events`` with a ~130-byte state.
* ``ledger 1 session``: ``SessionLedger.add_message(p, key, "user", <~100 chars>)``
  on one session (held in the ledger's in-process cache), default settings.
* ``ledger 1 session, encrypted``: the same with ``encryption=True`` (content
  encrypted at rest, docs/erasure.md), so the cost of encryption is the ratio of
  the two in the same rounds.
* ``ledger N sessions``: the same call round-robin over ``--sessions`` sessions.
* ``SQLiteSession`` (baseline B): openai-agents' ``SQLiteSession.add_items`` with one
  item per call, driven by asyncio (each call hops to a worker thread, as the
  library does). Its connections get the same ``synchronous`` level. Skipped with
  a note when ``agents`` is not importable (``pip install openai-agents``).

Each round runs every contender once (order rotated round by round, so drift on
a shared machine hits them alike); the table gives median ops/s, the IQR, and
the ratios ledger/raw and ledger/SQLiteSession, both as ratio of medians and
as the median of the per-round (paired) ratios. Targets: ledger >= 0.5x raw,
ledger >= 2x SQLiteSession (judged on the single-session ledger contender with
the default settings); the encrypted/unencrypted ratio is reported too, and
whether the encrypted ledger meets the raw target.

Run::

    python benchmarks/bench_append.py                      # NORMAL (default) and FULL, 2000 x 5
    python benchmarks/bench_append.py --synchronous normal
    python benchmarks/bench_append.py --synchronous both --n 1000 --rounds 3 --check
    python benchmarks/bench_append.py --profile 3000      # cProfile of add_message (NORMAL)
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import importlib
import os
import pstats
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from common import console, provenance
from rich.table import Table

from chatledger import Principal, SessionLedger

Level = Literal["full", "normal"]
Runner = Callable[[Path, int, Level], float]
LEVELS: dict[str, list[Level]] = {
    "full": ["full"],
    "normal": ["normal"],
    "both": ["full", "normal"],
}

PRINCIPAL = Principal(account_id="acme", user_id="u", agent_id="a")
RAW_STATE_BYTES = 130
TARGET_VS_RAW = 0.5
TARGET_VS_AGENTS = 2.0

RAW = "raw sqlite3"
LEDGER_ONE = "ledger 1 session"
LEDGER_SEALED = "ledger 1 session, encrypted"
LEDGER_MANY = "ledger {n} sessions"
AGENTS = "SQLiteSession"


def content(i: int) -> str:
    """A ~100-character user message, distinct per ``i``."""
    text = f"Message {i:07d}: please summarise the deployment plan for the Acme project in Paris."
    return text.ljust(100, ".")


# ------------------------------------------------------------------ contenders
def run_raw(directory: Path, n: int, level: Level) -> float:
    """Baseline A: raw sqlite3, one INSERT per transaction; returns elapsed seconds."""
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
        state = os.urandom(RAW_STATE_BYTES // 2).hex().encode()
        sql = (
            "INSERT INTO events (originator_id, originator_version, topic, state, "
            "timestamp_us) VALUES (?, ?, ?, ?, ?)"
        )
        cursor = connection.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        cursor.execute(sql, (originator, 1, topic, state, time.time_ns() // 1000))
        cursor.execute("COMMIT")
        start = time.perf_counter()
        for version in range(2, n + 2):
            cursor.execute("BEGIN IMMEDIATE")
            cursor.execute(sql, (originator, version, topic, state, time.time_ns() // 1000))
            cursor.execute("COMMIT")
        return time.perf_counter() - start
    finally:
        connection.close()


def run_ledger(
    directory: Path, n: int, level: Level, sessions: int, *, encryption: bool = False
) -> float:
    """The ledger: ``add_message`` round-robin over ``sessions`` sessions (1 = one session)."""
    name = f"ledger{sessions}.db"
    url = f"sqlite:///{directory / name}"
    with SessionLedger(url, sqlite_synchronous=level, encryption=encryption) as ledger:
        keys = [f"session-{s}" for s in range(sessions)]
        for key in keys:  # create the sessions (and load them into the cache) untimed
            ledger.add_message(PRINCIPAL, key, "user", content(0))
        start = time.perf_counter()
        for i in range(n):
            ledger.add_message(PRINCIPAL, keys[i % sessions], "user", content(i))
        return time.perf_counter() - start


def load_agents() -> ModuleType | None:
    """The ``agents`` package (openai-agents), or ``None`` if it is not installed."""
    try:
        return importlib.import_module("agents")
    except ImportError:
        return None


def _synchronous_level(connection: sqlite3.Connection) -> int:
    row = connection.execute("PRAGMA synchronous").fetchone()
    return int(row[0])


@dataclass
class AgentsRunner:
    """Baseline B: openai-agents' ``SQLiteSession`` on a file database."""

    agents: ModuleType
    observed_levels: set[int] = field(default_factory=set)

    def session_class(self, level: Level) -> Any:
        """``SQLiteSession`` whose connections also get ``PRAGMA synchronous=<level>``.

        SQLiteSession only sets WAL (SQLite's default level is FULL); it configures
        each new connection in ``_configure_connection`` (a private hook), so a
        subclass extends that hook. If the hook is missing the default stays.
        """
        base: Any = self.agents.SQLiteSession
        original = getattr(base, "_configure_connection", None)
        if original is None:
            return base

        def configure(conn: sqlite3.Connection) -> None:
            original(conn)
            conn.execute(f"PRAGMA synchronous={level.upper()}")

        return type(
            "TunedSQLiteSession", (base,), {"_configure_connection": staticmethod(configure)}
        )

    def __call__(self, directory: Path, n: int, level: Level) -> float:
        return asyncio.run(self._run(directory, n, level))

    async def _run(self, directory: Path, n: int, level: Level) -> float:
        session = self.session_class(level)("bench", db_path=str(directory / "agents.db"))
        try:
            await session.add_items([{"role": "user", "content": content(0)}])
            start = time.perf_counter()
            for i in range(n):
                await session.add_items([{"role": "user", "content": content(i)}])
            elapsed = time.perf_counter() - start
            for conn in getattr(session, "_connections", ()):
                self.observed_levels.add(_synchronous_level(conn))
            return elapsed
        finally:
            session.close()


# ------------------------------------------------------------------- harness
@dataclass
class Samples:
    """Ops/s of one contender, one value per round."""

    name: str
    ops: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.ops)

    @property
    def iqr(self) -> float:
        if len(self.ops) < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.ops, n=4, method="inclusive")
        return q3 - q1


def measure(
    level: Level, n: int, rounds: int, sessions: int, agents: ModuleType | None
) -> dict[str, Samples]:
    """Run every contender ``rounds`` times, interleaved, on fresh files."""
    contenders: dict[str, Runner] = {
        RAW: run_raw,
        LEDGER_ONE: lambda d, k, lv: run_ledger(d, k, lv, 1),
        LEDGER_SEALED: lambda d, k, lv: run_ledger(d, k, lv, 1, encryption=True),
    }
    many = LEDGER_MANY.format(n=sessions)
    if sessions > 1:
        contenders[many] = lambda d, k, lv: run_ledger(d, k, lv, sessions)
    agents_runner = AgentsRunner(agents) if agents is not None else None
    if agents_runner is not None:
        contenders[AGENTS] = agents_runner
    results = {name: Samples(name) for name in contenders}
    names = list(contenders)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        parts = []
        for name in order:
            directory = Path(tempfile.mkdtemp(prefix="bench-append-"))
            try:
                gc.collect()
                elapsed = contenders[name](directory, n, level)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
            results[name].ops.append(n / elapsed)
            parts.append(f"{name} {n / elapsed:,.0f}")
        console.print(f"  round {r + 1}/{rounds}: " + " | ".join(parts), highlight=False)
    if agents_runner is not None and agents_runner.observed_levels:
        names_by_level = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
        seen = ", ".join(
            names_by_level.get(v, str(v)) for v in sorted(agents_runner.observed_levels)
        )
        console.print(f"  SQLiteSession connections ran with synchronous={seen}", highlight=False)
    return results


def paired_ratio(a: Samples, b: Samples) -> float:
    """Median over rounds of a/b (both ran in the same round)."""
    return statistics.median(x / y for x, y in zip(a.ops, b.ops, strict=True))


def paired_spread(a: Samples, b: Samples) -> str:
    """The per-round ratios a/b as median (min-max), the form the docs quote."""
    ratios = [x / y for x, y in zip(a.ops, b.ops, strict=True)]
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


def report(level: Level, n: int, results: dict[str, Samples], sessions: int) -> bool:
    """Print the table and the target verdicts; True if every checked target is met."""
    raw = results[RAW]
    agents = results.get(AGENTS)
    table = Table(title=f"append, 1 message per transaction, synchronous={level.upper()}, n={n}")
    table.add_column("contender")
    table.add_column("median ops/s", justify="right")
    table.add_column("IQR", justify="right")
    table.add_column("vs raw (medians | paired)", justify="right")
    table.add_column("vs SQLiteSession (medians | paired)", justify="right")
    for samples in results.values():
        vs_raw = f"{samples.median / raw.median:.2f}x | {paired_ratio(samples, raw):.2f}x"
        vs_agents = (
            f"{samples.median / agents.median:.2f}x | {paired_ratio(samples, agents):.2f}x"
            if agents is not None
            else "skipped"
        )
        table.add_row(
            samples.name, f"{samples.median:,.0f}", f"{samples.iqr:,.0f}", vs_raw, vs_agents
        )
    console.print(table)
    ledger = results[LEDGER_ONE]
    ok = True
    ratio = ledger.median / raw.median
    met = ratio >= TARGET_VS_RAW
    ok &= met
    console.print(
        f"  target ledger/raw >= {TARGET_VS_RAW}: {ratio:.2f}x -> {'MET' if met else 'NOT MET'}"
        f"; per round {paired_spread(ledger, raw)}",
        highlight=False,
    )
    if agents is None:
        console.print(
            "  target ledger/SQLiteSession >= 2: SKIPPED (openai-agents is not installed; "
            "run `pip install openai-agents` in this environment to compare)",
            highlight=False,
        )
    else:
        ratio = ledger.median / agents.median
        met = ratio >= TARGET_VS_AGENTS
        ok &= met
        console.print(
            f"  target ledger/SQLiteSession >= {TARGET_VS_AGENTS}: {ratio:.2f}x -> "
            f"{'MET' if met else 'NOT MET'}; per round {paired_spread(ledger, agents)}",
            highlight=False,
        )
    sealed = results[LEDGER_SEALED]
    console.print(
        f"  (info) encryption: encrypted/unencrypted = {sealed.median / ledger.median:.2f}x "
        f"(medians) | {paired_ratio(sealed, ledger):.2f}x (paired; per round "
        f"{paired_spread(sealed, ledger)}); encrypted vs raw {sealed.median / raw.median:.2f}x, "
        f"per round {paired_spread(sealed, raw)} (target {TARGET_VS_RAW} for encryption on by "
        "default)",
        highlight=False,
    )
    many = results.get(LEDGER_MANY.format(n=sessions))
    if many is not None:
        console.print(f"  (info) {many.name}: {many.median / raw.median:.2f}x raw", highlight=False)
    return ok


def profile(n: int, level: Level, top: int) -> None:
    """cProfile ``n`` single-session ``add_message`` calls and print the top costs."""
    directory = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    try:
        with SessionLedger(
            f"sqlite:///{directory / 'profile.db'}", sqlite_synchronous=level
        ) as ledger:
            ledger.add_message(PRINCIPAL, "profiled", "user", content(0))
            profiler = cProfile.Profile()
            start = time.perf_counter()
            profiler.enable()
            for i in range(n):
                ledger.add_message(PRINCIPAL, "profiled", "user", content(i))
            profiler.disable()
            elapsed = time.perf_counter() - start
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    console.print(
        f"profiled {n} add_message calls, synchronous={level.upper()}: "
        f"{elapsed / n * 1e6:.0f} us/call under the profiler",
        highlight=False,
    )
    stats = pstats.Stats(profiler)
    stats.sort_stats(pstats.SortKey.CUMULATIVE).print_stats(top)
    stats.sort_stats(pstats.SortKey.TIME).print_stats(top)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=2000, help="messages per round (default 2000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument(
        "--synchronous",
        choices=["full", "normal", "both"],
        default=None,
        help="SQLite synchronous level for every contender (default: both; --profile: normal)",
    )
    parser.add_argument(
        "--sessions", type=int, default=100, help="sessions of the round-robin contender (1: off)"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is not met")
    parser.add_argument(
        "--profile",
        type=int,
        metavar="N",
        help="instead of benchmarking, cProfile N add_message calls (synchronous NORMAL "
        "unless --synchronous full) and print the top functions",
    )
    args = parser.parse_args(argv)
    if args.n < 1 or args.rounds < 1 or args.sessions < 1:
        parser.error("--n, --rounds and --sessions must be >= 1")
    if args.profile is not None:
        profile(args.profile, "full" if args.synchronous == "full" else "normal", top=30)
        return 0
    agents = load_agents()
    if agents is None:
        console.print(
            "NOTE: the SQLiteSession comparison is skipped: the `agents` package is not "
            "importable. Install it with `pip install openai-agents` to compare.",
            highlight=False,
        )
    levels = LEVELS[args.synchronous or "both"]
    console.print(
        f"{provenance()}, python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} CPUs, n={args.n}, rounds={args.rounds}",
        highlight=False,
    )
    ok = True
    for level in levels:
        console.print(f"[bold]synchronous={level.upper()}[/bold]")
        results = measure(level, args.n, args.rounds, args.sessions, agents)
        ok &= report(level, args.n, results, args.sessions)
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    raise SystemExit(main())
