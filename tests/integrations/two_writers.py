"""One writer process of ``tests/test_integration_writers.py``: a framework's own store API.

``python two_writers.py FRAMEWORK PREFIX COUNT URL KEY [URL KEY ...]``: on
each database ``URL``, opens the framework's chatledger class and does what
it must before the race (ADK: load the session, so that the first append is
from a stale read if the other writer wins); prints ``READY``, waits for
``go`` on stdin, then on each database in turn writes ``COUNT`` entries named
``PREFIX <n>`` to the one session ``KEY``, and prints a JSON line of what it
saw per database (how many of the framework's conflict errors, for ADK). One
process serves every database so that the framework is imported once.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any

from chatledger import Principal, SessionLedger

PRINCIPAL = Principal(account_id="race", user_id="writers", agent_id="two-writers")


class Gate:
    """Where a writer waits, its reads done, for the release."""

    def __init__(self) -> None:
        self.prepared = asyncio.Event()
        self.go = asyncio.Event()

    async def wait(self) -> None:
        self.prepared.set()
        await self.go.wait()


async def openai_agents(
    ledger: SessionLedger, key: str, prefix: str, count: int, gate: Gate
) -> Any:
    from chatledger.integrations.openai_agents import ChatLedgerSession

    session = ChatLedgerSession(key, ledger, PRINCIPAL)
    await gate.wait()
    for n in range(count):
        await session.add_items([{"role": "user", "content": f"{prefix} {n}"}])
    return {}


async def adk(ledger: SessionLedger, key: str, prefix: str, count: int, gate: Gate) -> Any:
    from google.adk.errors import StaleSessionError
    from google.adk.events import Event
    from google.genai import types

    from chatledger.integrations.adk import ChatLedgerSessionService

    service = ChatLedgerSessionService(ledger, PRINCIPAL)
    session = await service.get_session(app_name="race", user_id="u", session_id=key)
    assert session is not None
    await gate.wait()
    stale = 0
    for n in range(count):
        event = Event(
            invocation_id=prefix, author="user",
            content=types.Content(role="user", parts=[types.Part(text=f"{prefix} {n}")]),
        )  # fmt: skip
        while True:
            try:
                await service.append_event(session, event)
                break
            except StaleSessionError:  # another writer appended first: reload, try again
                stale += 1
                session = await service.get_session(app_name="race", user_id="u", session_id=key)
                assert session is not None
    return {"stale": stale}


async def ag2(ledger: SessionLedger, key: str, prefix: str, count: int, gate: Gate) -> Any:
    from ag2.events import HumanMessage
    from ag2.stream import MemoryStream

    from chatledger.integrations.ag2 import LedgerStorage

    storage = LedgerStorage(ledger, principal=PRINCIPAL)
    stream = MemoryStream(storage, id=uuid.UUID(hex=key))

    class Context:
        def __init__(self) -> None:
            self.stream = stream

    await gate.wait()
    for n in range(count):
        await storage.save_event(HumanMessage(f"{prefix} {n}"), Context())  # type: ignore[arg-type]
    return {}


async def langgraph(ledger: SessionLedger, key: str, prefix: str, count: int, gate: Gate) -> Any:
    from langgraph.checkpoint.base import empty_checkpoint

    from chatledger.integrations.langgraph import LedgerSaver

    saver = LedgerSaver(ledger, principal=PRINCIPAL)
    root = saver.get_tuple({"configurable": {"thread_id": key}})
    assert root is not None
    await gate.wait()
    parent = root.config
    for n in range(count):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"x": f"{prefix} {n}"}
        # Both writers pick the same channel versions: each must still read its own values.
        checkpoint["channel_versions"] = {"x": n + 2}
        metadata: Any = {"source": "loop", "step": n, "writer": prefix}
        parent = await saver.aput(parent, checkpoint, metadata, {"x": n + 2})
        await saver.aput_writes(parent, [("x", f"{prefix} write {n}")], task_id=prefix)
    return {}


WRITERS = {"openai-agents": openai_agents, "adk": adk, "ag2": ag2, "langgraph": langgraph}


async def race(framework: str, prefix: str, count: int, targets: list[tuple[str, str]]) -> Any:
    """Every database's writer prepared, then released one after the other on ``go``."""
    ledgers = [SessionLedger(url) for url, _ in targets]
    gates = [Gate() for _ in targets]
    try:
        writers = [
            asyncio.create_task(WRITERS[framework](ledger, key, prefix, count, gate))
            for ledger, (_, key), gate in zip(ledgers, targets, gates, strict=True)
        ]
        for gate in gates:
            await gate.prepared.wait()
        print("READY", flush=True)
        if await asyncio.to_thread(sys.stdin.readline) != "go\n":
            sys.exit(3)
        results = []
        for writer, gate in zip(writers, gates, strict=True):
            gate.go.set()
            results.append(await writer)
        return results
    finally:
        for ledger in ledgers:
            ledger.close()


def main() -> None:
    framework, prefix, count, *rest = sys.argv[1:]
    targets = list(zip(rest[::2], rest[1::2], strict=True))
    print(json.dumps(asyncio.run(race(framework, prefix, int(count), targets))), flush=True)


if __name__ == "__main__":
    main()
