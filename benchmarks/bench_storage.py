"""Bytes per stored message: the ledger vs openai-agents' ``SQLiteSession``, same messages.

What it measures: the size on disk (database file plus its WAL, after a
checkpoint) of one session holding ``--messages`` messages, written the way
an agent writes them (``--batch`` messages per call, default 20), in fresh
SQLite files. Contenders, every round, in a rotated order:

* ``SQLiteSession`` (the baseline): openai-agents' own store, ``add_items``;
  a text message is the item ``{"role": ..., "content": ...}``.
* ``ledger``: ``SessionLedger.add_messages`` (text) or ``add_items`` (items),
  never committing.
* ``ledger, commit every N`` (``--commit-every``, default 200): the same, with a
  ``commit`` (the default summarizer) whenever N messages are live -- what
  snapshots and archives add (the table shows both: the snapshot table with its
  index, and the payloads of the commit events).

Two kinds of message (``--kind``): ``text``, the ~95-character chat lines of
``bench_load.py``, and ``items``, the five OpenAI Agents item shapes of
``bench_items.py`` (a user message with content parts, a function call, its
output, a reasoning item, an assistant message).
Both stores get the same session key (``--key``; default a UUID string, the
usual conversation id -- SQLiteSession stores the key in every row and in
its index, the ledger in a session's first row). Sizes hardly vary between rounds (only
random ids differ); the table still gives the median and min-max of each.

Targets: ledger <= 1.5x SQLiteSession bytes per message, with and without
commits; commit-every-N <= 1.5x never committing.

Run::

    python benchmarks/bench_storage.py                          # 100k text + 100k items, 1 round
    python benchmarks/bench_storage.py --messages 10000 --rounds 3
    python benchmarks/bench_storage.py --kind items --key s      # a one-character key
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_items import item
from bench_load import content
from common import console, provenance
from rich.table import Table

from chatledger import Principal, SessionLedger

PRINCIPAL = Principal(account_id="acme", user_id="u", agent_id="a")
DEFAULT_KEY = "conv-3f9c2a1e-8b7d-4c6e-9a5f-1d2e3c4b5a69"
TARGET = 1.5
AGENTS = "SQLiteSession"
LEDGER = "ledger"
Writer = Callable[[Path, list[dict[str, Any]]], None]


def messages(kind: str, n: int) -> list[dict[str, Any]]:
    if kind == "items":
        return [item(i) for i in range(n)]
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": content(i)} for i in range(n)
    ]


def file_bytes(path: Path) -> int:
    """The database's size with its WAL folded in (checkpointed, truncated)."""
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


def _sum(path: Path, query: str) -> int:
    """The one number ``query`` sums in the ledger file (0 if SQLite cannot run it)."""
    connection = sqlite3.connect(path)
    try:
        row = connection.execute(query).fetchone()
    except sqlite3.Error:
        return 0
    finally:
        connection.close()
    return int(row[0])


def snapshot_bytes(path: Path) -> int:
    """Bytes of the ledger's snapshot table and its index (0 without SQLite's dbstat)."""
    return _sum(path, (
        "SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name IN "
        "('chatledger_snapshots', 'sqlite_autoindex_chatledger_snapshots_1')"
    ))  # fmt: skip


def commit_bytes(path: Path) -> int:
    """Payload bytes of the ledger's ``Committed`` and ``ArchiveMerged`` events (0 if none)."""
    return _sum(path, (
        "SELECT COALESCE(SUM(LENGTH(state)), 0) FROM chatledger_events "
        "WHERE topic IN ('Committed', 'ArchiveMerged')"
    ))  # fmt: skip


def write_agents(key: str, batch: int) -> Writer:
    from agents.memory import SQLiteSession

    def write(path: Path, msgs: list[dict[str, Any]]) -> None:
        async def run() -> None:
            session = SQLiteSession(key, path)
            try:
                for start in range(0, len(msgs), batch):
                    await session.add_items(msgs[start : start + batch])  # type: ignore[arg-type]
            finally:
                session.close()

        asyncio.run(run())

    return write


