"""``AsyncSessionLedger``: the same API for asyncio code, blocking I/O off the loop.

Every method is *bound* from ``SessionLedger``, not copied: ``_off_loop``
turns a sync method into a coroutine function with the same name, signature
and docstring that runs it in a worker thread (``asyncio.to_thread``), so a
keyword added to the sync face is on the async face at once (a test checks
the two surfaces and every signature are equal). Per-session locks inside the
ledger keep one session's writes ordered while other sessions proceed in
parallel. ``export`` is the one method written out: it is an async generator.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from chatledger.domain.values import Principal
from chatledger.ledger import SessionLedger

P = ParamSpec("P")
R = TypeVar("R")

SYNC_ONLY = frozenset({"close", "read_models"})
"""Public names of ``SessionLedger`` the async face does not bind (``close`` is a coroutine
here, ``read_models`` is the sync read-model object itself: use ``ledger.read_models``)."""


def _off_loop(
    method: Callable[Concatenate[SessionLedger, P], R],
) -> Callable[Concatenate[AsyncSessionLedger, P], Coroutine[Any, Any, R]]:
    """``method`` of the sync ledger as a coroutine function run in a worker thread."""

    @functools.wraps(method)
    async def call(self: AsyncSessionLedger, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, self.ledger, *args, **kwargs)

    return call


class AsyncSessionLedger:
    """Async façade over a ``SessionLedger`` (pass one, or the same arguments)."""

    def __init__(self, ledger: SessionLedger | None = None, /, **kwargs: Any) -> None:
        self.ledger = ledger if ledger is not None else SessionLedger(**kwargs)

    # writes
    add_message = _off_loop(SessionLedger.add_message)
    add_messages = _off_loop(SessionLedger.add_messages)
    commit = _off_loop(SessionLedger.commit)
    commit_snapshot = _off_loop(SessionLedger.commit_snapshot)
    merge_archives = _off_loop(SessionLedger.merge_archives)
    get_or_create = _off_loop(SessionLedger.get_or_create)
    close_session = _off_loop(SessionLedger.close_session)
    evict = _off_loop(SessionLedger.evict)
    delete_session = _off_loop(SessionLedger.delete_session)
    fork = _off_loop(SessionLedger.fork)
    import_ = _off_loop(SessionLedger.import_)
    # agent-framework items and state
    add_items = _off_loop(SessionLedger.add_items)
    remove_items = _off_loop(SessionLedger.remove_items)
    pop_item = _off_loop(SessionLedger.pop_item)
    clear_buffer = _off_loop(SessionLedger.clear_buffer)
    replace_tail = _off_loop(SessionLedger.replace_tail)
    update_state = _off_loop(SessionLedger.update_state)
    items = _off_loop(SessionLedger.items)
    state = _off_loop(SessionLedger.state)
    shared_state = _off_loop(SessionLedger.shared_state)
    # the agent's working state
    set_task = _off_loop(SessionLedger.set_task)
    advance_extraction = _off_loop(SessionLedger.advance_extraction)
    prepare_compaction = _off_loop(SessionLedger.prepare_compaction)
    complete_compaction = _off_loop(SessionLedger.complete_compaction)
    import_usage = _off_loop(SessionLedger.import_usage)
    # erasure
    erase = _off_loop(SessionLedger.erase)
    erase_user = _off_loop(SessionLedger.erase_user)
    erase_tenant = _off_loop(SessionLedger.erase_tenant)
    pseudonym = _off_loop(SessionLedger.pseudonym)
    # reads and time travel
    session = _off_loop(SessionLedger.session)
    context = _off_loop(SessionLedger.context)
    history = _off_loop(SessionLedger.history)
    diff = _off_loop(SessionLedger.diff)
    archive_body = _off_loop(SessionLedger.archive_body)
    verify = _off_loop(SessionLedger.verify)
    task = _off_loop(SessionLedger.task)
    # read models
    working_set = _off_loop(SessionLedger.working_set)
    archives = _off_loop(SessionLedger.archives)
    audit = _off_loop(SessionLedger.audit)
    usage = _off_loop(SessionLedger.usage)
    evict_idle = _off_loop(SessionLedger.evict_idle)
    wait_for_projections = _off_loop(SessionLedger.wait_for_projections)

    async def export(self, principal: Principal, key: str | None = None) -> AsyncIterator[str]:
        """The export's lines, read in a worker thread as they are consumed."""
        lines = self.ledger.export(principal, key)
        while (line := await asyncio.to_thread(next, lines, None)) is not None:
            yield line

    async def close(self) -> None:
        """Finish running commits, then release the database (in a worker thread)."""
        await asyncio.to_thread(self.ledger.close)

    async def __aenter__(self) -> AsyncSessionLedger:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
