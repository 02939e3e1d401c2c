"""PostgreSQL append throughput with 1, 4 and 8 writer processes: ledger vs raw psycopg.

What it measures (committed messages per second, summed over the writers, one
message = one transaction, ``synchronous_commit`` as the server has it -- on
by default -- in a database of its own, created and dropped by the run):

* ``ledger``: each writer process opens a ``SessionLedger`` and calls
  ``add_message(p, key, "user", <~100 chars>)`` round-robin over
  ``--sessions`` sessions of its own (created untimed, so they are loaded).
* ``raw``: each writer process runs one autocommitted ``INSERT`` per
  transaction, on one psycopg connection, of a row shaped like the ledger's
  (the same columns and values: a ~300-byte state, a 32-byte hash, the
  stored facts; the position from a sequence) into a plain table made with
  ``CREATE TABLE ... (LIKE chatledger_events INCLUDING ALL)`` -- the same
  keys and indexes, no ledger around it. One statement, one round trip: the
  fastest way to make one such row one transaction.

Writers are long-lived processes, released together at a common start time;
each counts what it committed in ``--seconds`` seconds. Every round runs every
(contender, writer count) once, in an order rotated round by round, so drift
on a shared machine hits all alike. Reported: median ops/s and spread (IQR,
min-max), each contender's speed-up over its own single writer (ratio of
medians, and the median of per-round ratios), the ratio ledger speed-up / raw
speed-up (target >= 0.8 at 4 and at 8 writers) and one-writer ledger/raw
(target >= 0.5).

Run::

    python benchmarks/bench_pg_writers.py                       # 1, 4, 8 writers; 5 rounds
    python benchmarks/bench_pg_writers.py --rounds 7 --seconds 4 --check
    python benchmarks/bench_pg_writers.py --url postgresql+psycopg://user@host/postgres
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from common import console, provenance
from rich.table import Table

from chatledger.adapters.schema import events_table
from chatledger.projections.facts import StoredFacts

TARGET_SCALING = 0.8
TARGET_ONE_WRITER = 0.5
LEDGER = "ledger"
RAW = "raw"
STATE_BYTES = 300
RAW_COLUMNS = tuple(c.name for c in events_table.columns if c.name != "tx_id")
"""Every column of the events table but tx_id, which its default fills in."""


def content(i: int) -> str:
    """A ~100-character user message, distinct per ``i``."""
    text = f"Message {i:07d}: please summarise the deployment plan for the Acme project in Paris."
    return text.ljust(100, ".")


def _conninfo(url: str) -> str:
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    info = (
        f"host={parsed.host or '127.0.0.1'} port={parsed.port or 5432} "
        f"dbname={parsed.database} user={parsed.username or 'postgres'}"
    )
    return info + (f" password={parsed.password}" if parsed.password else "")


# ---------------------------------------------------------------- the writers
def writer(index: int, url: str, sessions: int, pipe: Connection) -> None:
    """One writer process: set up once, then run each timed burst it is sent."""
    import psycopg

    from chatledger import Principal, SessionLedger

    principal = Principal(account_id="bench", user_id=f"u{index}", agent_id="bench")
    ledger = SessionLedger(url, create_tables=False)
    keys = [f"w{index}-s{s}" for s in range(sessions)]
    for key in keys:
        ledger.add_message(principal, key, "user", content(0))
    raw = psycopg.connect(_conninfo(url), autocommit=True)
    state = os.urandom(STATE_BYTES)
    digest = os.urandom(32)
    topic = "chatledger.domain.events:MessageAdded"
    originator = uuid.uuid4()
    facts = StoredFacts(
        event_type="MessageAdded", tenant="bench", session_key=f"raw-{index}",
        actor_account="bench", actor_user=f"u{index}", actor_agent="bench",
        actor_role="member", trace_id="", message_count=1, pending_tokens=25, turn_count=1,
        commit_count=0, archive_count=0, last_commit_us=None, status="live", tool_name=None,
        tool_status=None, prompt_tokens=0, completion_tokens=0,
        summary="user message m1 (25 tokens)", idempotency_key=None, tool_calls=None,
        tool_failures=None,
    )  # fmt: skip
    insert = (
        f"INSERT INTO bench_raw ({', '.join(RAW_COLUMNS)}) VALUES (nextval('bench_raw_id'), "
        f"{', '.join(['%s'] * (len(RAW_COLUMNS) - 1))})"
    )
    version = 0
    n = 0
    pipe.send("ready")
    while True:
        command = pipe.recv()
        if command is None:
            break
        contender, start, seconds = command
        gc.collect()
        while time.time() < start:
            time.sleep(0.0005)
        deadline = start + seconds
        done = 0
        if contender == LEDGER:
            while True:
                ledger.add_message(principal, keys[n % sessions], "user", content(n))
                n += 1
                if time.time() > deadline:
                    break
                done += 1
        else:
            while True:
                version += 1
                raw.execute(
                    insert,
                    (originator, version, topic, state, time.time_ns() // 1000, digest, *facts),
                )
                if time.time() > deadline:
                    break
                done += 1
        pipe.send(done)
    raw.close()
    ledger.close()


@dataclass
class Samples:
    """Ops/s of one (contender, writers), one value per round."""

    ops: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.ops)

    def spread(self) -> str:
        if len(self.ops) < 2:
            return "-"
        q1, _, q3 = statistics.quantiles(self.ops, n=4, method="inclusive")
        return f"{q3 - q1:,.0f} ({min(self.ops):,.0f}-{max(self.ops):,.0f})"


def prepare(url: str) -> None:
    """The ledger's tables and the raw table, once, before the writers start."""
    import psycopg

    from chatledger import SessionLedger

    SessionLedger(url).close()
    with psycopg.connect(_conninfo(url), autocommit=True) as connection:
        connection.execute("CREATE SEQUENCE bench_raw_id")
        connection.execute("CREATE TABLE bench_raw (LIKE chatledger_events INCLUDING ALL)")


