"""Cold load time of a long session (default 100,000 events) vs a short one (100 events).

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

Run::

    python benchmarks/bench_load.py                         # 100k events (slow build)
    python benchmarks/bench_load.py --events 5000 --loads 5   # quick, CI-sized
    python benchmarks/bench_load.py --keep /tmp/bench-load    # reuse the built database
"""

from __future__ import annotations

import argparse
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
        return run(directory, params, args)
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
