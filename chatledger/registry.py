"""``SessionRegistry``: the bounded set of live agent sessions an asyncio server holds.

A live session runs at most one turn at a time, queues a bounded number more,
can be cancelled, and is let go when it has been idle too long (``ttl``) or
when the cap (``max_sessions``) needs room -- but never while it is running a
turn or a recovery. Letting a session go only frees memory: its history stays
in the ledger (every LRU or TTL eviction is recorded as an ``Evicted`` event),
and ``get_or_adopt`` brings it back by id.

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
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from chatledger.async_ledger import AsyncSessionLedger
from chatledger.domain.errors import ChatLedgerError, InvalidInput, InvalidSettings, UnknownSession
from chatledger.domain.values import ClientContext, EvictionReason, Message, Principal, ToolCall
from chatledger.ledger import SessionLedger
from chatledger.results import AddedMessage, CommitResult, ContextView, LedgerEvent, SessionView

T = TypeVar("T")

MonotonicClock = Callable[[], float]
_TurnKind = Literal["turn", "recovery", "handoff"]

# LiveSession states: registered; on its way out (being evicted, closed or
# forgotten: new turns and outside writes are refused); gone.
_LIVE, _LEAVING, _GONE = 0, 1, 2


class UnknownSessionError(UnknownSession):
    """No live session under that id here: never issued, evicted, expired, closed or forgotten."""


class SessionBusyError(ChatLedgerError):
    """The session's turn queue is full (``max_queued``); the turn did not start."""


class SessionLimitError(ChatLedgerError):
    """The registry is at ``max_sessions`` and every session is busy; nothing was admitted."""


