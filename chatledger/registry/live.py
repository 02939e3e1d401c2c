"""``LiveSession``: one registered session -- its turn lock and queue, and its ledger writes.

The registry that holds it is its ``Host``: the session tells it when it
becomes busy or idle or is used (for the LRU order and the TTL), and writes
through the host's ledger as the host's principal. The host reads and moves
the session's state through the bookkeeping methods below, never its fields.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Literal, Protocol, TypeVar

from chatledger.async_ledger import AsyncSessionLedger
from chatledger.domain.failures import UnknownSession
from chatledger.domain.values import ClientContext, EvictionReason, Message, Principal, ToolCall
from chatledger.registry.bounds import (
    LiveState,
    RegistryConfig,
    Retention,
    SessionBusyError,
    unknown,
)
from chatledger.results import AddedMessage, CommitResult, ContextView, LedgerEvent, SessionView

T = TypeVar("T")
_TurnKind = Literal["turn", "recovery", "handoff"]


class Host(Protocol):
    """What a live session needs of the registry that holds it."""

    config: RegistryConfig
    ledger: AsyncSessionLedger
    principal: Principal

    def session_touched(self, live: LiveSession) -> None: ...

    def session_busy(self, live: LiveSession) -> None: ...

    def session_idle(self, live: LiveSession) -> None: ...


class LiveSession:
    """One registered session: its turn lock and queue, and helpers that write to the ledger.

    ``turn_task`` is the task running the current turn: set on entry, reassign
    it if the turn's work runs in another task; ``cancel()`` cancels it.

    Small on purpose (``__slots__``, no task of its own, the waiter queue and
    wake-up futures are created only when needed) so that an idle session
    costs a few hundred bytes.
    """

    __slots__ = (
        "_drained",
        "_epoch",
        "_held",
        "_host",
        "_idle_since",
        "_owner",
        "_released",
        "_state",
        "_waiters",
        "_writes",
        "context",
        "session_id",
        "stream_id",
        "turn_task",
    )

    def __init__(
        self, host: Host, stream_id: uuid.UUID, context: ClientContext, now: float
    ) -> None:
        self._host = host
        self.stream_id = stream_id
        self.session_id = stream_id.hex
        self.context = context
        self.turn_task: asyncio.Task[Any] | None = None
        self._held: _TurnKind | None = None
        self._owner: asyncio.Task[Any] | None = None
        self._waiters: deque[tuple[asyncio.Future[None], int]] | None = None
        self._epoch = 0
        self._idle_since = now
        self._writes = 0
        self._released: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._state = LiveState.LIVE

    def __repr__(self) -> str:
        state = "busy" if self._held else "idle"
        return f"<LiveSession {self.session_id} {state} queued={self.queued}>"

    # ------------------------------------------------------------- context
    @property
    def cwd(self) -> str:
        return self.context.cwd

    @property
    def additional_directories(self) -> tuple[str, ...]:
        return self.context.additional_directories

    @property
    def meta(self) -> dict[str, Any]:
        return self.context.meta

    # --------------------------------------------------------------- state
    @property
    def queued(self) -> int:
        """Turns waiting behind the running one (the running turn is not counted)."""
        return len(self._waiters) if self._waiters else 0

    @property
    def is_idle(self) -> bool:
        """No turn or recovery running (hence none queued) and no ledger write in flight."""
        return self._held is None and self._writes == 0

    @property
    def in_recovery(self) -> bool:
        return self._held == "recovery"

    @property
    def is_live(self) -> bool:
        """Still registered (not evicted, expired, closed or forgotten)."""
        return self._state == LiveState.LIVE

    # ------------------------------------------ the registry's bookkeeping
    @property
    def state(self) -> LiveState:
        return self._state

    def move_to(self, state: LiveState) -> None:
        """Set where the session is in its life (the registry decides)."""
        self._state = state

    @property
    def idle_since(self) -> float:
        """When the last turn ended (the registry's monotonic clock)."""
        return self._idle_since

    def mark_idle(self, now: float) -> None:
        self._idle_since = now

    @property
    def holds_turn(self) -> bool:
        """A turn or recovery is running (or being handed over)."""
        return self._held is not None

    def runs_in_current_task(self) -> bool:
        """Whether the calling task is this session's running turn."""
        return self._held is not None and asyncio.current_task() is self._owner

    # --------------------------------------------------------------- turns
    @asynccontextmanager
    async def turn(self) -> AsyncIterator[LiveSession]:
        """Run one turn: waits for the running one, or raises ``SessionBusyError`` if the
        queue is full, or ``CancelledError`` if ``cancel()`` drops it while it waits."""
        await self._acquire("turn")
        try:
            yield self
        finally:
            self._release()

    @asynccontextmanager
    async def recovery(self) -> AsyncIterator[LiveSession]:
        """Hold the turn lock without a prompt (a replay or repair); the session counts as busy."""
        await self._acquire("recovery")
        try:
            yield self
        finally:
            self._release()

    async def cancel(self) -> None:
        """Cancel the running turn task and drop every queued turn; wait for the running one
        to unwind (unless called from inside it). Events already recorded stay."""
        self._epoch += 1
        waiters, self._waiters = self._waiters, None
        for future, _ in waiters or ():
            future.cancel()
        if self._held is None:
            return
        task = self.turn_task
        if task is not None and not task.done():
            task.cancel()
        current = asyncio.current_task()
        if current is not None and current in (task, self._owner):
            return  # waiting for ourselves would never end
        if self._held is not None:
            if self._released is None:
                self._released = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._released)

    async def _acquire(self, kind: _TurnKind) -> None:
        self._require_live()
        if self._held is None:
            self._take(kind)
            return
        limit = self._host.config.max_queued
        if limit is not None and self.queued >= limit:
            raise SessionBusyError(
                f"Session {self.session_id} already has a turn running and {self.queued} "
                f"queued (max_queued={limit}); retry when it finishes."
            )
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = deque()
        entry = (future, self._epoch)
        self._waiters.append(entry)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release()  # the lock was handed to us as we were cancelled: pass it on
            elif self._waiters is not None:
                with suppress(ValueError):
                    self._waiters.remove(entry)
            raise
        if entry[1] != self._epoch:
            self._release()  # woken, but cancel() dropped every queued turn meanwhile
            raise asyncio.CancelledError()
        if self._state != LiveState.LIVE:
            self._release()
            raise unknown(self.session_id)
        self._take(kind)

    def _take(self, kind: _TurnKind) -> None:
        was_idle = self._held is None
        self._held = kind
        self._owner = self.turn_task = asyncio.current_task()
        if was_idle:
            self._host.session_busy(self)
        self._host.session_touched(self)

    def _release(self) -> None:
        self._owner = self.turn_task = None
        released, self._released = self._released, None
        if released is not None and not released.done():
            released.set_result(None)
        waiters = self._waiters
        while waiters:
            future, _ = waiters.popleft()
            if not future.done():
                self._held = "handoff"  # the waiter takes over when it resumes
                future.set_result(None)
                return
        self._waiters = None
        self._held = None
        self._host.session_idle(self)

    def _require_live(self) -> None:
        if self._state != LiveState.LIVE:
            raise unknown(self.session_id)

    # ------------------------------------------------------- ledger helpers
    async def _write(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run a ledger write; if the caller is cancelled, still let the write land before
        the turn unwinds, so nothing from this session can be recorded after a close."""
        if self._state != LiveState.LIVE:
            current = asyncio.current_task()
            if (
                self._state == LiveState.GONE
                or current is None
                or current
                not in (
                    self._owner,
                    self.turn_task,
                )
            ):
                raise unknown(self.session_id)
        self._writes += 1

        async def run() -> T:
            return await call()

        task = asyncio.ensure_future(run())
        task.add_done_callback(self._write_done)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            while not task.done():
                try:
                    await asyncio.wait({task})
                except asyncio.CancelledError:
                    continue
            raise

    def _write_done(self, task: asyncio.Future[Any]) -> None:
        if not task.cancelled():
            task.exception()  # seen by the awaiting caller, unless it was cancelled
        self._writes -= 1
        if self._writes == 0:
            drained, self._drained = self._drained, None
            if drained is not None and not drained.done():
                drained.set_result(None)
            if self._held is None and self._state == LiveState.LIVE:
                self._host.session_touched(self)

    async def cancel_and_drain(self) -> None:
        await self.cancel()
        while self._writes:
            if self._drained is None:
                self._drained = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._drained)

    async def record_exit(
        self, how: Retention, reason: EvictionReason | None = None, idle: float = 0.0
    ) -> None:
        """Record how the session leaves its registry: ``delete``/``erase`` -- ``Deleted``
        (``erase``: its content surely destroyed; deleted already: fine); ``keep`` --
        ``Evicted`` for an eviction (``reason``), ``Closed`` for a close."""
        host = self._host
        if how != "keep":
            with suppress(UnknownSession):
                await host.ledger.delete_session(
                    host.principal, self.session_id, erase=how == "erase"
                )
        elif reason is None:
            await host.ledger.close_session(host.principal, self.session_id)
        else:
            await host.ledger.evict(
                host.principal, self.session_id, reason=reason, idle_seconds=max(0.0, idle)
            )

    async def add_message(
        self,
        role: str,
        content: str,
        *,
        name: str | None = None,
        tool_call: ToolCall | Mapping[str, Any] | None = None,
        message_id: str | None = None,
    ) -> AddedMessage:
        """Record one message in this session's ledger stream."""
        host = self._host
        return await self._write(
            lambda: host.ledger.add_message(
                host.principal,
                self.session_id,
                role,
                content,
                name=name,
                tool_call=tool_call,
                message_id=message_id,
            )
        )

    async def add_messages(
        self, messages: Sequence[Mapping[str, Any] | Message]
    ) -> list[AddedMessage]:
        """Record several messages in one transaction: all of them, or none."""
        host = self._host
        return await self._write(
            lambda: host.ledger.add_messages(host.principal, self.session_id, messages)
        )

    async def commit(self) -> CommitResult:
        """Fold the live buffer into a new archive (waits for the summary)."""
        host = self._host
        return await self._write(lambda: host.ledger.commit(host.principal, self.session_id))

    async def history(self) -> list[LedgerEvent]:
        """Every recorded event of this session, oldest first."""
        return await self._host.ledger.history(self._host.principal, self.session_id)

    async def view(self) -> SessionView:
        """The session as the ledger holds it now."""
        return await self._host.ledger.session(self._host.principal, self.session_id)

    async def prompt_context(self, token_budget: int = 128_000) -> ContextView:
        """The prompt context: latest archive summary plus the newest live messages that fit."""
        return await self._host.ledger.context(self._host.principal, self.session_id, token_budget)
