"""Shared test helpers: principals of three tenants and a deterministic clock."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import threading
from collections.abc import Coroutine, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple, TypeVar
from urllib.parse import parse_qs, urlparse

from sqlalchemy import create_engine, inspect, text

from chatledger import ArchiveSummary, Message, Principal, Summary

ALICE = Principal(account_id="acme", user_id="alice", agent_id="support-bot", trace_id="t-1")
BOB = Principal(account_id="globex", user_id="bob", agent_id="helper")
ADMIN = Principal(
    account_id="ops", user_id="root", agent_id="console", role="admin", trace_id="adm"
)


T = TypeVar("T")
SCENARIO_TIMEOUT = 30.0  # seconds; an asyncio scenario still running then is a hang


def run_scenario(scenario: Coroutine[Any, Any, T]) -> T:
    """Run one asyncio scenario with a hard time limit."""

    async def bounded() -> T:
        async with asyncio.timeout(SCENARIO_TIMEOUT):
            return await scenario

    return asyncio.run(bounded())


class Ticker:
    """A fake monotonic clock that only moves when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FixedClock:
    """A deterministic clock: starts at a fixed moment, advances one second per call."""

    def __init__(self, start: datetime | None = None, step: timedelta = timedelta(seconds=1)):
        self.now = start or datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
        self.step = step
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            self.now += self.step
            return self.now


class FlakySummarizer:
    """Wraps the default summarizer; fails while ``failing`` is set (to rehearse faults)."""

    def __init__(self) -> None:
        from chatledger import ExtractiveSummarizer

        self.inner = ExtractiveSummarizer()
        self.failing = False
        self.calls = 0

    def summarize(self, messages: Sequence[Message]) -> Summary:
        self.calls += 1
        if self.failing:
            raise RuntimeError("summarizer exploded")
        return self.inner.summarize(messages)

    def merge(self, archives: Sequence[ArchiveSummary]) -> Summary:
        self.calls += 1
        if self.failing:
            raise RuntimeError("summarizer exploded")
        return self.inner.merge(archives)


class StoreState(NamedTuple):
    """What the event store holds, to compare before and after a refused call."""

    events: int
    snapshots: int
    heads: dict[str, int]  # session id -> last version
    digest: str  # every stored byte of both tables


def store_state(ledger: Any) -> StoreState:
    """The store of ``ledger`` right now, read through a connection of its own."""
    engine = create_engine(ledger.settings.url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as connection:
            tables = inspect(connection).get_table_names()
            dump: dict[str, list[tuple[Any, ...]]] = {}
            for table in ("chatledger_events", "chatledger_snapshots"):
                if table in tables:
                    rows = connection.execute(text(f"SELECT * FROM {table}")).all()
                    dump[table] = sorted((tuple(r) for r in rows), key=repr)
                else:
                    dump[table] = []
    finally:
        engine.dispose()
    heads: dict[str, int] = {}
    for row in dump["chatledger_events"]:
        session, version = str(row[1]), int(row[2])
        heads[session] = max(version, heads.get(session, 0))
    digest = hashlib.sha256(repr(dump).encode()).hexdigest()
    return StoreState(
        len(dump["chatledger_events"]), len(dump["chatledger_snapshots"]), heads, digest
    )


FIXTURES = Path(__file__).resolve().parent / "fixtures"


def restore_fixture(name: str, backend: str, database_url: str, tmp_path: Path) -> str:
    """A database exactly as an earlier version left it: the fixture ``<name>.sqlite``
    copied, or ``<name>.postgres.sql`` (a pg_dump of schema chatledger_fixture) loaded into
    the schema ``database_url`` points at. Returns the URL to open."""
    if backend == "sqlite":
        path = tmp_path / "old.sqlite"
        shutil.copyfile(FIXTURES / f"{name}.sqlite", path)
        return f"sqlite:///{path}"
    options = parse_qs(urlparse(database_url).query)["options"][0]
    schema = options.split("search_path=", 1)[1]
    lines = (FIXTURES / f"{name}.postgres.sql").read_text().splitlines()
    script = "\n".join(
        line.replace("chatledger_fixture.", f"{schema}.")
        for line in lines
        if not line.startswith("\\") and line.strip() != "CREATE SCHEMA chatledger_fixture;"
    )
    engine = create_engine(database_url)
    try:
        raw = engine.raw_connection()
        try:
            raw.cursor().execute(script)  # no parameters: one simple query, many statements
            raw.commit()
        finally:
            raw.close()
    finally:
        engine.dispose()
    return database_url
