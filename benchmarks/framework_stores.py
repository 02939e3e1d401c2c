"""Each integration against the framework's own store: append and load, same run.

``bench_items.py`` prints the table. Per framework, two contenders on fresh
SQLite files at ``synchronous=FULL`` (the level the frameworks' own SQLite
stores run at: SQLite's default), each driven through the framework's own
store API:

* OpenAI Agents SDK: ``ChatLedgerSession`` vs ``SQLiteSession`` (``add_items`` of
  one item; load = ``get_items()``).
* Google ADK: ``ChatLedgerSessionService`` vs ``SqliteSessionService``
  (``append_event``; load = ``get_session``).
* AG2: ``LedgerStorage`` vs ``MemoryStorage`` (``save_event``; load =
  ``get_history``). AG2's only other store is Redis; ``MemoryStorage`` is a
  Python list, not durable -- the row says what a durable store costs.
* LangGraph: ``LedgerSaver`` vs ``SqliteSaver`` (a ``put`` and a ``put_writes``
  per step; load = ``get_tuple`` of the newest checkpoint).

Append = ``n`` writes, one per call, in a session that already exists;
load = ``loads`` reads of the whole session after them, by the same store
object, after one untimed read (the steady state of a server: LedgerSaver
then reads only the events recorded since its last read).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chatledger import Principal, SessionLedger

PRINCIPAL = Principal(account_id="acme", user_id="u", agent_id="a")
Timing = tuple[float, float]  # (seconds for the appends, seconds for the loads)
Runner = Callable[[Path, int, int], Timing]


def _ledger(directory: Path) -> SessionLedger:
    return SessionLedger(f"sqlite:///{directory / 'ledger.db'}", sqlite_synchronous="full")


def _timed(append: Callable[[int], Any], load: Callable[[], Any], n: int, loads: int) -> Timing:
    start = time.perf_counter()
    for i in range(1, n + 1):
        append(i)
    appended = time.perf_counter() - start
    load()  # untimed: the first read after the appends
    start = time.perf_counter()
    for _ in range(loads):
        load()
    return appended, time.perf_counter() - start


# ------------------------------------------------------------------ OpenAI Agents SDK
def _agents_item(i: int) -> dict[str, Any]:
    return {"role": "user", "content": f"Turn {i}: where is order {i}? It was due Monday."}


def agents_pair() -> tuple[Runner, Runner]:
    from agents import SQLiteSession

    from chatledger.integrations.openai_agents import ChatLedgerSession

    def drive(session: Any, n: int, loads: int) -> Timing:
        async def go() -> Timing:
            await session.add_items([_agents_item(0)])
            start = time.perf_counter()
            for i in range(1, n + 1):
                await session.add_items([_agents_item(i)])
            appended = time.perf_counter() - start
            await session.get_items()  # untimed: the first read after the appends
            start = time.perf_counter()
            for _ in range(loads):
                assert len(await session.get_items()) == n + 1
            return appended, time.perf_counter() - start

        return asyncio.run(go())

    def ours(directory: Path, n: int, loads: int) -> Timing:
        with _ledger(directory) as ledger:
            return drive(ChatLedgerSession("bench", ledger, PRINCIPAL), n, loads)

    def theirs(directory: Path, n: int, loads: int) -> Timing:
        session = SQLiteSession("bench", db_path=str(directory / "agents.db"))
        try:
            return drive(session, n, loads)
        finally:
            session.close()

    return ours, theirs


# ------------------------------------------------------------------------- Google ADK
def adk_pair() -> tuple[Runner, Runner]:
    from google.adk.events import Event
    from google.adk.sessions.sqlite_session_service import SqliteSessionService
    from google.genai import types

    from chatledger.integrations.adk import ChatLedgerSessionService

    def event(i: int) -> Event:
        text = f"Turn {i}: where is order {i}? It was due Monday."
        return Event(
            invocation_id=f"inv-{i}", author="user", timestamp=1_000_000.0 + i,
            content=types.Content(role="user", parts=[types.Part(text=text)]),
        )  # fmt: skip

    def drive(service: Any, n: int, loads: int) -> Timing:
        async def go() -> Timing:
            session = await service.create_session(app_name="bench", user_id="u", session_id="s")
            start = time.perf_counter()
            for i in range(1, n + 1):
                await service.append_event(session, event(i))
            appended = time.perf_counter() - start
            await service.get_session(app_name="bench", user_id="u", session_id="s")  # untimed
            start = time.perf_counter()
            for _ in range(loads):
                found = await service.get_session(app_name="bench", user_id="u", session_id="s")
                assert len(found.events) == n
            return appended, time.perf_counter() - start

        return asyncio.run(go())

    def ours(directory: Path, n: int, loads: int) -> Timing:
        with _ledger(directory) as ledger:
            return drive(ChatLedgerSessionService(ledger, PRINCIPAL), n, loads)

    def theirs(directory: Path, n: int, loads: int) -> Timing:
        return drive(SqliteSessionService(str(directory / "adk.db")), n, loads)

    return ours, theirs


# -------------------------------------------------------------------------------- AG2
def ag2_pair() -> tuple[Runner, Runner]:
    from ag2.events import ModelRequest, TextInput
    from ag2.history import MemoryStorage
    from ag2.stream import MemoryStream

    from chatledger.integrations.ag2 import LedgerStorage

    def drive(storage: Any, n: int, loads: int) -> Timing:
        stream = MemoryStream(storage, id=uuid.uuid4())

        class Context:
            def __init__(self) -> None:
                self.stream = stream

        context = Context()

        async def go() -> Timing:
            request = ModelRequest([TextInput("Turn 0")])
            await storage.save_event(request, context)
            start = time.perf_counter()
            for i in range(1, n + 1):
                text = f"Turn {i}: where is order {i}? It was due Monday."
                await storage.save_event(ModelRequest([TextInput(text)]), context)
            appended = time.perf_counter() - start
            await storage.get_history(stream.id)  # untimed: the first read after the appends
            start = time.perf_counter()
            for _ in range(loads):
                assert len(list(await storage.get_history(stream.id))) == n + 1
            return appended, time.perf_counter() - start

        return asyncio.run(go())

    def ours(directory: Path, n: int, loads: int) -> Timing:
        with _ledger(directory) as ledger:
            return drive(LedgerStorage(ledger, principal=PRINCIPAL), n, loads)

    def theirs(directory: Path, n: int, loads: int) -> Timing:
        return drive(MemoryStorage(), n, loads)

    return ours, theirs


# -------------------------------------------------------------------------- LangGraph
def langgraph_pair() -> tuple[Runner, Runner]:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.sqlite import SqliteSaver

    from chatledger.integrations.langgraph import LedgerSaver

    def drive(saver: Any, n: int, loads: int) -> Timing:
        config: Any = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}
        versions: dict[str, Any] = {}

        def step(i: int) -> None:
            nonlocal config
            checkpoint = empty_checkpoint()
            version = saver.get_next_version(versions.get("said"), None)
            versions["said"] = version
            checkpoint["channel_values"] = {"said": f"Turn {i}: order {i} shipped Monday."}
            checkpoint["channel_versions"] = dict(versions)
            config = saver.put(config, checkpoint, {"source": "loop", "step": i}, {"said": version})
            saver.put_writes(config, [("said", f"reply {i}")], task_id=f"task-{i}")

        step(0)
        latest: Any = {"configurable": {"thread_id": "bench"}}
        return _timed(step, lambda: saver.get_tuple(latest), n, loads)

    def ours(directory: Path, n: int, loads: int) -> Timing:
        with _ledger(directory) as ledger:
            return drive(LedgerSaver(ledger, principal=PRINCIPAL), n, loads)

    def theirs(directory: Path, n: int, loads: int) -> Timing:
        conn = sqlite3.connect(directory / "langgraph.db", check_same_thread=False)
        try:
            return drive(SqliteSaver(conn), n, loads)
        finally:
            conn.close()

    return ours, theirs


PAIRS: dict[str, tuple[str, str, Callable[[], tuple[Runner, Runner]]]] = {
    "OpenAI Agents SDK": ("ChatLedgerSession", "SQLiteSession", agents_pair),
    "Google ADK": ("ChatLedgerSessionService", "SqliteSessionService", adk_pair),
    "AG2": ("LedgerStorage", "MemoryStorage (in memory)", ag2_pair),
    "LangGraph": ("LedgerSaver", "SqliteSaver", langgraph_pair),
}
