"""``SessionRegistry``: the bounded set of live agent sessions an asyncio server holds.

A live session runs at most one turn at a time, queues a bounded number more,
can be cancelled, and is let go when it has been idle too long (``ttl``) or
when the cap (``max_sessions``) needs room -- but never while it is running a
turn or a recovery. Its history then goes as in AG2's ACP ``SessionStore``:
dropped (``Deleted``) on close, eviction, expiry and shutdown; kept on all but
a close with ``retain_history=True`` (``Evicted``; ``get_or_adopt`` brings it
back). See ``RegistryConfig``.

Identity: a session id is a uuid4 hex string; it is the session *key* in the
ledger (under the registry principal's tenant), and ``stream_id`` is
``UUID(session_id)``. The ledger's own aggregate id stays uuid5(tenant, key).

Everything here runs on one event loop and takes no registry-wide lock: the
bookkeeping between two awaits is synchronous, and ledger I/O runs in worker
threads through ``AsyncSessionLedger`` under the ledger's per-session locks.
Time for the TTL comes from an injected monotonic clock. Nothing here touches
the database directly or changes the ledger's identity scheme.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from chatledger.async_ledger import AsyncSessionLedger
from chatledger.domain.failures import InvalidInput, InvalidSettings
from chatledger.domain.values import ClientContext, EvictionReason, Principal
from chatledger.ledger import SessionLedger
from chatledger.registry.bounds import (
    LiveState,
    RegistryConfig,
    Retention,
    SessionBusyError,
    SessionLimitError,
    UnknownSessionError,
    check_erasable,
    checked_collaborators,
    client_context,
    normalise_id,
    registry_config,
    unknown,
    warn_if_history_dies_with_the_process,
)
from chatledger.registry.live import LiveSession

__all__ = [
    "LiveSession",
    "RegistryConfig",
    "SessionBusyError",
    "SessionLimitError",
    "SessionRegistry",
    "UnknownSessionError",
]

T = TypeVar("T")
logger = logging.getLogger("chatledger.registry")
MonotonicClock = Callable[[], float]


class SessionRegistry:
    """The live sessions of one principal (tenant), bounded by ``RegistryConfig``."""

    def __init__(
        self,
        ledger: SessionLedger | AsyncSessionLedger,
        principal: Principal,
        max_sessions: int | None = None,
        ttl: float | None = None,
        max_queued: int | None = None,
        clock: MonotonicClock = time.monotonic,
        *,
        retain_history: bool | None = None,
        on_close: Retention = "delete",
        on_evict: Retention | None = None,
    ) -> None:
        config = registry_config(
            max_sessions=max_sessions, ttl=ttl, max_queued=max_queued,
            retain_history=retain_history, on_close=on_close, on_evict=on_evict,
        )  # fmt: skip
        self._setup(config, ledger, principal, clock)

    @classmethod
    def from_config(
        cls,
        config: RegistryConfig,
        ledger: SessionLedger | AsyncSessionLedger,
        principal: Principal,
        *,
        clock: MonotonicClock = time.monotonic,
    ) -> SessionRegistry:
        if not isinstance(config, RegistryConfig):
            raise InvalidSettings("config must be a RegistryConfig.")
        registry = cls.__new__(cls)
        registry._setup(config, ledger, principal, clock)
        return registry

    def _setup(
        self,
        config: RegistryConfig,
        ledger: SessionLedger | AsyncSessionLedger,
        principal: Principal,
        clock: MonotonicClock,
    ) -> None:
        self.config = config
        self.ledger = checked_collaborators(ledger, principal, clock)
        check_erasable(config, self.ledger.ledger)
        warn_if_history_dies_with_the_process(config, self.ledger.ledger.settings.url)
        self.principal = principal
        self._clock = clock
        # Registered sessions, least recently used first.
        self._sessions: OrderedDict[str, LiveSession] = OrderedDict()
        # Idle registered sessions by the time their last turn ended, oldest first
        # (only kept with a ttl): the expiry sweep stops at the first unexpired one.
        self._idle: OrderedDict[str, None] = OrderedDict()
        # Sessions on their way out; each still holds its slot until its event is recorded.
        self._leaving: dict[str, asyncio.Task[None]] = {}
        self._adopting: dict[str, asyncio.Task[tuple[LiveSession, bool]]] = {}
        self._reserved = 0  # slots promised to admissions still writing to the ledger
        self._change: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------ the API
    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: object) -> bool:
        sid = normalise_id(session_id)
        return sid is not None and sid in self._sessions

    async def __aenter__(self) -> SessionRegistry:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def create(
        self,
        *,
        cwd: str = "",
        additional_directories: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
    ) -> LiveSession:
        """Start a new session (recording ``Started`` with this context) and register it."""
        context = client_context(cwd, additional_directories, meta)
        stream_id = uuid.uuid4()
        await self._admit()
        try:
            view, _ = await self.ledger.get_or_create(
                self.principal, stream_id.hex, context=context
            )
            return self._register(stream_id, view.context)
        finally:
            self._unreserve()

    async def get(self, session_id: str | uuid.UUID) -> LiveSession:
        """The live session (refreshing its recency); ``UnknownSessionError`` if not live."""
        await self.sweep()
        sid = normalise_id(session_id)
        live = self._sessions.get(sid) if sid is not None else None
        if live is None:
            raise unknown(session_id)
        self.session_touched(live)
        return live

    async def get_or_adopt(
        self,
        session_id: str | uuid.UUID,
        *,
        cwd: str = "",
        additional_directories: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
    ) -> tuple[LiveSession, bool]:
        """The live session under that id, or register the one the ledger holds under it
        (starting it with this context if there is none). Returns whether this call adopted."""
        sid = normalise_id(session_id)
        if sid is None:
            raise InvalidInput(f"Session id {session_id!r} is not a UUID (hex or hyphenated).")
        context = client_context(cwd, additional_directories, meta)
        await self.sweep()
        while True:
            live = self._sessions.get(sid)
            if live is not None:
                self.session_touched(live)
                return live, False
            pending = self._adopting.get(sid) or self._leaving.get(sid)
            if pending is None:
                break
            await asyncio.wait({pending})  # let it settle, then look again
        task = self._spawn(self._adopt(uuid.UUID(hex=sid), context))
        self._adopting[sid] = task
        return await asyncio.shield(task)

    async def forget(self, session_id: str | uuid.UUID) -> None:
        """Unregister the session, recording nothing; running or queued work is cancelled
        first. An unknown id is not an error."""
        await self.sweep()
        sid = normalise_id(session_id)
        live = self._sessions.get(sid) if sid is not None else None
        if live is None:
            return
        self._check_not_inside(live, "forget")
        if live.is_idle:
            self._unregister(live)
            live.move_to(LiveState.GONE)
            return
        await self._leave(live, None)

    async def close(self, session_id: str | uuid.UUID) -> None:
        """Cancel the session's live work, wait for it to unwind, then record ``Deleted``
        (``on_close``; ``keep``: ``Closed``) and unregister it, so no late write of the
        session can land after the close. A close drops even with ``retain_history``."""
        await self.sweep()
        sid = normalise_id(session_id)
        live = self._sessions.get(sid) if sid is not None else None
        if live is None:
            raise unknown(session_id)
        self._check_not_inside(live, "close")
        await self._leave(live, "close")

    async def aclose(self) -> None:
        """Let every session go: cancel live work, wait for it to unwind, unregister all,
        and drop their history as an eviction does (``on_evict``; ``keep``: record nothing).
        The registry is empty and usable afterwards (a failed deletion is raised at the end)."""
        failure: BaseException | None = None
        while self._sessions or self._leaving or self._adopting:
            pending = list(self._leaving.values()) + list(self._adopting.values())
            busy, gone = [], []
            for live in list(self._sessions.values()):
                self._unregister(live)
                gone.append(live)
                if live.is_idle:
                    live.move_to(LiveState.GONE)
                else:
                    live.move_to(LiveState.LEAVING)
                    busy.append(live)
            await asyncio.gather(*(live.cancel_and_drain() for live in busy))
            for live in busy:
                live.move_to(LiveState.GONE)
            if self.config.on_evict != "keep" and gone:
                dropped = (live.record_exit(self.config.on_evict) for live in gone)
                results = await asyncio.gather(*dropped, return_exceptions=True)
                failure = failure or next((r for r in results if isinstance(r, Exception)), None)
            if pending:
                await asyncio.wait(pending)
        if failure is not None:
            raise failure

    async def sweep(self) -> int:
        """Evict every idle session whose idle time reached the ttl; return how many.

        Every create/get/get_or_adopt/forget/close runs it first."""
        ttl = self.config.ttl
        if ttl is None or not self._idle:
            return 0
        now = self._clock()
        victims: list[tuple[LiveSession, float]] = []
        for sid in self._idle:
            live = self._sessions[sid]
            idle = now - live.idle_since
            if idle < ttl:
                break
            if live.is_idle:
                victims.append((live, idle))
        if not victims:
            return 0
        await self._evict(victims, "idle")
        return len(victims)

    # ------------------------------------------------------------ admission
    def _occupied(self) -> int:
        return len(self._sessions) + len(self._leaving) + self._reserved

    async def _admit(self) -> None:
        """Reserve one slot, evicting the least recently used idle session if at the cap."""
        await self.sweep()
        cap = self.config.max_sessions
        while cap is not None and self._occupied() >= cap:
            victim = next((s for s in self._sessions.values() if s.is_idle), None)
            if victim is not None:
                await self._evict([(victim, self._clock() - victim.idle_since)], "lru")
            elif self._leaving or self._reserved:
                await self._next_change()  # slots in flight: look again once one settles
            else:
                raise SessionLimitError(
                    f"All {len(self._sessions)} live sessions are busy (max_sessions={cap}); "
                    "nothing was created. Retry when a turn finishes."
                )
        self._reserved += 1

    def _unreserve(self) -> None:
        self._reserved -= 1
        self._changed()

    def _changed(self) -> None:
        """Wake admissions waiting for an in-flight slot to settle."""
        change, self._change = self._change, None
        if change is not None and not change.done():
            change.set_result(None)

    async def _next_change(self) -> None:
        if self._change is None:
            self._change = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._change)

    async def _adopt(
        self, stream_id: uuid.UUID, context: ClientContext
    ) -> tuple[LiveSession, bool]:
        try:
            await self._admit()
            try:
                view, _ = await self.ledger.get_or_create(
                    self.principal, stream_id.hex, context=context
                )
                return self._register(stream_id, view.context), True
            finally:
                self._unreserve()
        finally:
            del self._adopting[stream_id.hex]

    def _register(self, stream_id: uuid.UUID, context: ClientContext) -> LiveSession:
        live = LiveSession(self, stream_id, context, self._clock())
        self._sessions[live.session_id] = live
        if self.config.ttl is not None:
            self._idle[live.session_id] = None
        return live

    def _unregister(self, live: LiveSession) -> None:
        self._sessions.pop(live.session_id, None)
        self._idle.pop(live.session_id, None)

    def _restore(self, live: LiveSession) -> None:
        """Put back a session whose exit could not be recorded: first in line to leave again."""
        live.move_to(LiveState.LIVE)
        self._sessions[live.session_id] = live
        self._sessions.move_to_end(live.session_id, last=False)
        if self.config.ttl is not None and not live.holds_turn:
            self._idle[live.session_id] = None
            self._idle.move_to_end(live.session_id, last=False)

    # ------------------------------------------------------------- leaving
    async def _evict(
        self, victims: list[tuple[LiveSession, float]], reason: EvictionReason
    ) -> None:
        """Unregister idle sessions now; record their ``Evicted`` events; the slots free as
        each lands. A failed record puts its session back and raises."""
        for live, _ in victims:
            self._unregister(live)
            live.move_to(LiveState.LEAVING)

        def leave(live: LiveSession, idle: float) -> Awaitable[object]:
            return live.record_exit(self.config.on_evict, reason, idle)

        async def record() -> None:
            results = await asyncio.gather(
                *(leave(live, float(idle)) for live, idle in victims), return_exceptions=True
            )
            failure: BaseException | None = None
            for (live, _), result in zip(victims, results, strict=True):
                del self._leaving[live.session_id]
                if isinstance(result, BaseException):
                    self._restore(live)
                    failure = failure or result
                else:
                    live.move_to(LiveState.GONE)
            self._changed()
            if failure is not None:
                raise failure

        logger.info(
            "%s %d idle sessions (%s): %s",
            "evicting" if self.config.on_evict == "keep" else "deleting", len(victims), reason,
            ", ".join(live.session_id for live, _ in victims),
        )  # fmt: skip
        task = self._spawn(record())
        for live, _ in victims:
            self._leaving[live.session_id] = task
        await asyncio.shield(task)

    async def _leave(self, live: LiveSession, record: Literal["close"] | None) -> None:
        """Unregister a session, cancel its work and wait for it; then record the close."""
        self._unregister(live)
        live.move_to(LiveState.LEAVING)

        async def unwind() -> None:
            try:
                await live.cancel_and_drain()
                if record == "close":
                    await live.record_exit(self.config.on_close)
            except BaseException:
                del self._leaving[live.session_id]
                self._restore(live)
                self._changed()
                raise
            del self._leaving[live.session_id]
            live.move_to(LiveState.GONE)
            self._changed()

        task = self._spawn(unwind())
        self._leaving[live.session_id] = task
        await asyncio.shield(task)

    def _check_not_inside(self, live: LiveSession, what: str) -> None:
        if live.runs_in_current_task():
            raise RuntimeError(
                f"{what}() called from inside session {live.session_id}'s own turn would wait "
                "for itself; call it from another task."
            )

    def _spawn(self, coroutine: Awaitable[T]) -> asyncio.Task[T]:
        """A task the registry keeps alive even if the caller awaiting it is cancelled."""

        async def run() -> T:
            return await coroutine

        task = asyncio.ensure_future(run())
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: whoever awaited it has seen it already

    # ------------------------------------------- told by its LiveSessions
    def session_touched(self, live: LiveSession) -> None:
        """A session was used: it moves to the young end of the LRU order."""
        if live.state == LiveState.LIVE and live.session_id in self._sessions:
            self._sessions.move_to_end(live.session_id)

    def session_busy(self, live: LiveSession) -> None:
        """A session started a turn: it cannot expire until it is idle again."""
        self._idle.pop(live.session_id, None)

    def session_idle(self, live: LiveSession) -> None:
        """A session's last turn ended: its TTL counts from now."""
        live.mark_idle(self._clock())
        if live.state == LiveState.LIVE and live.session_id in self._sessions:
            self._sessions.move_to_end(live.session_id)
            if self.config.ttl is not None:
                self._idle[live.session_id] = None
                self._idle.move_to_end(live.session_id)
