"""The bad-input catalogue: every public entry point refuses bad input the same way.

Each case calls one public method of ``SessionLedger``, ``AsyncSessionLedger``,
``ReadModels`` or ``SessionRegistry`` with one bad argument, on SQLite and on
PostgreSQL, and pins two things: the exact ``chatledger.errors`` type raised
(a subclass does not count), and that the event store is byte-for-byte what
it was (every row of events and snapshots, hence counts and heads). The CLI's
cases live in the CLI tests, which pin exit codes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest

from chatledger import (
    AccessDenied,
    AsyncSessionLedger,
    ClientContext,
    InvalidInput,
    InvalidSettings,
    ReadModels,
    SessionLedger,
    SessionRegistry,
    UnknownSession,
    UnknownSessionError,
)
from support import ALICE, BOB, store_state

NAIVE = datetime(2026, 1, 1, 12, 0)  # no tzinfo
HUGE = 2**64


@dataclass
class Env:
    """A populated ledger and its faces."""

    ledger: SessionLedger
    models: ReadModels
    ids: list[str]  # live message ids of ALICE's "s1"


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


def registry(env: Env, call: Callable[[SessionRegistry], Coroutine[Any, Any, Any]]) -> Any:
    async def main() -> Any:
        async with SessionRegistry(env.ledger, ALICE) as reg:
            return await call(reg)

    return run(main())


def aledger(env: Env) -> AsyncSessionLedger:
    return AsyncSessionLedger(env.ledger)


def meta(value: Any) -> ClientContext:
    return ClientContext.model_construct(cwd="", additional_directories=(), meta=value)


def context_with(**fields: Any) -> ClientContext:
    return ClientContext.model_construct(**{**ClientContext().model_dump(), **fields})


Case = tuple[str, Callable[[Env], Any], type[Exception]]
L = SessionLedger  # for readable lambdas below

CASES: list[Case] = [
    # --------------------------------------------------------- add_message
    (
        "add: principal not a Principal",
        lambda e: e.ledger.add_message("alice", "s1", "user", "x"),
        InvalidInput,
    ),  # type: ignore[arg-type]
    ("add: empty key", lambda e: e.ledger.add_message(ALICE, "", "user", "x"), InvalidInput),
    (
        "add: key too long",
        lambda e: e.ledger.add_message(ALICE, "k" * 257, "user", "x"),
        InvalidInput,
    ),
    (
        "add: key with newline",
        lambda e: e.ledger.add_message(ALICE, "a\nb", "user", "x"),
        InvalidInput,
    ),
    (
        "add: key with surrogate",
        lambda e: e.ledger.add_message(ALICE, "a\ud800", "user", "x"),
        InvalidInput,
    ),
    ("add: key not a str", lambda e: e.ledger.add_message(ALICE, 7, "user", "x"), InvalidInput),  # type: ignore[arg-type]
    ("add: unknown role", lambda e: e.ledger.add_message(ALICE, "s1", "robot", "x"), InvalidInput),
    (
        "add: content not a str",
        lambda e: e.ledger.add_message(ALICE, "s1", "user", 5),
        InvalidInput,
    ),  # type: ignore[arg-type]
    (
        "add: content too long",
        lambda e: e.ledger.add_message(ALICE, "s1", "user", "x" * 1_000_001),
        InvalidInput,
    ),
    (
        "add: content surrogate",
        lambda e: e.ledger.add_message(ALICE, "s1", "user", "\udc80"),
        InvalidInput,
    ),
    (
        "add: name too long",
        lambda e: e.ledger.add_message(ALICE, "s1", "user", "x", name="n" * 257),
        InvalidInput,
    ),
    (
        "add: name surrogate",
        lambda e: e.ledger.add_message(ALICE, "s1", "user", "x", name="\ud800"),
        InvalidInput,
    ),
    (
        "add: name control char",
        lambda e: e.ledger.add_message(ALICE, "s1", "user", "x", name="a\tb"),
        InvalidInput,
    ),
    (
        "add: message id control char",
        lambda e: e.ledger.add_message(ALICE, "s1", "user", "x", message_id="a\x00"),
        InvalidInput,
    ),
    (
        "add: message id too long",
        lambda e: e.ledger.add_message(ALICE, "s1", "user", "x", message_id="m" * 129),
        InvalidInput,
    ),
    (
        "add: message id already live",
        lambda e: e.ledger.add_message(ALICE, "s1", "user", "x", message_id=e.ids[0]),
        InvalidInput,
    ),
    (
        "add: tool status unknown",
        lambda e: e.ledger.add_message(
            ALICE, "s1", "tool", "x", tool_call={"tool_name": "t", "status": "maybe"}
        ),
        InvalidInput,
    ),
    (
        "add: tool tokens negative",
        lambda e: e.ledger.add_message(
            ALICE, "s1", "tool", "x", tool_call={"tool_name": "t", "prompt_tokens": -1}
        ),
        InvalidInput,
    ),
    (
        "add: tool tokens past 10**12",
        lambda e: e.ledger.add_message(
            ALICE, "s1", "tool", "x", tool_call={"tool_name": "t", "completion_tokens": 10**12 + 1}
        ),
        InvalidInput,
    ),
    (
        "add: tool tokens 2**64",
        lambda e: e.ledger.add_message(
            ALICE, "s1", "tool", "x", tool_call={"tool_name": "t", "prompt_tokens": HUGE}
        ),
        InvalidInput,
    ),
    (
        "add: tool name NUL",
        lambda e: e.ledger.add_message(ALICE, "s1", "tool", "x", tool_call={"tool_name": "a\x00"}),
        InvalidInput,
    ),
    (
        "add: another tenant's account",
        lambda e: e.ledger.add_message(ALICE, "s1", "user", "x", account_id="globex"),
        AccessDenied,
    ),
    (
        "add: meta huge integer",
        lambda e: e.ledger.add_message(ALICE, "new", "user", "x", context=meta({"n": 10**5000})),
        InvalidInput,
    ),
    (
        "add: meta nan",
        lambda e: e.ledger.add_message(
            ALICE, "new", "user", "x", context=meta({"n": float("nan")})
        ),
        InvalidInput,
    ),
    (
        "add: meta int key",
        lambda e: e.ledger.add_message(ALICE, "new", "user", "x", context=meta({1: 2})),
        InvalidInput,
    ),
    (
        "add: meta object value",
        lambda e: e.ledger.add_message(ALICE, "new", "user", "x", context=meta({"o": object()})),
        InvalidInput,
    ),
    (
        "add: cwd too long",
        lambda e: e.ledger.add_message(
            ALICE, "new", "user", "x", context=context_with(cwd="/" * 4097)
        ),
        InvalidInput,
    ),
    (
        "add: too many directories",
        lambda e: e.ledger.add_message(
            ALICE, "new", "user", "x", context=context_with(additional_directories=("/",) * 65)
        ),
        InvalidInput,
    ),
    (
        "add: context not a context",
        lambda e: e.ledger.add_message(ALICE, "new", "user", "x", context=5),
        InvalidInput,
    ),  # type: ignore[arg-type]
    (
        "add: empty idempotency key",
        lambda e: e.ledger.add_message(ALICE, "s1", "user", "x", idempotency_key=""),
        InvalidInput,
    ),
    # -------------------------------------------------------- add_messages
    (
        "batch: a str, not a list",
        lambda e: e.ledger.add_messages(ALICE, "s1", "hello"),
        InvalidInput,
    ),  # type: ignore[arg-type]
    ("batch: empty", lambda e: e.ledger.add_messages(ALICE, "s1", []), InvalidInput),
    (
        "batch: duplicate ids",
        lambda e: e.ledger.add_messages(
            ALICE,
            "s1",
            [
                {"role": "user", "content": "a", "id": "d"},
                {"role": "user", "content": "b", "id": "d"},
            ],
        ),
        InvalidInput,
    ),
    (
        "batch: unknown field",
        lambda e: e.ledger.add_messages(
            ALICE, "s1", [{"role": "user", "content": "a", "colour": 1}]
        ),
        InvalidInput,
    ),
    ("batch: element not a dict", lambda e: e.ledger.add_messages(ALICE, "s1", [3]), InvalidInput),  # type: ignore[list-item]
    (
        "batch: naive created_at",
        lambda e: e.ledger.add_messages(
            ALICE, "s1", [{"role": "user", "content": "a", "created_at": NAIVE}]
        ),
        InvalidInput,
    ),
    (
        "batch: one bad of two",
        lambda e: e.ledger.add_messages(
            ALICE, "s1", [{"role": "user", "content": "ok"}, {"role": "user", "content": "\ud800"}]
        ),
        InvalidInput,
    ),
    # ------------------------------------------------------------- commits
    ("commit: unknown session", lambda e: e.ledger.commit(ALICE, "nope"), UnknownSession),
    (
        "commit: another tenant",
        lambda e: e.ledger.commit(ALICE, "s1", account_id="globex"),
        AccessDenied,
    ),
    ("snapshot: ids a str", lambda e: e.ledger.commit_snapshot(ALICE, "s1", "abc"), InvalidInput),  # type: ignore[arg-type]
    ("snapshot: no ids", lambda e: e.ledger.commit_snapshot(ALICE, "s1", []), InvalidInput),
    (
        "snapshot: unknown id",
        lambda e: e.ledger.commit_snapshot(ALICE, "s1", ["nope"]),
        InvalidInput,
    ),
    (
        "snapshot: duplicate ids",
        lambda e: e.ledger.commit_snapshot(ALICE, "s1", [e.ids[0], e.ids[0]]),
        InvalidInput,
    ),
    ("snapshot: non-str id", lambda e: e.ledger.commit_snapshot(ALICE, "s1", [1]), InvalidInput),  # type: ignore[list-item]
    (
        "merge: threshold 0",
        lambda e: e.ledger.merge_archives(ALICE, "s1", threshold=0),
        InvalidInput,
    ),
    (
        "merge: max_count 1",
        lambda e: e.ledger.merge_archives(ALICE, "s1", max_count=1),
        InvalidInput,
    ),
    (
        "merge: threshold 2**64",
        lambda e: e.ledger.merge_archives(ALICE, "s1", threshold=HUGE),
        InvalidInput,
    ),
    ("merge: unknown session", lambda e: e.ledger.merge_archives(ALICE, "nope"), UnknownSession),
    # ------------------------------------------------- lifecycle commands
    (
        "get_or_create: meta inf",
        lambda e: e.ledger.get_or_create(ALICE, "new", context=meta({"x": float("inf")})),
        InvalidInput,
    ),
    ("close: unknown session", lambda e: e.ledger.close_session(ALICE, "nope"), UnknownSession),
    ("evict: bad reason", lambda e: e.ledger.evict(ALICE, "s1", reason="bored"), InvalidInput),  # type: ignore[arg-type]
    (
        "evict: idle nan",
        lambda e: e.ledger.evict(ALICE, "s1", idle_seconds=float("nan")),
        InvalidInput,
    ),
    (
        "evict: idle inf",
        lambda e: e.ledger.evict(ALICE, "s1", idle_seconds=float("inf")),
        InvalidInput,
    ),
    ("evict: idle negative", lambda e: e.ledger.evict(ALICE, "s1", idle_seconds=-1), InvalidInput),
    ("evict: idle 1e20", lambda e: e.ledger.evict(ALICE, "s1", idle_seconds=1e20), InvalidInput),
    ("evict: unknown session", lambda e: e.ledger.evict(ALICE, "nope"), UnknownSession),
    # ---------------------------------------------------------------- reads
    ("session: at_version 0", lambda e: e.ledger.session(ALICE, "s1", at_version=0), InvalidInput),
    (
        "session: at_version 2**64",
        lambda e: e.ledger.session(ALICE, "s1", at_version=HUGE),
        InvalidInput,
    ),
    (
        "session: past the head",
        lambda e: e.ledger.session(ALICE, "s1", at_version=10_000),
        InvalidInput,
    ),
    (
        "session: naive at_time",
        lambda e: e.ledger.session(ALICE, "s1", at_time=NAIVE),
        InvalidInput,
    ),
    (
        "session: version and time",
        lambda e: e.ledger.session(ALICE, "s1", at_version=1, at_time=NAIVE),
        InvalidInput,
    ),
    ("session: unknown", lambda e: e.ledger.session(ALICE, "nope"), UnknownSession),
    (
        "session: another tenant",
        lambda e: e.ledger.session(BOB, "s1", account_id="acme"),
        AccessDenied,
    ),
    ("context: budget -1", lambda e: e.ledger.context(ALICE, "s1", -1), InvalidInput),
    ("context: budget 2**64", lambda e: e.ledger.context(ALICE, "s1", HUGE), InvalidInput),
    ("context: budget float", lambda e: e.ledger.context(ALICE, "s1", 1.5), InvalidInput),  # type: ignore[arg-type]
    ("history: after -1", lambda e: e.ledger.history(ALICE, "s1", after_version=-1), InvalidInput),
    ("history: limit 0", lambda e: e.ledger.history(ALICE, "s1", limit=0), InvalidInput),
    ("history: unknown", lambda e: e.ledger.history(ALICE, "nope"), UnknownSession),
    ("diff: reversed", lambda e: e.ledger.diff(ALICE, "s1", 3, 2), InvalidInput),
    ("diff: version 0", lambda e: e.ledger.diff(ALICE, "s1", 0, 2), InvalidInput),
    ("diff: to 2**64", lambda e: e.ledger.diff(ALICE, "s1", 1, HUGE), InvalidInput),
    (
        "fork: into an existing key",
        lambda e: e.ledger.fork(ALICE, "s1", 2, "b1", account_id=None),
        InvalidInput,
    ),
    ("fork: past the head", lambda e: e.ledger.fork(ALICE, "s1", 10_000, "copy"), InvalidInput),
    ("fork: onto itself", lambda e: e.ledger.fork(ALICE, "s1", 2, "s1"), InvalidInput),
    ("verify: not a Principal", lambda e: e.ledger.verify("admin"), InvalidInput),  # type: ignore[arg-type]
    ("export: not a Principal", lambda e: list(e.ledger.export("admin")), InvalidInput),  # type: ignore[arg-type]
    ("import: a ledger with events", lambda e: e.ledger.import_(["{}"]), InvalidInput),
    # --------------------------------------------------- read-model queries
    ("working_set: bad order", lambda e: e.ledger.working_set(ALICE, order="size"), InvalidInput),  # type: ignore[arg-type]
    ("working_set: limit 0", lambda e: e.ledger.working_set(ALICE, limit=0), InvalidInput),
    ("working_set: limit 10001", lambda e: e.ledger.working_set(ALICE, limit=10_001), InvalidInput),
    ("working_set: offset -1", lambda e: e.ledger.working_set(ALICE, offset=-1), InvalidInput),
    (
        "working_set: another tenant",
        lambda e: e.ledger.working_set(ALICE, account_id="globex"),
        AccessDenied,
    ),
    ("audit: offset 2**64", lambda e: e.ledger.audit(ALICE, offset=HUGE), InvalidInput),
    ("audit: unknown type", lambda e: e.ledger.audit(ALICE, types=["Exploded"]), InvalidInput),
    ("audit: naive since", lambda e: e.ledger.audit(ALICE, since=NAIVE), InvalidInput),
    ("audit: another tenant", lambda e: e.ledger.audit(ALICE, account_id="globex"), AccessDenied),
    ("usage: another tenant", lambda e: e.ledger.usage(ALICE, account_id="globex"), AccessDenied),
    ("archives: key surrogate", lambda e: e.ledger.archives(ALICE, "\udfff"), InvalidInput),
    ("evict_idle: inf", lambda e: e.ledger.evict_idle(ALICE, float("inf")), InvalidInput),
    ("evict_idle: nan", lambda e: e.ledger.evict_idle(ALICE, float("nan")), InvalidInput),
    ("evict_idle: negative", lambda e: e.ledger.evict_idle(ALICE, -5), InvalidInput),
    ("evict_idle: naive now", lambda e: e.ledger.evict_idle(ALICE, 60, now=NAIVE), InvalidInput),
    ("wait: position -1", lambda e: e.ledger.wait_for_projections(-1), InvalidInput),
    (
        "wait: timeout inf",
        lambda e: e.ledger.wait_for_projections(1, timeout=float("inf")),
        InvalidInput,
    ),
    # ------------------------------------------------------- ReadModels itself
    ("models: poll nan", lambda e: ReadModels(e.ledger, poll_interval=float("nan")), InvalidInput),
    ("models: batch 0", lambda e: ReadModels(e.ledger, batch_size=0), InvalidInput),
    ("models: rebuild audit", lambda e: e.models.rebuild("audit"), InvalidInput),
    ("models: rebuild unknown", lambda e: e.models.rebuild("nope"), InvalidInput),
    ("models: working_set limit 0", lambda e: e.models.working_set(ALICE, limit=0), InvalidInput),
    ("models: audit types a number", lambda e: e.models.audit(ALICE, types=[7]), InvalidInput),  # type: ignore[list-item]
    # ------------------------------------------------------------- settings
    (
        "settings: busy_timeout inf",
        lambda e: SessionLedger(e.ledger.settings.url, busy_timeout=float("inf")),
        InvalidSettings,
    ),
    ("settings: unknown database", lambda e: SessionLedger("mysql://db/x"), InvalidSettings),
    (
        "settings: unknown option",
        lambda e: SessionLedger(e.ledger.settings.url, colour="red"),
        InvalidSettings,
    ),
    (
        "settings: summarizer without merge",
        lambda e: SessionLedger(e.ledger.settings.url, summarizer=object()),
        InvalidSettings,
    ),  # type: ignore[arg-type]
    # ------------------------------------------------- AsyncSessionLedger
    (
        "async: unknown role",
        lambda e: run(aledger(e).add_message(ALICE, "s1", "robot", "x")),
        InvalidInput,
    ),
    (
        "async: meta nan",
        lambda e: run(
            aledger(e).add_message(ALICE, "new", "user", "x", context=meta({"x": float("nan")}))
        ),
        InvalidInput,
    ),
    ("async: budget -1", lambda e: run(aledger(e).context(ALICE, "s1", -1)), InvalidInput),
    (
        "async: history limit 0",
        lambda e: run(aledger(e).history(ALICE, "s1", limit=0)),
        InvalidInput,
    ),
    (
        "async: evict idle nan",
        lambda e: run(aledger(e).evict(ALICE, "s1", idle_seconds=float("nan"))),
        InvalidInput,
    ),
    (
        "async: at_version 0",
        lambda e: run(aledger(e).session(ALICE, "s1", at_version=0)),
        InvalidInput,
    ),
    (
        "async: another tenant",
        lambda e: run(aledger(e).commit(ALICE, "s1", account_id="globex")),
        AccessDenied,
    ),
    ("async: unknown session", lambda e: run(aledger(e).diff(ALICE, "nope", 1, 2)), UnknownSession),
    # ------------------------------------------------------ SessionRegistry
    (
        "registry: ttl nan",
        lambda e: SessionRegistry(e.ledger, ALICE, ttl=float("nan")),
        InvalidSettings,
    ),
    (
        "registry: max_sessions 0",
        lambda e: SessionRegistry(e.ledger, ALICE, max_sessions=0),
        InvalidSettings,
    ),
    ("registry: principal a str", lambda e: SessionRegistry(e.ledger, "alice"), InvalidSettings),  # type: ignore[arg-type]
    (
        "registry: get unknown",
        lambda e: registry(e, lambda r: r.get("8f0e5c9d6a1b4c2d9e3f7a6b5c4d3e2f")),
        UnknownSessionError,
    ),
    (
        "registry: adopt a non-uuid",
        lambda e: registry(e, lambda r: r.get_or_adopt("not-a-uuid")),
        InvalidInput,
    ),
    (
        "registry: create with meta nan",
        lambda e: registry(e, lambda r: r.create(meta={"x": float("nan")})),
        InvalidInput,
    ),
    (
        "registry: create with huge cwd",
        lambda e: registry(e, lambda r: r.create(cwd="/" * 5000)),
        InvalidInput,
    ),
]


@pytest.fixture
def env(make_ledger: Callable[..., SessionLedger]) -> Any:
    """ALICE's s1 (an archive, two live messages), BOB's b1 and ALICE's b1; read models open."""
    ledger = make_ledger()
    for text in ("First question. About Kafka.", "First answer."):
        ledger.add_message(ALICE, "s1", "user", text)
    ledger.commit(ALICE, "s1")
    ids = [ledger.add_message(ALICE, "s1", "user", f"Live {i}.").message_id for i in range(2)]
    ledger.add_message(ALICE, "b1", "user", "another of alice's")
    ledger.add_message(BOB, "b1", "user", "bob's")
    models = ReadModels(ledger)
    models.catch_up()
    yield Env(ledger, models, ids)
    models.close()


def test_the_catalogue_is_large_and_covers_every_face() -> None:
    """At least 80 cases, reaching the ledger, the async face, read models and the registry."""
    names = [name for name, _, _ in CASES]
    assert len(CASES) >= 80 and len(set(names)) == len(names)
    prefixes = {name.split(":")[0] for name in names}
    assert {"add", "async", "models", "registry", "settings"} <= prefixes


@pytest.mark.parametrize(("name", "call", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_the_exact_error_and_records_nothing(
    env: Env, name: str, call: Callable[[Env], Any], expected: type[Exception]
) -> None:
    """The call raises exactly ``expected`` and the store is byte-for-byte unchanged."""
    before = store_state(env.ledger)
    with pytest.raises(expected) as raised:
        result = call(env)
        if isinstance(result, ReadModels | SessionLedger):  # an accepted constructor
            result.close()
    assert type(raised.value) is expected, f"{name}: {type(raised.value).__name__}: {raised.value}"
    assert str(raised.value), "the error says nothing"
    assert store_state(env.ledger) == before