class RegistryConfig(BaseModel):
    """Bounds of a ``SessionRegistry``; ``None`` means unbounded. Zero and negatives are invalid."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_sessions: Annotated[int, Field(ge=1, strict=True)] | None = None
    """Hard cap on registered sessions; admission evicts the least recently used idle one."""
    ttl: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    """Seconds a session may stay idle after its last turn ended before it expires."""
    max_queued: Annotated[int, Field(ge=1, strict=True)] | None = None
    """Turns that may wait behind the running one, per session."""


def _normalise_id(session_id: object) -> str | None:
    """The canonical hex form of a session id, or ``None`` if it is not a UUID."""
    if isinstance(session_id, uuid.UUID):
        return session_id.hex
    if not isinstance(session_id, str):
        return None
    try:
        return uuid.UUID(session_id).hex
    except ValueError:
        return None


def _unknown(session_id: object) -> UnknownSessionError:
    return UnknownSessionError(
        f"No live session {session_id!s} in this registry (never issued, evicted, expired, "
        "closed or forgotten); call get_or_adopt(session_id) to bring back one the ledger holds."
    )


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
        "_idle_since",
        "_owner",
        "_registry",
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
        self, registry: SessionRegistry, stream_id: uuid.UUID, context: ClientContext, now: float
    ) -> None:
        self._registry = registry
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
        self._state = _LIVE

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
        return self._state == _LIVE

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
        limit = self._registry.config.max_queued
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
        if self._state != _LIVE:
            self._release()
            raise _unknown(self.session_id)
        self._take(kind)

    def _take(self, kind: _TurnKind) -> None:
        was_idle = self._held is None
        self._held = kind
        self._owner = self.turn_task = asyncio.current_task()
        if was_idle:
            self._registry._became_busy(self)
        self._registry._touch(self)

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
        self._registry._became_idle(self)

    def _require_live(self) -> None:
        if self._state != _LIVE:
            raise _unknown(self.session_id)

    # ------------------------------------------------------- ledger helpers
    async def _write(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run a ledger write; if the caller is cancelled, still let the write land before
        the turn unwinds, so nothing from this session can be recorded after a close."""
        if self._state != _LIVE:
            current = asyncio.current_task()
            if (
                self._state == _GONE
                or current is None
                or current
                not in (
                    self._owner,
                    self.turn_task,
                )
            ):
                raise _unknown(self.session_id)
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
            if self._held is None and self._state == _LIVE:
                self._registry._touch(self)

    async def _cancel_and_drain(self) -> None:
        await self.cancel()
        while self._writes:
            if self._drained is None:
                self._drained = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._drained)

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
        registry = self._registry
        return await self._write(
            lambda: registry.ledger.add_message(
                registry.principal,
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
        registry = self._registry
        return await self._write(
            lambda: registry.ledger.add_messages(registry.principal, self.session_id, messages)
        )

    async def commit(self) -> CommitResult:
        """Fold the live buffer into a new archive (waits for the summary)."""
        registry = self._registry
        return await self._write(
            lambda: registry.ledger.commit(registry.principal, self.session_id)
        )

    async def history(self) -> list[LedgerEvent]:
        """Every recorded event of this session, oldest first."""
        return await self._registry.ledger.history(self._registry.principal, self.session_id)

    async def view(self) -> SessionView:
        """The session as the ledger holds it now."""
        return await self._registry.ledger.session(self._registry.principal, self.session_id)

    async def prompt_context(self, token_budget: int = 128_000) -> ContextView:
        """The prompt context: latest archive summary plus the newest live messages that fit."""
        return await self._registry.ledger.context(
            self._registry.principal, self.session_id, token_budget
        )


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
    ) -> None:
        try:
            config = RegistryConfig(max_sessions=max_sessions, ttl=ttl, max_queued=max_queued)
        except ValidationError as error:
            problems = "; ".join(f"{e['loc'][0]}: {e['msg']}" for e in error.errors())
            raise InvalidSettings(
                f"Invalid registry bounds ({problems}); use None for unbounded."
            ) from None
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
        if isinstance(ledger, SessionLedger):
            ledger = AsyncSessionLedger(ledger)
        if not isinstance(ledger, AsyncSessionLedger):
            raise InvalidSettings("ledger must be a SessionLedger or an AsyncSessionLedger.")
        if not isinstance(principal, Principal):
            raise InvalidSettings("principal must be a chatledger Principal.")
        if not callable(clock):
            raise InvalidSettings("clock must be a callable returning monotonic seconds.")
        self.config = config
        self.ledger = ledger
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
        sid = _normalise_id(session_id)
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
        context = _context(cwd, additional_directories, meta)
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
        sid = _normalise_id(session_id)
        live = self._sessions.get(sid) if sid is not None else None
        if live is None:
            raise _unknown(session_id)
        self._touch(live)
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
        sid = _normalise_id(session_id)
        if sid is None:
            raise InvalidInput(f"Session id {session_id!r} is not a UUID (hex or hyphenated).")
        context = _context(cwd, additional_directories, meta)
        await self.sweep()
        while True:
            live = self._sessions.get(sid)
            if live is not None:
                self._touch(live)
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
        sid = _normalise_id(session_id)
        live = self._sessions.get(sid) if sid is not None else None
        if live is None:
            return
        self._check_not_inside(live, "forget")
        if live.is_idle:
            self._unregister(live)
            live._state = _GONE
            return
        await self._leave(live, None)

    async def close(self, session_id: str | uuid.UUID) -> None:
        """Cancel the session's live work, wait for it to unwind, then record ``Closed``
        and unregister it (so no late write of the session can land after the close)."""
        await self.sweep()
        sid = _normalise_id(session_id)
        live = self._sessions.get(sid) if sid is not None else None
        if live is None:
            raise _unknown(session_id)
        self._check_not_inside(live, "close")
        await self._leave(live, "close")

    async def aclose(self) -> None:
        """Let every session go: cancel live work, wait for it to unwind, unregister all.

        Records nothing (a server shutting down is not an eviction; the history is
        already in the ledger). The registry is empty and usable afterwards."""
        while self._sessions or self._leaving or self._adopting:
            pending = list(self._leaving.values()) + list(self._adopting.values())
            busy = []
            for live in list(self._sessions.values()):
                self._unregister(live)
                if live.is_idle:
                    live._state = _GONE
                else:
                    live._state = _LEAVING
                    busy.append(live)
            await asyncio.gather(*(live._cancel_and_drain() for live in busy))
            for live in busy:
                live._state = _GONE
            if pending:
                await asyncio.wait(pending)

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
            idle = now - live._idle_since
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
                await self._evict([(victim, self._clock() - victim._idle_since)], "lru")
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
        live._state = _LIVE
        self._sessions[live.session_id] = live
        self._sessions.move_to_end(live.session_id, last=False)
        if self.config.ttl is not None and live._held is None:
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
            live._state = _LEAVING

        async def record() -> None:
            results = await asyncio.gather(
                *(
                    self.ledger.evict(
                        self.principal,
                        live.session_id,
                        reason=reason,
                        idle_seconds=max(0.0, float(idle)),
                    )
                    for live, idle in victims
                ),
                return_exceptions=True,
            )
            failure: BaseException | None = None
            for (live, _), result in zip(victims, results, strict=True):
                del self._leaving[live.session_id]
                if isinstance(result, BaseException):
                    self._restore(live)
                    failure = failure or result
                else:
                    live._state = _GONE
            self._changed()
            if failure is not None:
                raise failure

        task = self._spawn(record())
        for live, _ in victims:
            self._leaving[live.session_id] = task
        await asyncio.shield(task)

    async def _leave(self, live: LiveSession, record: Literal["close"] | None) -> None:
        """Unregister a session, cancel its work and wait for it; then record the close."""
        self._unregister(live)
        live._state = _LEAVING

        async def unwind() -> None:
            try:
                await live._cancel_and_drain()
                if record == "close":
                    await self.ledger.close_session(self.principal, live.session_id)
            except BaseException:
                del self._leaving[live.session_id]
                self._restore(live)
                self._changed()
                raise
            del self._leaving[live.session_id]
            live._state = _GONE
            self._changed()

        task = self._spawn(unwind())
        self._leaving[live.session_id] = task
        await asyncio.shield(task)

    def _check_not_inside(self, live: LiveSession, what: str) -> None:
        if live._held is not None and asyncio.current_task() is live._owner:
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

    # --------------------------------------------- callbacks from LiveSession
    def _touch(self, live: LiveSession) -> None:
        if live._state == _LIVE and live.session_id in self._sessions:
            self._sessions.move_to_end(live.session_id)

    def _became_busy(self, live: LiveSession) -> None:
        self._idle.pop(live.session_id, None)

    def _became_idle(self, live: LiveSession) -> None:
        live._idle_since = self._clock()
        if live._state == _LIVE and live.session_id in self._sessions:
            self._sessions.move_to_end(live.session_id)
            if self.config.ttl is not None:
                self._idle[live.session_id] = None
                self._idle.move_to_end(live.session_id)


def _context(
    cwd: str, additional_directories: Sequence[str], meta: Mapping[str, Any] | None
) -> ClientContext:
    if isinstance(additional_directories, str):
        raise InvalidInput("additional_directories must be a list of paths, not one string.")
    try:
        return ClientContext(
            cwd=cwd,
            additional_directories=tuple(additional_directories),
            meta=dict(meta) if meta is not None else {},
        )
    except (ValidationError, TypeError) as error:
        raise InvalidInput(f"Invalid client context: {error}; nothing was recorded.") from None
