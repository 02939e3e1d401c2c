"""The live session registry: one turn at a time, bounded queues, cancellation, LRU/TTL caps.

Every scenario runs on asyncio (``asyncio.run`` with a timeout) over a real
ledger on SQLite and PostgreSQL. Time for the TTL comes from a fake monotonic
clock; coroutines are coordinated with events, never with sleeps; a blocked
store write is an ``_app.record`` gated by a ``threading.Event`` for one
session only.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from chatledger import AsyncSessionLedger, ChatLedgerError, SessionLedger, UnknownSession
from chatledger.registry import (
    LiveSession,
    RegistryConfig,
    SessionBusyError,
    SessionLimitError,
    SessionRegistry,
    UnknownSessionError,
)
from support import ALICE, BOB, SCENARIO_TIMEOUT, Ticker, run_scenario

TIMEOUT = SCENARIO_TIMEOUT
run = run_scenario


async def settle(rounds: int = 20) -> None:
    """Let every ready coroutine run (no wall-clock wait)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class Holder:
    """Holds a session's turn (or recovery) until released, from its own task."""

    def __init__(self, live: LiveSession, kind: str = "turn") -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.task = asyncio.create_task(self._hold(live, kind))

    async def _hold(self, live: LiveSession, kind: str) -> None:
        async with live.turn() if kind == "turn" else live.recovery():
            self.entered.set()
            await self.release.wait()

    async def __aenter__(self) -> Holder:
        await self.entered.wait()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.release.set()
        await self.task


def keeping(*args: Any, **kwargs: Any) -> SessionRegistry:
    """A registry that keeps history on eviction and close (retain_history=True,
    on_close="keep"): these tests pin its mechanics by the Evicted and Closed events it
    records. What the default retention drops: tests/test_registry_retention.py."""
    kwargs.setdefault("retain_history", True)
    kwargs.setdefault("on_close", "keep")
    return SessionRegistry(*args, **kwargs)


def event_types(ledger: SessionLedger, session_id: str) -> list[str]:
    return [e.type for e in ledger.history(ALICE, session_id)]


def gate_writes(ledger: SessionLedger, key: str) -> tuple[threading.Event, threading.Event]:
    """Block store writes of session ``key`` (only) until the returned release is set."""
    entered, release = threading.Event(), threading.Event()
    original = ledger.core.store.record

    def record(session: Any) -> Any:
        if getattr(session, "key", None) == key:
            entered.set()
            assert release.wait(TIMEOUT)
        return original(session)

    ledger.core.store.record = record  # type: ignore[method-assign]
    return entered, release


async def wait_thread_event(event: threading.Event) -> None:
    assert await asyncio.to_thread(event.wait, TIMEOUT)


# ------------------------------------------------------------------ identity
def test_sessions_get_distinct_ids_and_stream_ids(ledger: SessionLedger) -> None:
    """Each created session has its own uuid4 hex id, and UUID(session_id) == stream_id."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE)
        sessions = [await registry.create() for _ in range(5)]
        assert len({s.session_id for s in sessions}) == 5
        assert len({s.stream_id for s in sessions}) == 5
        for live in sessions:
            assert uuid.UUID(live.session_id) == live.stream_id
            assert live.stream_id.version == 4 and live.session_id == live.stream_id.hex
        assert len(registry) == 5

    run(scenario())


def test_get_returns_the_same_object(ledger: SessionLedger) -> None:
    """get(id) returns the very LiveSession that create returned, under hex or UUID forms."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE)
        live = await registry.create()
        assert await registry.get(live.session_id) is live
        assert await registry.get(live.stream_id) is live
        assert await registry.get(str(live.stream_id)) is live
        assert live.session_id in registry

    run(scenario())


