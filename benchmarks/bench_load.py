"""Cold loads: a long committed session vs a short one, and cold reads vs SQLiteSession.

Part 1 (``--mode load``): cold load time of a long session (default 100,000
events) vs a short one (100 events).

What it measures: both sessions live in one SQLite file. Each timed load opens
a NEW ``SessionLedger`` (so nothing is in its in-process cache; the OS page
cache stays warm) and times ``ledger.session(p, key)`` alone; the ledger is
opened and closed outside the timer. Loads alternate short/long round by round
after one untimed warm-up load of each. It prints the median and IQR of each,
the ratio long/short (target: <= 2) and why: snapshot size, events replayed
after the snapshot, and the size of the oldest live archive.

How the sessions are built (realistically, and fast): ``add_messages`` in
batches (``--batch``, default 20), a ``commit`` whenever ``--commit-every``
(default 20) messages are live, and ``merge_archives(threshold=...)`` whenever
the live archives exceed ``--merge-threshold`` (default 8), until the session's
version is exactly ``--events``. Snapshots are taken every ``--snapshot-interval``
events (default 200). The build time and the version actually recorded are
printed, with the size of the oldest live archive (it must stay bounded).

Part 2 (``--mode reads``): cold reads of long UNCOMMITTED sessions (``--sizes``,
default 10,000 and 100,000 messages of ``content(i)``, written 20 per call),
each also written to openai-agents' ``SQLiteSession`` under the same key.
Each round times, in a rotated order, on a new object per read (built outside
the timer, so only the read is timed; the OS page cache stays warm):

* ``get_items`` (the baseline): ``SQLiteSession(key, file).get_items()``, all items.
* ``raw``: a new sqlite3 connection, ``SELECT state`` of the session's rows in
  version order and ``json.loads`` of each (the same rows the ledger reads).
* ``context()``: ``SessionLedger(url).context(p, key)`` (default token budget).
* ``items()``: ``SessionLedger(url).items(p, key)``, every live item.

It prints medians and min-max, each ledger read over ``get_items`` and over
``raw``, the ratio to ``get_items`` as the ratio of medians and as the median
(min-max) of the per-round ratios, and the growth from the smallest size to
the largest next to the raw read's. Targets: cold ``context()`` <= 1.0x
``get_items`` at every size, and growth no worse than raw's.

Run::

    python benchmarks/bench_load.py                         # both parts (slow builds)
    python benchmarks/bench_load.py --mode reads --rounds 7  # cold reads only
    python benchmarks/bench_load.py --events 5000 --loads 5   # quick, CI-sized
    python benchmarks/bench_load.py --keep /tmp/bench-load    # reuse the built database
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common import console, provenance
from rich.table import Table

from chatledger import Principal, SessionLedger, SessionView

PRINCIPAL = Principal(account_id="acme", user_id="u", agent_id="a")
SHORT_KEY = "short-session"
LONG_KEY = "long-session"
DB_NAME = "bench_load.db"
META_NAME = "bench_load.json"
TARGET_RATIO = 2.0


_SUBJECTS = ("the deployment plan", "the Paris office", "invoice INV-2291", "the Acme API")
_VERBS = ("Please review", "Can you summarise", "Let us revisit", "Remind me about")


def content(i: int) -> str:
    """A ~110-character message of two sentences, varied by ``i``."""
    subject = _SUBJECTS[i % len(_SUBJECTS)]
    verb = _VERBS[(i // 4) % len(_VERBS)]
    return f"{verb} {subject} (item {i}). Keep the answer short and mention owners and dates."


@dataclass(frozen=True)
class BuildParams:
    """Everything that shapes the built database (a kept one is reused only if equal)."""

    events: int
    short_events: int
    batch: int
    commit_every: int
    merge_threshold: int
    snapshot_interval: int


@dataclass
class BuildStats:
    """What building one session did."""

    version: int = 0
    messages: int = 0
    commits: int = 0
    merges: int = 0
    seconds: float = 0.0


def build_session(
    ledger: SessionLedger, key: str, target: int, params: BuildParams, *, progress: bool
) -> BuildStats:
    """Grow session ``key`` to exactly ``target`` events; see the module docstring."""
    stats = BuildStats()
    start = time.perf_counter()
    live = 0  # uncommitted messages
    archives = 0  # live archives
    next_report = target // 10
    while stats.version < target:
        # The first call also records Started (version 1).
        room = target - stats.version - (1 if stats.version == 0 else 0)
        size = min(params.batch, room)
        batch = [
            {"role": "user" if (stats.messages + j) % 2 == 0 else "assistant",
             "content": content(stats.messages + j)}
            for j in range(size)
        ]  # fmt: skip
        added = ledger.add_messages(PRINCIPAL, key, batch)
        stats.version = added[-1].version
        stats.messages += size
        live += size
        if stats.version < target and live >= params.commit_every:
            result = ledger.commit(PRINCIPAL, key)
            if result.status != "completed":
                raise RuntimeError(f"commit failed while building: {result}")
            stats.version += 1
            stats.commits += 1
            live = 0
            archives += 1
        if stats.version < target and archives > params.merge_threshold:
            merged = ledger.merge_archives(PRINCIPAL, key, threshold=params.merge_threshold)
            if not merged.merged:
                raise RuntimeError(f"merge failed while building: {merged}")
            stats.version += 1
            stats.merges += 1
            archives -= len(merged.source_archive_ids) - 1
        if progress and next_report and stats.version >= next_report:
            elapsed = time.perf_counter() - start
            console.print(f"    {key}: {stats.version:,} events, {elapsed:,.1f} s", highlight=False)
            next_report += target // 10
    stats.seconds = time.perf_counter() - start
    return stats


def db_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob(DB_NAME + "*"))


def build(directory: Path, params: BuildParams, synchronous: str) -> dict[str, BuildStats]:
    """Build both sessions into ``directory``; returns their build stats."""
    for stale in directory.glob(DB_NAME + "*"):
        stale.unlink()
    url = f"sqlite:///{directory / DB_NAME}"
    stats: dict[str, BuildStats] = {}
    with SessionLedger(
        url,
        sqlite_synchronous=synchronous,
        snapshot_interval=params.snapshot_interval,
    ) as ledger:
        stats[SHORT_KEY] = build_session(
            ledger, SHORT_KEY, params.short_events, params, progress=False
        )
        stats[LONG_KEY] = build_session(ledger, LONG_KEY, params.events, params, progress=True)
    meta = {"params": asdict(params), "stats": {k: asdict(v) for k, v in stats.items()}}
    (directory / META_NAME).write_text(json.dumps(meta, indent=2))
    return stats


def kept_stats(directory: Path, params: BuildParams) -> dict[str, BuildStats] | None:
    """Stats of a database built earlier with the same parameters, if there is one."""
    meta_path = directory / META_NAME
    if not meta_path.exists() or not (directory / DB_NAME).exists():
        return None
    meta = json.loads(meta_path.read_text())
    if meta.get("params") != asdict(params):
        return None
    return {key: BuildStats(**value) for key, value in meta["stats"].items()}


def load_once(url: str, key: str, snapshot_interval: int) -> tuple[float, SessionView]:
    """Open a new ledger, time ``session()`` alone, close it."""
    ledger = SessionLedger(url, snapshot_interval=snapshot_interval, create_tables=False)
    try:
        gc.collect()
        start = time.perf_counter()
        view = ledger.session(PRINCIPAL, key)
        elapsed = time.perf_counter() - start
    finally:
        ledger.close()
    return elapsed, view


def snapshot_info(directory: Path, view: SessionView) -> tuple[int, int, int]:
    """(version, bytes) of the session's latest snapshot, and the largest event's bytes."""
    connection = sqlite3.connect(directory / DB_NAME)
    try:
        oid = view.session_id.hex
        row = connection.execute(
            "SELECT originator_version, length(state) FROM chatledger_snapshots "
            "WHERE originator_id = ? ORDER BY originator_version DESC LIMIT 1",
            (oid,),
        ).fetchone()
        largest = connection.execute(
            "SELECT max(length(state)) FROM chatledger_events WHERE originator_id = ?", (oid,)
        ).fetchone()
    finally:
        connection.close()
    version, size = (int(row[0]), int(row[1])) if row else (0, 0)
    return version, size, int(largest[0] or 0)


def spread(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q3 - q1


# ------------------------------------------------------------------ cold reads
READ_KEY = "conv-3f9c2a1e-8b7d-4c6e-9a5f-1d2e3c4b5a69"
GET_ITEMS = "get_items"
RAW = "raw"
CONTEXT = "context()"
ITEMS = "items()"


def build_reads(directory: Path, sizes: list[int]) -> None:
    """One ledger file and one SQLiteSession file per size, holding the same messages."""
    from agents.memory import SQLiteSession

    for size in sizes:
        ledger_path, agents_path = directory / f"reads-{size}.db", directory / f"agents-{size}.db"
        for stale in [
            *directory.glob(ledger_path.name + "*"),
            *directory.glob(agents_path.name + "*"),
        ]:
            stale.unlink()
        msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": content(i)}
                for i in range(size)]  # fmt: skip
        start = time.perf_counter()
        with SessionLedger(f"sqlite:///{ledger_path}", sqlite_synchronous="normal") as ledger:
            for first in range(0, size, 20):
                ledger.add_messages(PRINCIPAL, READ_KEY, msgs[first : first + 20])

        asyncio.run(write_agents(SQLiteSession(READ_KEY, agents_path), msgs))
        console.print(
            f"  built {size:,} messages in both stores in {time.perf_counter() - start:,.1f} s",
            highlight=False,
        )


async def write_agents(session: Any, msgs: list[dict[str, str]]) -> None:
    try:
        for first in range(0, len(msgs), 20):
            await session.add_items(msgs[first : first + 20])
    finally:
        session.close()


def read_once(directory: Path, size: int, contender: str) -> float:
    """One cold read; only the read itself is timed."""
    from agents.memory import SQLiteSession

    path = directory / f"reads-{size}.db"
    gc.collect()
    if contender == GET_ITEMS:
        session = SQLiteSession(READ_KEY, directory / f"agents-{size}.db")
        try:
            start = time.perf_counter()
            found = len(asyncio.run(session.get_items()))
            elapsed = time.perf_counter() - start
        finally:
            session.close()
    elif contender == RAW:
        connection = sqlite3.connect(path)
        try:
            (sid,) = connection.execute(
                "SELECT originator_id FROM chatledger_events WHERE originator_version = 1"
            ).fetchone()
            start = time.perf_counter()
            rows = connection.execute(
                "SELECT state FROM chatledger_events WHERE originator_id = ? "
                "ORDER BY originator_version",
                (sid,),
            ).fetchall()
            found = len([json.loads(state) for (state,) in rows]) - 1  # less Started
            elapsed = time.perf_counter() - start
        finally:
            connection.close()
    else:
        ledger = SessionLedger(f"sqlite:///{path}", create_tables=False)
        try:
            start = time.perf_counter()
            if contender == CONTEXT:
                found = len(ledger.context(PRINCIPAL, READ_KEY).messages)
            else:
                found = len(ledger.items(PRINCIPAL, READ_KEY))
            elapsed = time.perf_counter() - start
        finally:
            ledger.close()
    if contender != CONTEXT and found != size:
        raise RuntimeError(f"{contender} read {found} items of {size}")
    return elapsed


def run_reads(directory: Path, sizes: list[int], rounds: int, *, reuse: bool) -> bool:
    if not (reuse and all((directory / f"reads-{n}.db").exists() for n in sizes)):
        console.print(f"building the cold-read sessions in {directory} ...", highlight=False)
        build_reads(directory, sizes)
    contenders = [GET_ITEMS, RAW, CONTEXT, ITEMS]
    times = {(size, c): [] for size in sizes for c in contenders}  # type: dict[tuple[int, str], list[float]]
    for size in sizes:
        for c in contenders:
            read_once(directory, size, c)  # warm-up
    for r in range(rounds):
        for size in sizes:
            shift = r % len(contenders)
            for c in contenders[shift:] + contenders[:shift]:
                times[size, c].append(read_once(directory, size, c))
    table = Table(title=f"cold reads of an uncommitted session, {rounds} rounds")
    for column in ("messages", "read", "median ms", "min-max ms", "x get_items", "x raw"):
        table.add_column(column, justify="right" if column != "read" else "left")
    med = {k: statistics.median(v) for k, v in times.items()}
    for size in sizes:
        for c in contenders:
            values = times[size, c]
            table.add_row(
                f"{size:,}", c, f"{med[size, c] * 1e3:,.1f}",
                f"{min(values) * 1e3:,.1f}-{max(values) * 1e3:,.1f}",
                f"{med[size, c] / med[size, GET_ITEMS]:.2f}x",
                f"{med[size, c] / med[size, RAW]:.2f}x",
            )  # fmt: skip
    console.print(table)
    met = True
    largest, smallest = max(sizes), min(sizes)
    for c in (CONTEXT, ITEMS):
        for size in sizes:
            ratio = med[size, c] / med[size, GET_ITEMS]
            per_round = [a / b for a, b in zip(times[size, c], times[size, GET_ITEMS], strict=True)]
            line = (
                f"  {c} at {size:,}: {ratio:.2f}x get_items (medians; per round "
                f"{statistics.median(per_round):.2f}x, {min(per_round):.2f}-{max(per_round):.2f})"
            )
            if size == largest and len(sizes) > 1:
                growth = med[largest, c] / med[smallest, c]
                raw_growth = med[largest, RAW] / med[smallest, RAW]
                line += f"; growth {smallest:,}->{largest:,}: {growth:.1f}x (raw {raw_growth:.1f}x)"
                if c == CONTEXT:
                    met = met and growth <= raw_growth
            if c == CONTEXT:
                met = met and ratio <= 1.0
            console.print(line, highlight=False)
    console.print(
        f"  target: {CONTEXT} <= 1.0x get_items at every size, growth <= raw: "
        f"{'MET' if met else 'NOT MET'}",
        highlight=False,
    )
    return met


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=100_000, help="events of the long session")
    parser.add_argument("--short-events", type=int, default=100, help="events of the short one")
    parser.add_argument("--loads", type=int, default=7, help="timed cold loads of each (7)")
    parser.add_argument("--batch", type=int, default=20, help="messages per add_messages (20)")
    parser.add_argument("--commit-every", type=int, default=20, help="commit at this many live")
    parser.add_argument("--merge-threshold", type=int, default=8, help="merge above this many")
    parser.add_argument("--snapshot-interval", type=int, default=200)
    parser.add_argument(
        "--build-synchronous",
        choices=["full", "normal"],
        default="normal",
        help="SQLite synchronous level while building (loads do not depend on it)",
    )
    parser.add_argument("--keep", type=Path, help="build into/reuse this directory")
    parser.add_argument("--check", action="store_true", help="exit 1 if the target is missed")
    parser.add_argument("--mode", choices=["load", "reads", "both"], default="both")
    parser.add_argument("--sizes", default="10000,100000", help="cold-read session sizes")
    parser.add_argument("--rounds", type=int, default=7, help="cold-read rounds (7)")
    args = parser.parse_args(argv)
    if min(args.events, args.short_events) < 2 or args.loads < 1 or args.batch < 1:
        parser.error("--events/--short-events must be >= 2, --loads and --batch >= 1")
    params = BuildParams(
        events=args.events,
        short_events=args.short_events,
        batch=args.batch,
        commit_every=args.commit_every,
        merge_threshold=args.merge_threshold,
        snapshot_interval=args.snapshot_interval,
    )
    console.print(
        f"{provenance()}, python {sys.version.split()[0]}, "
        f"sqlite {sqlite3.sqlite_version}; {params}",
        highlight=False,
    )
    if args.keep is not None:
        directory: Path = args.keep
        directory.mkdir(parents=True, exist_ok=True)
    else:
        directory = Path(tempfile.mkdtemp(prefix="bench-load-"))
    try:
        met = True
        if args.mode in ("load", "both"):
            met = run(directory, params, args) == 0
        if args.mode in ("reads", "both"):
            sizes = sorted({int(n) for n in args.sizes.split(",")})
            met = run_reads(directory, sizes, args.rounds, reuse=args.keep is not None) and met
        return 0 if met or not args.check else 1
    finally:
        if args.keep is None:
            shutil.rmtree(directory, ignore_errors=True)


def run(directory: Path, params: BuildParams, args: argparse.Namespace) -> int:
    stats = kept_stats(directory, params) if args.keep is not None else None
    if stats is not None:
        console.print(f"reusing the database in {directory} (built earlier)", highlight=False)
    else:
        console.print(f"building in {directory} (synchronous={args.build_synchronous}) ...")
        stats = build(directory, params, args.build_synchronous)
    for key, s in stats.items():
        rate = s.version / s.seconds if s.seconds else 0.0
        console.print(
            f"  built {key}: version {s.version:,} ({s.messages:,} messages, {s.commits:,} "
            f"commits, {s.merges:,} merges) in {s.seconds:,.1f} s ({rate:,.0f} events/s)",
            highlight=False,
        )
    console.print(
        f"  build total {sum(s.seconds for s in stats.values()):,.1f} s; database "
        f"{db_bytes(directory) / 1e6:,.1f} MB",
        highlight=False,
    )

    url = f"sqlite:///{directory / DB_NAME}"
    keys = [SHORT_KEY, LONG_KEY]
    views = {key: load_once(url, key, params.snapshot_interval)[1] for key in keys}  # warm-up
    times: dict[str, list[float]] = {key: [] for key in keys}
    for r in range(args.loads):
        for key in keys if r % 2 == 0 else reversed(keys):
            elapsed, views[key] = load_once(url, key, params.snapshot_interval)
            times[key].append(elapsed)

    table = Table(title=f"cold session() load, median of {args.loads}")
    for column in ("session", "version", "median ms", "IQR ms", "snapshot @v", "snapshot KB"):
        table.add_column(column, justify="right" if column != "session" else "left")
    table.add_column("replayed", justify="right")
    table.add_column("largest event KB", justify="right")
    for key in keys:
        view = views[key]
        snap_version, snap_bytes, largest = snapshot_info(directory, view)
        table.add_row(
            key,
            f"{view.version:,}",
            f"{statistics.median(times[key]) * 1e3:,.2f}",
            f"{spread(times[key]) * 1e3:,.2f}",
            f"{snap_version:,}",
            f"{snap_bytes / 1e3:,.1f}",
            f"{view.version - snap_version:,}",
            f"{largest / 1e3:,.1f}",
        )
    console.print(table)
    long_view = views[LONG_KEY]
    if long_view.archives:
        oldest = long_view.archives[0]
        console.print(
            f"  long session state: {len(long_view.buffer)} live messages, "
            f"{long_view.archive_count} live archives; the oldest lists "
            f"{len(oldest.message_ids):,} message ids (metadata message_count: "
            f"{oldest.metadata.get('message_count', 'n/a')}) and has a "
            f"{len(oldest.overview):,}-character overview",
            highlight=False,
        )
    if views[LONG_KEY].version - snapshot_info(directory, views[LONG_KEY])[0] == 0:
        console.print(
            "  note: the long session sits exactly on a snapshot (nothing replayed); other "
            f"lengths replay a tail of up to about {params.snapshot_interval} events, e.g. "
            f"--events {params.events + params.snapshot_interval - 1}",
            highlight=False,
        )
    paired = statistics.median(
        a / b for a, b in zip(times[LONG_KEY], times[SHORT_KEY], strict=True)
    )
    ratio = statistics.median(times[LONG_KEY]) / statistics.median(times[SHORT_KEY])
    met = ratio <= TARGET_RATIO
    console.print(
        f"  ratio long/short = {ratio:.2f}x (paired per round: {paired:.2f}x); "
        f"target <= {TARGET_RATIO}: {'MET' if met else 'NOT MET'}",
        highlight=False,
    )
    return 0 if met or not args.check else 1


if __name__ == "__main__":
    raise SystemExit(main())