def write_ledger(key: str, batch: int, kind: str, commit_every: int) -> Writer:
    def write(path: Path, msgs: list[dict[str, Any]]) -> None:
        with SessionLedger(f"sqlite:///{path}", sqlite_synchronous="normal") as ledger:
            live = 0
            for start in range(0, len(msgs), batch):
                chunk = msgs[start : start + batch]
                if kind == "items":
                    ledger.add_items(PRINCIPAL, key, chunk)
                else:
                    ledger.add_messages(PRINCIPAL, key, chunk)
                live += len(chunk)
                if commit_every and live >= commit_every:
                    result = ledger.commit(PRINCIPAL, key)
                    if result.status != "completed":
                        raise RuntimeError(f"commit failed: {result}")
                    live = 0

    return write


def spread(values: list[float]) -> str:
    return f"{min(values):,.1f}-{max(values):,.1f}"


def run_kind(kind: str, args: argparse.Namespace, directory: Path) -> bool:
    msgs = messages(kind, args.messages)
    committing = f"{LEDGER}, commit every {args.commit_every}"
    writers: dict[str, Writer] = {
        AGENTS: write_agents(args.key, args.batch),
        LEDGER: write_ledger(args.key, args.batch, kind, 0),
        committing: write_ledger(args.key, args.batch, kind, args.commit_every),
    }
    per_message: dict[str, list[float]] = {name: [] for name in writers}
    snapshots: dict[str, list[int]] = {name: [] for name in writers}
    commits: dict[str, list[int]] = {name: [] for name in writers}
    seconds: dict[str, list[float]] = {name: [] for name in writers}
    names = list(writers)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            path = directory / f"{kind}-{r}-{len(per_message[name])}-{names.index(name)}.db"
            start = time.perf_counter()
            writers[name](path, msgs)
            seconds[name].append(time.perf_counter() - start)
            per_message[name].append(file_bytes(path) / len(msgs))
            snapshots[name].append(snapshot_bytes(path) if name != AGENTS else 0)
            commits[name].append(commit_bytes(path) if name != AGENTS else 0)
            for stale in directory.glob(path.name + "*"):
                stale.unlink()
    base = statistics.median(per_message[AGENTS])
    table = Table(title=f"{kind}: {args.messages:,} messages, key of {len(args.key)} characters")
    for column in ("store", "bytes/message (median)", "min-max", "snapshots MB",
                   "commit events MB", "x SQLiteSession", "write s"):  # fmt: skip
        table.add_column(column, justify="left" if column == "store" else "right")
    for name in names:
        median = statistics.median(per_message[name])
        table.add_row(
            name,
            f"{median:,.1f}",
            spread(per_message[name]),
            f"{statistics.median(snapshots[name]) / 1e6:,.2f}",
            f"{statistics.median(commits[name]) / 1e6:,.2f}",
            f"{median / base:.2f}x",
            f"{statistics.median(seconds[name]):,.1f}",
        )
    console.print(table)
    plain = statistics.median(per_message[LEDGER])
    committed = statistics.median(per_message[committing])
    ratios = {
        "ledger vs SQLiteSession": plain / base,
        f"{committing} vs SQLiteSession": committed / base,
        f"{committing} vs never committing": committed / plain,
    }
    met = True
    for label, ratio in ratios.items():
        ok = ratio <= TARGET
        met = met and ok
        console.print(
            f"  {label}: {ratio:.2f}x (target <= {TARGET}x): {'MET' if ok else 'NOT MET'}",
            highlight=False,
        )
    return met


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--kind", choices=["text", "items", "both"], default="both")
    parser.add_argument("--batch", type=int, default=20, help="messages per call (20)")
    parser.add_argument("--commit-every", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--key", default=DEFAULT_KEY, help="the session key of both stores")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    if args.messages < 1 or args.rounds < 1 or args.batch < 1 or args.commit_every < 1:
        parser.error("--messages, --rounds, --batch and --commit-every must be >= 1")
    try:
        import agents.memory  # noqa: F401
    except ImportError:
        parser.error("needs openai-agents (pip install -e '.[bench]')")
    console.print(
        f"{provenance()}, python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}",
        highlight=False,
    )
    directory = Path(tempfile.mkdtemp(prefix="bench-storage-"))
    try:
        kinds = ["text", "items"] if args.kind == "both" else [args.kind]
        met = all([run_kind(kind, args, directory) for kind in kinds])
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return 0 if met or not args.check else 1


if __name__ == "__main__":
    raise SystemExit(main())