def test_get_of_an_unknown_id_raises_unknown_session_error(ledger: SessionLedger) -> None:
    """get of an id never issued (or not a UUID at all) raises UnknownSessionError."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE)
        for bad in (uuid.uuid4().hex, "not-a-uuid", ""):
            with pytest.raises(UnknownSessionError) as caught:
                await registry.get(bad)
            assert isinstance(caught.value, UnknownSession)
            assert "get_or_adopt" in str(caught.value)

    run(scenario())


def test_client_context_is_captured_verbatim(ledger: SessionLedger) -> None:
    """cwd, additional directories and meta are kept on the session and recorded in Started."""
    meta = {"client": "zed", "version": 3, "flags": ["a", "b"], "nested": {"x": None}}

    async def scenario() -> None:
        registry = keeping(ledger, ALICE)
        live = await registry.create(
            cwd="/srv/agent", additional_directories=["/srv/lib", "/data"], meta=meta
        )
        assert live.cwd == "/srv/agent"
        assert live.additional_directories == ("/srv/lib", "/data")
        assert live.meta == meta
        started = ledger.history(ALICE, live.session_id)[0]
        assert started.type == "Started"
        assert started.event.context == live.context  # type: ignore[attr-defined]
        assert started.event.context.meta == meta  # type: ignore[attr-defined]
        assert started.event.tenant == ALICE.account_id  # type: ignore[attr-defined]
        assert started.event.key == live.session_id  # type: ignore[attr-defined]

    run(scenario())


# ------------------------------------------------------------------ history
def test_two_sessions_never_share_history(ledger: SessionLedger) -> None:
    """Messages written through one session never appear in another's history."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE)
        one, two = await registry.create(), await registry.create()
        async with one.turn():
            await one.add_message("user", "for one")
        async with two.turn():
            await two.add_message("user", "for two")
        contents = {
            live.session_id: [
                e.event.message.content  # type: ignore[attr-defined]
                for e in await live.history()
                if e.type == "MessageAdded"
            ]
            for live in (one, two)
        }
        assert contents == {one.session_id: ["for one"], two.session_id: ["for two"]}

    run(scenario())


def test_history_accumulates_across_turns_on_one_stream(ledger: SessionLedger) -> None:
    """Each turn adds to the same stream; the session keeps one stream object for its lifetime."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE)
        live = await registry.create()
        stream = live.stream_id
        for n in range(3):
            async with live.turn():
                await live.add_message("user", f"question {n}")
                await live.add_message("assistant", f"answer {n}")
            assert live.stream_id is stream
            assert (await registry.get(live.session_id)).stream_id is stream
        view = await live.view()
        assert [m.content for m in view.buffer][-2:] == ["question 2", "answer 2"]
        assert view.message_count == 6 and view.key == live.session_id

    run(scenario())


def test_a_message_enqueued_during_a_turn_survives_to_the_next(ledger: SessionLedger) -> None:
    """A message recorded from outside while a turn runs is in the history the next turn sees."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE)
        live = await registry.create()
        async with Holder(live):
            await live.add_message("user", "typed while the agent was busy")
        async with live.turn():
            context = await live.prompt_context()
            assert [m.content for m in context.messages] == ["typed while the agent was busy"]

    run(scenario())


# -------------------------------------------------------------------- turns
def test_turns_on_one_session_run_strictly_one_at_a_time(ledger: SessionLedger) -> None:
    """Many concurrent turns on one session never interleave, and they run in arrival order."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE)
        live = await registry.create()
        trace: list[str] = []

        async def one_turn(n: int) -> None:
            async with live.turn():
                trace.append(f"enter {n}")
                await settle(3)
                await live.add_message("user", f"turn {n}")
                trace.append(f"exit {n}")

        await asyncio.gather(*(one_turn(n) for n in range(6)))
        assert trace == [f"{step} {n}" for n in range(6) for step in ("enter", "exit")]
        assert live.is_idle and live.queued == 0

    run(scenario())


def test_the_running_turn_does_not_count_against_max_queued(ledger: SessionLedger) -> None:
    """With max_queued=1 one turn runs and one waits; the next raises SessionBusyError before
    its body runs; once drained the session takes turns again."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE, max_queued=1)
        live = await registry.create()
        ran: list[str] = []

        async def body(name: str) -> None:
            async with live.turn():
                ran.append(name)

        async with Holder(live):
            queued = asyncio.create_task(body("queued"))
            await settle()
            assert live.queued == 1
            with pytest.raises(SessionBusyError):
                await body("overflow")
            with pytest.raises(SessionBusyError):
                async with live.recovery():
                    ran.append("overflow recovery")
            assert live.queued == 1 and ran == []
        await queued
        assert ran == ["queued"]
        await body("after")
        assert ran == ["queued", "after"] and live.is_idle
        assert isinstance(SessionBusyError("x"), ChatLedgerError)

    run(scenario())


