"""The asyncio façade: the same behaviour, with blocking I/O off the event loop."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from pathlib import Path

from chatledger import AsyncSessionLedger, SessionLedger
from chatledger.async_ledger import SYNC_ONLY
from support import ALICE


def test_async_ledger_mirrors_the_sync_api(make_ledger: Callable[..., SessionLedger]) -> None:
    """add_message, commit, session, context and history work through AsyncSessionLedger."""

    async def scenario() -> None:
        ledger = AsyncSessionLedger(make_ledger())
        await ledger.add_message(ALICE, "s1", "user", "hello")
        await ledger.add_messages(ALICE, "s1", [{"role": "assistant", "content": "hi"}])
        assert (await ledger.commit(ALICE, "s1")).archived
        await ledger.add_message(ALICE, "s1", "user", "again")
        view = await ledger.session(ALICE, "s1")
        assert [m.content for m in view.buffer] == ["again"]
        context = await ledger.context(ALICE, "s1", 1000)
        assert context.archive_id == view.archives[0].archive_id
        assert len(await ledger.history(ALICE, "s1")) == 5
        await ledger.close()

    asyncio.run(scenario())


def test_async_calls_do_not_block_the_event_loop(make_ledger: Callable[..., SessionLedger]) -> None:
    """While a write is blocked in the store, other coroutines keep running."""
    sync_ledger = make_ledger()
    release = threading.Event()
    original = sync_ledger.core.store.record

    def slow_record(session):  # type: ignore[no-untyped-def]
        assert release.wait(10)
        return original(session)

    sync_ledger.core.store.record = slow_record  # type: ignore[method-assign]

    async def scenario() -> None:
        ledger = AsyncSessionLedger(sync_ledger)
        write = asyncio.create_task(ledger.add_message(ALICE, "s1", "user", "slow"))
        ticks = 0
        while ticks < 5:
            await asyncio.sleep(0.01)
            ticks += 1
        assert not write.done()
        release.set()
        added = await write
        assert added.version == 2

    asyncio.run(scenario())


def test_async_inspection_methods(
    make_ledger: Callable[..., SessionLedger], tmp_path: Path
) -> None:
    """diff, fork, verify, export and import_ work through the async façade."""

    async def scenario() -> None:
        ledger = AsyncSessionLedger(make_ledger())
        await ledger.add_message(ALICE, "s1", "user", "one")
        await ledger.add_message(ALICE, "s1", "user", "two")
        assert len((await ledger.diff(ALICE, "s1", 1, 3)).messages_added) == 2
        assert len((await ledger.fork(ALICE, "s1", 2, "s1-b")).buffer) == 1
        assert (await ledger.verify(ALICE)).ok
        lines = [line async for line in ledger.export(ALICE)]
        assert len(lines) == 5
        copy = AsyncSessionLedger(SessionLedger(f"sqlite:///{tmp_path / 'copy.db'}"))
        assert (await copy.import_(lines)).events == 4
        await copy.close()

    asyncio.run(scenario())


def _public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and callable(member) and not isinstance(member, type)
    }


def test_the_async_face_has_every_sync_method_with_the_same_signature() -> None:
    """AsyncSessionLedger's public methods and their parameters equal SessionLedger's."""
    sync = _public_methods(SessionLedger)
    async_ = _public_methods(AsyncSessionLedger)
    assert set(sync) - SYNC_ONLY == set(async_) - {"close"}
    for name, signature in async_.items():
        if name in sync:
            assert list(signature.parameters.values()) == list(sync[name].parameters.values()), name
    assert all(
        inspect.iscoroutinefunction(getattr(AsyncSessionLedger, name))
        for name in async_
        if name != "export"
    )
    assert inspect.isasyncgenfunction(AsyncSessionLedger.export)