def measure(
    url: str, counts: list[int], rounds: int, seconds: float, sessions: int
) -> dict[tuple[str, int], Samples]:
    context = mp.get_context("spawn")
    pipes: list[Connection] = []
    processes = []
    for index in range(max(counts)):
        ours, theirs = context.Pipe()
        process = context.Process(target=writer, args=(index, url, sessions, theirs), daemon=True)
        process.start()
        pipes.append(ours)
        processes.append(process)
    try:
        for pipe in pipes:
            if pipe.recv() != "ready":
                raise RuntimeError("a writer failed to start")
        runs = [(contender, k) for k in counts for contender in (LEDGER, RAW)]
        results = {run: Samples() for run in runs}
        for r in range(rounds):
            order = runs[r % len(runs) :] + runs[: r % len(runs)]
            parts = []
            for contender, k in order:
                start = time.time() + 0.3
                for pipe in pipes[:k]:
                    pipe.send((contender, start, seconds))
                done = sum(pipe.recv() for pipe in pipes[:k])
                results[(contender, k)].ops.append(done / seconds)
                parts.append(f"{contender}x{k} {done / seconds:,.0f}")
            console.print(f"  round {r + 1}/{rounds}: " + " | ".join(parts), highlight=False)
        return results
    finally:
        for pipe in pipes:
            pipe.send(None)
        for process in processes:
            process.join(timeout=30)


def speedup(results: dict[tuple[str, int], Samples], contender: str, k: int) -> tuple[float, float]:
    """(ratio of medians, median of per-round ratios) of k writers over one writer."""
    many, one = results[(contender, k)], results[(contender, 1)]
    paired = statistics.median(a / b for a, b in zip(many.ops, one.ops, strict=True))
    return many.median / one.median, paired


def report(results: dict[tuple[str, int], Samples], counts: list[int]) -> bool:
    table = Table(title="PostgreSQL appends, 1 message per transaction, writers on own sessions")
    for column in ("writers", "contender", "median ops/s", "IQR (min-max)", "speed-up vs 1"):
        table.add_column(column, justify="right")
    for k in counts:
        for contender in (LEDGER, RAW):
            samples = results[(contender, k)]
            up = "" if k == 1 else "{:.2f}x | {:.2f}x".format(*speedup(results, contender, k))
            table.add_row(str(k), contender, f"{samples.median:,.0f}", samples.spread(), up)
    console.print(table)
    console.print("  (speed-up: ratio of medians | median of per-round ratios)", highlight=False)
    ok = True
    if 1 in counts:
        one = results[(LEDGER, 1)].median / results[(RAW, 1)].median
        paired = statistics.median(
            a / b for a, b in zip(results[(LEDGER, 1)].ops, results[(RAW, 1)].ops, strict=True)
        )
        met = one >= TARGET_ONE_WRITER
        ok &= met
        console.print(
            f"  one writer, ledger/raw >= {TARGET_ONE_WRITER}: {one:.2f}x (paired {paired:.2f}x) "
            f"-> {'MET' if met else 'NOT MET'}",
            highlight=False,
        )
    for k in counts:
        if k == 1:
            continue
        ledger, ledger_paired = speedup(results, LEDGER, k)
        raw, raw_paired = speedup(results, RAW, k)
        ratio = ledger / raw
        met = ratio >= TARGET_SCALING
        ok &= met
        console.print(
            f"  {k} writers: ledger speed-up {ledger:.2f}x / raw speed-up {raw:.2f}x = "
            f"{ratio:.2f} (per-round medians: {ledger_paired / raw_paired:.2f}); target >= "
            f"{TARGET_SCALING} -> {'MET' if met else 'NOT MET'}",
            highlight=False,
        )
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--url",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
        help="a database to connect to for creating (and dropping) the benchmark's own",
    )
    parser.add_argument("--writers", default="1,4,8", help="writer counts (default 1,4,8)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each timed run")
    parser.add_argument("--sessions", type=int, default=4, help="sessions per ledger writer")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is not met")
    args = parser.parse_args(argv)
    counts = sorted({int(k) for k in args.writers.split(",")})
    if 1 not in counts or args.rounds < 1 or args.seconds <= 0 or args.sessions < 1:
        parser.error("--writers must include 1; --rounds, --seconds, --sessions must be > 0")

    import psycopg
    from sqlalchemy.engine import make_url

    admin = _conninfo(args.url)
    name = f"chatledger_bench_writers_{os.getpid()}"
    url = make_url(args.url).set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
        settings = dict(
            connection.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('synchronous_commit', 'fsync', 'commit_delay', 'server_version')"
            ).fetchall()
        )
    console.print(
        f"{provenance()}, python {sys.version.split()[0]}, PostgreSQL "
        f"{settings.get('server_version')}, synchronous_commit={settings.get('synchronous_commit')}"
        f", fsync={settings.get('fsync')}, commit_delay={settings.get('commit_delay')}, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
        f"{os.getloadavg()[2]:.2f}; writers {counts}, {args.rounds} rounds x {args.seconds:g}s",
        highlight=False,
    )
    try:
        prepare(url)
        results = measure(url, counts, args.rounds, args.seconds, args.sessions)
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    console.print(f"load after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}", highlight=False)
    ok = report(results, counts)
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    raise SystemExit(main())