def test_cancel_stops_the_running_turn_and_drops_queued_ones(ledger: SessionLedger) -> None:
    """cancel() cancels the running turn task, queued turns raise CancelledError without
    entering; another session's turn keeps running; recorded events stay."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE)
        live, other = await registry.create(), await registry.create()
        entered: list[str] = []
        started = asyncio.Event()

        async def running() -> None:
            async with live.turn():
                entered.append("running")
                await live.add_message("user", "recorded before the cancel")
                started.set()
                await asyncio.Event().wait()  # a long model call

        async def queued(n: int) -> None:
            async with live.turn():
                entered.append(f"queued {n}")

        turn = asyncio.create_task(running())
        waiting = [asyncio.create_task(queued(n)) for n in range(3)]
        await started.wait()
        await settle()
        assert live.turn_task is turn and live.queued == 3
        async with Holder(other) as bystander:
            await live.cancel()
            assert turn.done() and live.queued == 0 and live.is_idle
            results = await asyncio.gather(turn, *waiting, return_exceptions=True)
            assert all(isinstance(r, asyncio.CancelledError) for r in results)
            assert entered == ["running"]
            assert not bystander.task.done()
            await other.add_message("user", "the other session still works")
        types = event_types(ledger, live.session_id)
        assert types == ["Started", "MessageAdded"]
        async with live.turn():  # usable again after a cancel
            entered.append("after")
        assert entered == ["running", "after"]

    run(scenario())


def test_recovery_holds_the_turn_lock_and_counts_as_busy(ledger: SessionLedger) -> None:
    """A recovery is exclusive with turns, makes the session busy, and is registered for cancel."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE)
        live = await registry.create()
        assert live.is_idle and not live.in_recovery
        async with Holder(live, kind="recovery") as holder:
            assert not live.is_idle and live.in_recovery
            assert live.turn_task is holder.task
            waiter = asyncio.create_task(live.turn().__aenter__())
            await settle()
            assert live.queued == 1 and not waiter.done()
            waiter.cancel()
        assert live.is_idle and live.queued == 0

    run(scenario())


# ---------------------------------------------------------------- LRU cap
def test_max_sessions_evicts_the_least_recently_used_idle_session(ledger: SessionLedger) -> None:
    """At the cap, admission evicts the least recently used idle session (get refreshes recency)
    and records Evicted(reason='lru') with its idle seconds."""

    async def scenario() -> None:
        clock = Ticker()
        registry = keeping(ledger, ALICE, max_sessions=2, clock=clock)
        a = await registry.create()
        clock.advance(5)
        b = await registry.create()
        clock.advance(5)
        await registry.get(a.session_id)  # a is now more recent than b
        c = await registry.create()
        assert len(registry) == 2
        assert await registry.get(a.session_id) is a
        assert await registry.get(c.session_id) is c
        with pytest.raises(UnknownSessionError):
            await registry.get(b.session_id)
        assert not b.is_live
        evicted = ledger.history(ALICE, b.session_id)[-1]
        assert evicted.type == "Evicted"
        assert evicted.event.reason == "lru"  # type: ignore[attr-defined]
        assert evicted.event.idle_seconds == 5.0  # type: ignore[attr-defined]
        assert event_types(ledger, a.session_id) == ["Started"]

    run(scenario())


def test_a_new_session_is_never_its_own_victim(ledger: SessionLedger) -> None:
    """With max_sessions=1 each create evicts the previous session, never the one it creates."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE, max_sessions=1)
        previous = await registry.create()
        for _ in range(3):
            live = await registry.create()
            assert len(registry) == 1 and await registry.get(live.session_id) is live
            assert event_types(ledger, previous.session_id)[-1] == "Evicted"
            assert event_types(ledger, live.session_id) == ["Started"]
            previous = live

    run(scenario())


def test_busy_sessions_are_never_evicted_and_admission_fails(ledger: SessionLedger) -> None:
    """When every session is running a turn or a recovery, create and adopt raise
    SessionLimitError however often they are retried, and the registry never grows."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE, max_sessions=2)
        one, two = await registry.create(), await registry.create()
        async with Holder(one), Holder(two, kind="recovery"):
            for _ in range(10):
                with pytest.raises(SessionLimitError):
                    await registry.create()
                with pytest.raises(SessionLimitError):
                    await registry.get_or_adopt(uuid.uuid4())
                assert len(registry) == 2
            assert one.is_live and two.is_live
        assert event_types(ledger, one.session_id) == ["Started"]
        assert event_types(ledger, two.session_id) == ["Started"]

    run(scenario())


