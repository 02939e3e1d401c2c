"""Resident memory of idle registered sessions (default 100,000) vs the bare process.

What it measures: one process opens a ``SessionLedger`` (a SQLite file in a
temp dir by default, or ``--url``) and an empty ``SessionRegistry``, collects
garbage and reads its RSS: that is the baseline (interpreter, chatledger,
SQLAlchemy, the open ledger). It then registers ``--sessions`` sessions with
``registry.create(cwd=..., meta=...)`` -- honestly, through the ledger: each
records its ``Started`` event, and the ledger keeps its usual bounded cache --
``--concurrency`` creates at a time, collects garbage, and reads RSS again.
It prints both, the difference, bytes per session, the ratio after/baseline,
and whether 100k sessions fit the 500 MB target (scaled linearly when
``--sessions`` is not 100k). RSS comes from /proc/self/statm (Linux).

Run::

    python benchmarks/bench_registry_memory.py                    # 100k sessions (~1-2 min)
    python benchmarks/bench_registry_memory.py --sessions 10000   # quick
    python benchmarks/bench_registry_memory.py --synchronous full # durable SQLite writes
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from chatledger import Principal, SessionLedger
from chatledger.registry import LiveSession, SessionRegistry

TARGET_BYTES = 500 * 1024 * 1024
MB = 1024 * 1024


def rss_bytes() -> int:
    """The current resident set size of this process."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):  # not Linux: peak RSS is the best we have
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


async def register(registry: SessionRegistry, count: int, concurrency: int) -> list[LiveSession]:
    sessions: list[LiveSession] = []
    meta = {"client": "bench", "protocol": 1}
    done = 0
    while done < count:
        size = min(concurrency, count - done)
        batch = await asyncio.gather(
            *(
                registry.create(cwd="/srv/agent", additional_directories=["/srv/lib"], meta=meta)
                for _ in range(size)
            )
        )
        sessions.extend(batch)
        done += size
    return sessions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--url", default=None, help="ledger URL (default: a temp SQLite file)")
    parser.add_argument("--synchronous", choices=["normal", "full"], default="normal")
    args = parser.parse_args(argv)

    workdir = tempfile.mkdtemp(prefix="bench-registry-")
    url = args.url or "sqlite:///" + os.path.join(workdir, "ledger.db")
    ledger = SessionLedger(url, sqlite_synchronous=args.synchronous)
    registry = SessionRegistry(ledger, Principal(account_id="bench", agent_id="server"))

    async def scenario() -> tuple[int, int, float, list[LiveSession]]:
        await registry.create()  # warm every code path once (thread pool, ledger, pydantic)
        await registry.aclose()
        gc.collect()
        baseline = rss_bytes()
        started = time.perf_counter()
        sessions = await register(registry, args.sessions, args.concurrency)
        elapsed = time.perf_counter() - started
        gc.collect()
        return baseline, rss_bytes(), elapsed, sessions

    baseline, after, elapsed, sessions = asyncio.run(scenario())
    assert len(registry) == args.sessions and all(s.is_idle for s in sessions)
    ledger.close()

    difference = after - baseline
    per_session = difference / args.sessions
    per_100k = per_session * 100_000
    print(f"ledger: {url.split('://')[0]} (synchronous={args.synchronous})")
    print(f"registered {args.sessions:,} idle sessions in {elapsed:.1f}s", end=" ")
    print(f"({elapsed / args.sessions * 1e3:.2f} ms each, each recording Started)")
    print(f"baseline RSS (bare process + open ledger): {baseline / MB:8.1f} MB")
    print(f"RSS with the sessions registered:          {after / MB:8.1f} MB")
    print(f"difference:                                {difference / MB:8.1f} MB")
    print(f"per session:                               {per_session:8.0f} bytes")
    print(f"ratio after / baseline:                    {after / baseline:8.2f}x")
    print(f"LiveSession object alone (sys.getsizeof):  {sys.getsizeof(sessions[0]):8d} bytes")
    total_100k = baseline + per_100k
    verdict = "fits" if total_100k < TARGET_BYTES else "does NOT fit"
    print(
        f"100k idle sessions: +{per_100k / MB:.1f} MB over baseline, "
        f"{total_100k / MB:.1f} MB total RSS -> {verdict} the 500 MB target"
    )
    return 0 if total_100k < TARGET_BYTES else 1


if __name__ == "__main__":
    raise SystemExit(main())