def test_a_slot_frees_when_a_turn_finishes(ledger: SessionLedger) -> None:
    """With every session busy admission fails; as soon as one turn ends, that session is the
    victim and admission succeeds."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE, max_sessions=2)
        one, two = await registry.create(), await registry.create()
        async with Holder(two):
            holder = Holder(one)
            await holder.entered.wait()
            with pytest.raises(SessionLimitError):
                await registry.create()
            await holder.__aexit__()
            three = await registry.create()
            assert two.is_live and not one.is_live and three.is_live
        assert len(registry) == 2

    run(scenario())


def test_concurrent_admissions_never_exceed_the_cap(ledger: SessionLedger) -> None:
    """Many creates racing at the cap leave exactly max_sessions registered."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE, max_sessions=3)
        created = await asyncio.gather(*(registry.create() for _ in range(12)))
        assert len(registry) == 3
        assert sum(live.is_live for live in created) == 3
        for live in created:
            expected = "Started" if live.is_live else "Evicted"
            assert event_types(ledger, live.session_id)[-1] == expected

    run(scenario())


# -------------------------------------------------------------------- TTL
def test_ttl_counts_idle_time_from_the_end_of_the_last_turn(ledger: SessionLedger) -> None:
    """A turn longer than the ttl does not expire its session; the clock restarts when the turn
    ends; only then does idleness past the ttl expire it (Evicted reason 'idle')."""

    async def scenario() -> None:
        clock = Ticker()
        registry = keeping(ledger, ALICE, ttl=60, clock=clock)
        live = await registry.create()
        async with live.turn():
            clock.advance(600)  # a ten-minute turn
            assert await registry.sweep() == 0
            assert await registry.get(live.session_id) is live
        clock.advance(59)
        assert await registry.get(live.session_id) is live
        clock.advance(1)
        with pytest.raises(UnknownSessionError):
            await registry.get(live.session_id)
        evicted = ledger.history(ALICE, live.session_id)[-1]
        assert evicted.type == "Evicted"
        assert evicted.event.reason == "idle"  # type: ignore[attr-defined]
        assert evicted.event.idle_seconds == 60.0  # type: ignore[attr-defined]

    run(scenario())


def test_get_does_not_restart_the_ttl(ledger: SessionLedger) -> None:
    """Looking a session up refreshes LRU recency but not its idle time."""

    async def scenario() -> None:
        clock = Ticker()
        registry = keeping(ledger, ALICE, ttl=10, clock=clock)
        live = await registry.create()
        for _ in range(3):
            clock.advance(3)
            await registry.get(live.session_id)
        clock.advance(1)
        with pytest.raises(UnknownSessionError):
            await registry.get(live.session_id)

    run(scenario())


def test_a_session_mid_turn_never_expires(ledger: SessionLedger) -> None:
    """However long a turn runs, sweeps skip the busy session but expire idle ones around it."""

    async def scenario() -> None:
        clock = Ticker()
        registry = keeping(ledger, ALICE, ttl=5, clock=clock)
        busy, idle = await registry.create(), await registry.create()
        async with Holder(busy):
            clock.advance(1000)
            assert await registry.sweep() == 1
            assert busy.is_live and not idle.is_live
            await busy.add_message("assistant", "still thinking")
        assert await registry.get(busy.session_id) is busy

    run(scenario())


def test_any_access_runs_the_expiry_sweep(ledger: SessionLedger) -> None:
    """create, get, get_or_adopt, forget and close each expire idle sessions past the ttl."""

    async def scenario() -> None:
        clock = Ticker()
        registry = keeping(ledger, ALICE, ttl=10, clock=clock)
        keeper = await registry.create()
        accesses: list[Callable[[], Awaitable[object]]] = [
            lambda: registry.create(),
            lambda: registry.get(keeper.session_id),
            lambda: registry.get_or_adopt(keeper.session_id),
            lambda: registry.forget(uuid.uuid4()),
            lambda: registry.close(keeper.session_id),
        ]
        for access in accesses:
            stale = await registry.create()
            clock.advance(10)
            async with keeper.turn():
                pass  # keeps the keeper's idle clock fresh
            await access()
            assert stale.session_id not in registry and not stale.is_live
            assert event_types(ledger, stale.session_id)[-1] == "Evicted"

    run(scenario())


def test_an_evicted_session_comes_back_with_its_history(ledger: SessionLedger) -> None:
    """After an eviction get_or_adopt brings the session back; its next message records that."""

    async def scenario() -> None:
        clock = Ticker()
        registry = keeping(ledger, ALICE, ttl=10, clock=clock)
        live = await registry.create(cwd="/srv/agent", meta={"client": "cli"})
        async with live.turn():
            await live.add_message("user", "remember the milk")
        clock.advance(10)
        assert await registry.sweep() == 1
        back, adopted = await registry.get_or_adopt(live.session_id, cwd="/elsewhere")
        assert adopted and back is not live and back.stream_id == live.stream_id
        assert back.cwd == "/srv/agent" and back.meta == {"client": "cli"}
        assert [e.type for e in await back.history()] == ["Started", "MessageAdded", "Evicted"]
        async with back.turn():
            await back.add_message("user", "and the eggs")
        assert (await back.view()).message_count == 2
        types = [e.type for e in await back.history()]
        assert types[3:] == ["Reactivated", "MessageAdded"]

    run(scenario())


def test_a_let_go_session_object_refuses_new_work(ledger: SessionLedger) -> None:
    """A LiveSession that was evicted refuses turns and writes (the ledger is not reopened
    behind the registry's back) but can still read its history."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE, max_sessions=1)
        old = await registry.create()
        await registry.create()
        with pytest.raises(UnknownSessionError):
            async with old.turn():
                pass
        with pytest.raises(UnknownSessionError):
            await old.add_message("user", "too late")
        assert [e.type for e in await old.history()] == ["Started", "Evicted"]

    run(scenario())


def test_a_failed_eviction_record_puts_the_session_back(ledger: SessionLedger) -> None:
    """If the Evicted event cannot be recorded, the victim stays registered, the error reaches
    the caller, and nothing is admitted; the next attempt succeeds."""

    async def scenario() -> None:
        async_ledger = AsyncSessionLedger(ledger)
        registry = keeping(async_ledger, ALICE, max_sessions=1)
        first = await registry.create()
        real_evict = async_ledger.evict
        failing = True

        async def flaky_evict(*args: Any, **kwargs: Any) -> Any:
            if failing:
                raise ChatLedgerError("store down")
            return await real_evict(*args, **kwargs)

        async_ledger.evict = flaky_evict  # type: ignore[method-assign]
        with pytest.raises(ChatLedgerError, match="store down"):
            await registry.create()
        assert len(registry) == 1 and await registry.get(first.session_id) is first
        failing = False
        second = await registry.create()
        assert len(registry) == 1 and not first.is_live and second.is_live

    run(scenario())


# ------------------------------------------------------------------- close
def test_close_waits_for_live_work_before_recording_closed(ledger: SessionLedger) -> None:
    """close() cancels the turn, waits until its in-flight write has landed, then records Closed,
    so no write of the session lands after the close."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE)
        live = await registry.create()
        entered, release = gate_writes(ledger, live.session_id)
        after_write: list[str] = []

        async def turn() -> None:
            async with live.turn():
                await live.add_message("assistant", "a slow write")
                after_write.append("body went on")

        task = asyncio.create_task(turn())
        await wait_thread_event(entered)
        closing = asyncio.create_task(registry.close(live.session_id))
        await settle()
        assert not closing.done()  # the write is still in the store
        assert live.session_id not in registry
        with pytest.raises(UnknownSessionError):
            async with live.turn():
                pass
        release.set()
        await closing
        with pytest.raises(asyncio.CancelledError):
            await task
        assert after_write == []
        assert event_types(ledger, live.session_id) == ["Started", "MessageAdded", "Closed"]
        with pytest.raises(UnknownSessionError):
            await registry.get(live.session_id)
        with pytest.raises(UnknownSessionError):
            await live.add_message("user", "late")

    run(scenario())


def test_close_of_an_unknown_session_raises(ledger: SessionLedger) -> None:
    """close() of an id that is not live raises UnknownSessionError and records nothing."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE)
        with pytest.raises(UnknownSessionError):
            await registry.close(uuid.uuid4())
        live = await registry.create()
        await registry.close(live.session_id)
        with pytest.raises(UnknownSessionError):
            await registry.close(live.session_id)
        assert event_types(ledger, live.session_id) == ["Started", "Closed"]

    run(scenario())


def test_aclose_cancels_everything_and_lets_every_session_go(ledger: SessionLedger) -> None:
    """aclose() cancels running and queued turns, waits for them, and empties the registry
    without recording anything."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE)
        busy, idle = await registry.create(), await registry.create()
        holder = Holder(busy)
        await holder.entered.wait()
        queued = asyncio.create_task(busy.turn().__aenter__())
        await settle()
        await registry.aclose()
        assert len(registry) == 0 and not busy.is_live and not idle.is_live
        assert holder.task.cancelled() and queued.cancelled()
        assert event_types(ledger, busy.session_id) == ["Started"]
        assert event_types(ledger, idle.session_id) == ["Started"]
        assert (await registry.create()).is_live  # usable afterwards

    run(scenario())


# ------------------------------------------------------------------- adopt
def test_adopt_registers_under_the_stream_id_hex(ledger: SessionLedger) -> None:
    """get_or_adopt of a UUID (any form) registers it under its hex, starting it in the ledger
    with the given context; a second call returns the same session, untouched."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE)
        stream_id = uuid.uuid4()
        live, adopted = await registry.get_or_adopt(str(stream_id), cwd="/first")
        assert adopted and live.session_id == stream_id.hex and live.stream_id == stream_id
        assert await registry.get(stream_id.hex) is live
        again, adopted = await registry.get_or_adopt(stream_id, cwd="/second", meta={"x": 1})
        assert again is live and not adopted and live.cwd == "/first" and live.meta == {}
        assert event_types(ledger, stream_id.hex) == ["Started"]
        with pytest.raises(ValueError):
            await registry.get_or_adopt("not a uuid")

    run(scenario())


def test_a_second_registry_finds_what_the_first_wrote_by_id_alone(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Two registries (two ledgers, one database): the second adopts by id and sees the first's
    context and history; an adopted session starts idle."""

    async def scenario() -> None:
        first = keeping(make_ledger(), ALICE)
        second = keeping(make_ledger(), ALICE)
        live = await first.create(cwd="/srv/a", additional_directories=["/lib"], meta={"k": "v"})
        async with live.turn():
            await live.add_message("user", "hello from the first server")
        found, adopted = await second.get_or_adopt(live.session_id, cwd="/ignored")
        assert adopted and found is not live and found.is_idle and found.queued == 0
        assert found.context == live.context
        contents = [m.content for m in (await found.view()).buffer]
        assert contents == ["hello from the first server"]

    run(scenario())


def test_adoption_respects_the_cap(ledger: SessionLedger) -> None:
    """Adopting at the cap evicts the least recently used idle session to make room."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE, max_sessions=1)
        idle = await registry.create()
        adopted, _ = await registry.get_or_adopt(uuid.uuid4())
        assert len(registry) == 1 and not idle.is_live and adopted.is_live
        assert event_types(ledger, idle.session_id)[-1] == "Evicted"

    run(scenario())


def test_concurrent_adoptions_of_one_id_register_one_session(ledger: SessionLedger) -> None:
    """Many tasks adopting the same id at once get one LiveSession and one Started event."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE)
        stream_id = uuid.uuid4()
        results = await asyncio.gather(*(registry.get_or_adopt(stream_id) for _ in range(10)))
        assert len({id(live) for live, _ in results}) == 1
        assert sum(adopted for _, adopted in results) == 1
        assert event_types(ledger, stream_id.hex) == ["Started"]

    run(scenario())


def test_forget_leaves_the_history_as_found(ledger: SessionLedger) -> None:
    """forget() unregisters the session and records nothing; forgetting twice is fine."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE)
        live = await registry.create()
        async with live.turn():
            await live.add_message("user", "keep me")
        before = event_types(ledger, live.session_id)
        await registry.forget(live.session_id)
        await registry.forget(live.session_id)
        await registry.forget("not even a uuid")
        assert event_types(ledger, live.session_id) == before
        with pytest.raises(UnknownSessionError):
            await registry.get(live.session_id)
        _, adopted = await registry.get_or_adopt(live.session_id)
        assert adopted and event_types(ledger, live.session_id) == before

    run(scenario())


def test_registries_of_two_tenants_do_not_share_sessions(ledger: SessionLedger) -> None:
    """The registry's principal is the tenant: another tenant adopting the same id gets its own
    session in its own account."""

    async def scenario() -> None:
        alice, bob = keeping(ledger, ALICE), keeping(ledger, BOB)
        live = await alice.create()
        async with live.turn():
            await live.add_message("user", "alice only")
        theirs, _ = await bob.get_or_adopt(live.session_id)
        assert (await theirs.view()).message_count == 0
        assert (await theirs.view()).tenant == BOB.account_id

    run(scenario())


# ------------------------------------------------------------ construction
@pytest.mark.parametrize(
    "bounds",
    [
        {"max_sessions": 0},
        {"max_sessions": -1},
        {"ttl": 0},
        {"ttl": -5.0},
        {"ttl": float("inf")},
        {"max_queued": 0},
        {"max_queued": -2},
        {"max_sessions": True},
    ],
)
def test_invalid_bounds_raise_value_error(ledger: SessionLedger, bounds: dict[str, Any]) -> None:
    """Zero, negative or non-numeric bounds are rejected when the registry or config is built."""
    with pytest.raises(ValueError):
        keeping(ledger, ALICE, **bounds)
    with pytest.raises(ValueError):
        RegistryConfig(**bounds)


def test_from_config_and_either_ledger_kind_are_accepted(ledger: SessionLedger) -> None:
    """from_config applies the bounds; a SessionLedger or an AsyncSessionLedger both work;
    anything else is rejected."""
    config = RegistryConfig(max_sessions=2, ttl=30, max_queued=4)
    registry = SessionRegistry.from_config(config, ledger, ALICE, clock=Ticker())
    assert registry.config == config and isinstance(registry.ledger, AsyncSessionLedger)
    wrapped = AsyncSessionLedger(ledger)
    assert keeping(wrapped, ALICE).ledger is wrapped
    with pytest.raises(ValueError):
        keeping("sqlite://", ALICE)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        keeping(ledger, "acme")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RegistryConfig.model_validate({"max_sessions": 0})

    async def scenario() -> None:
        with pytest.raises(ValueError):
            await registry.create(additional_directories="/not/a/list")
        assert len(registry) == 0

    run(scenario())


# ------------------------------------------------------- ledger concurrency
def test_concurrent_get_or_create_from_threads_yields_one_session(ledger: SessionLedger) -> None:
    """Sixteen threads released together on one key get one session, created exactly once."""
    key = uuid.uuid4().hex
    barrier = threading.Barrier(16)
    results: list[tuple[uuid.UUID, bool]] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            barrier.wait(TIMEOUT)
            view, created = ledger.get_or_create(ALICE, key)
            results.append((view.session_id, created))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads) and errors == []
    assert len({sid for sid, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    assert event_types(ledger, key) == ["Started"]


def test_concurrent_get_or_create_from_tasks_yields_one_session(ledger: SessionLedger) -> None:
    """Many asyncio tasks on one key through AsyncSessionLedger get one session."""

    async def scenario() -> None:
        async_ledger = AsyncSessionLedger(ledger)
        key = uuid.uuid4().hex
        results = await asyncio.gather(*(async_ledger.get_or_create(ALICE, key) for _ in range(12)))
        assert len({view.session_id for view, _ in results}) == 1
        assert sum(created for _, created in results) == 1
        assert event_types(ledger, key) == ["Started"]

    run(scenario())


def test_a_slow_write_on_one_session_blocks_no_other(ledger: SessionLedger) -> None:
    """While one session's store write is blocked, other sessions write, and the registry
    creates, looks up and evicts sessions: no registry-wide lock is held during ledger I/O."""

    async def scenario() -> None:
        registry = keeping(ledger, ALICE, max_sessions=3)
        slow, fast, spare = [await registry.create() for _ in range(3)]
        entered, release = gate_writes(ledger, slow.session_id)

        async def slow_turn() -> None:
            async with slow.turn():
                await slow.add_message("user", "stuck in the store")

        blocked = asyncio.create_task(slow_turn())
        try:
            await wait_thread_event(entered)
            async with asyncio.timeout(10):
                async with fast.turn():
                    await fast.add_message("user", "not blocked")
                assert await registry.get(fast.session_id) is fast
                newcomer = await registry.create()  # evicts the idle spare, not slow
                assert newcomer.is_live and not spare.is_live and slow.is_live
            assert not blocked.done()
        finally:
            release.set()
        await blocked
        assert event_types(ledger, slow.session_id) == ["Started", "MessageAdded"]

    run(scenario())
