"""The bad-input catalogue: every public entry point refuses bad input the same way.

Each case calls one public method of ``SessionLedger``, ``AsyncSessionLedger``,
``ReadModels`` or ``SessionRegistry`` with one bad argument, on SQLite and on
PostgreSQL, and pins two things: the exact ``chatledger.errors`` type raised
(a subclass does not count), and that the event store is byte-for-byte what
it was (every row of events and snapshots, hence counts and heads). The CLI's
cases live in the CLI tests, which pin exit codes. The import section feeds
``import_`` crafted files (and, by hypothesis, any mutation of a line of a
real export): each is ``InvalidInput`` naming the line, and nothing recorded.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import re
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
from chatledger.adapters.chain import GENESIS, chain_hash
from support import ADMIN, ALICE, BOB, store_state

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


# ----------------------------------------------------------------- import
# Every hostile import file: InvalidInput naming the line at fault, and nothing recorded
# (no event, no snapshot, no data key). The files are crafted from a real export of an
# encrypted ledger (so that it has data key lines); "rechained" ones have every hash
# recomputed, so that the fault gets past the chain check to the deeper ones.
Records = list[Any]  # the export's lines, parsed (the header first); a str stays a raw line


@dataclass(frozen=True)
class Crafted:
    lines: list[Any]
    line: int  # the line the error must name


def _dump(records: Records) -> list[Any]:
    return [r if isinstance(r, str | bytes | int) else json.dumps(r) for r in records]


def _state_bytes(record: dict[str, Any]) -> bytes:
    if "stored" in record:
        return json.dumps(record["stored"], ensure_ascii=False, separators=(",", ":")).encode()
    return str(record["state"]).encode()


def _rechained(records: Records) -> Records:
    """``records`` with every event's hash recomputed over what it now holds (no chain key)."""
    out = copy.deepcopy(records)
    previous: dict[str, bytes] = {}
    events = [r for r in out[1:] if isinstance(r, dict)]
    for r in sorted(events, key=lambda r: (r["session_id"], r["version"])):
        digest = chain_hash(
            previous.get(r["session_id"], GENESIS), position=r["position"],
            originator_id=uuid.UUID(r["session_id"]), version=r["version"], topic=r["topic"],
            timestamp_us=r["timestamp_us"], state=_state_bytes(r),
        )  # fmt: skip
        r["hash"] = digest.hex()
        previous[r["session_id"]] = digest
    return out


class Source:
    """The parsed export the files are crafted from."""

    def __init__(self, lines: list[str]) -> None:
        self.records: Records = [json.loads(line) for line in lines]

    def index(self, test: Callable[[dict[str, Any]], bool]) -> int:
        return next(i for i, r in enumerate(self.records) if i and test(r))

    @property
    def keyed(self) -> int:  # the first line that brings a data key (with material)
        return self.index(lambda r: bool(r.get("data_key", {}).get("material")))

    @property
    def plain(self) -> int:  # the first line whose event is not sealed
        return self.index(lambda r: "sealed" not in r.get("stored", {}))

    @property
    def committed(self) -> int:
        return self.index(lambda r: r["type"] == "Committed")

    def line(self, at: int, value: Any, rechain: bool = False) -> Crafted:
        """The file with line ``at`` (0-based) replaced by ``value`` (a record or raw text)."""
        records = copy.deepcopy(self.records)
        records[at] = value
        return Crafted(_dump(_rechained(records) if rechain else records), at + 1)

    def edit(self, at: int, rechain: bool = False, **fields: Any) -> Crafted:
        """The file with fields of line ``at`` changed (``...`` removes a field)."""
        record = {**self.records[at], **fields}
        return self.line(at, {k: v for k, v in record.items() if v is not ...}, rechain)

    def stored(self, at: int, rechain: bool = True, **fields: Any) -> Crafted:
        """The file with fields of line ``at``'s stored payload changed."""
        return self.edit(at, rechain, stored={**self.records[at]["stored"], **fields})

    def key(self, at: int, **fields: Any) -> Crafted:
        """The file with fields of line ``at``'s data key changed."""
        return self.edit(at, data_key={**self.records[at]["data_key"], **fields})


DEEP = "[" * 100_000 + "]" * 100_000
B64 = base64.b64encode

IMPORTS: list[tuple[str, Callable[[Source], Crafted]]] = [
    ("not JSON", lambda s: s.line(1, "{not json")),
    ("nested 100,000 deep", lambda s: s.line(1, DEEP)),
    ("an event nested 100,000 deep", lambda s: s.line(
        1, '{"position": 1, "event": ' + '{"a":' * 100_000 + "1" + "}" * 100_001)),
    ("header: a list", lambda s: s.line(0, [1, 2])),
    ("header: null", lambda s: s.line(0, None)),
    ("header: another format", lambda s: s.line(0, {"format": "other", "format_version": 3})),
    ("header: version 99", lambda s: s.edit(0, format_version=99)),
    ("header: version true", lambda s: s.edit(0, format_version=True)),
    ("header: version as a list", lambda s: s.edit(0, format_version=[3])),
    ("event line: an array", lambda s: s.line(2, [])),
    ("event line: a string", lambda s: s.line(2, '"x"')),
    ("event line: not UTF-8 bytes", lambda s: s.line(2, b'{"x": "\xff\xfe"}')),
    ("event line: an int, not text", lambda s: s.line(2, 7)),
    ("position: a float", lambda s: s.edit(2, position=1.5)),
    ("position: true", lambda s: s.edit(2, position=True)),
    ("position: 2**70 (past BIGINT)", lambda s: s.edit(2, position=2**70)),
    ("position: 0", lambda s: s.edit(2, position=0)),
    ("position: missing", lambda s: s.edit(2, position=...)),
    ("version: a string", lambda s: s.edit(2, version="2")),
    ("version: 2**64", lambda s: s.edit(2, version=2**64)),
    ("timestamp_us: 2**70", lambda s: s.edit(2, timestamp_us=2**70)),
    ("timestamp_us: before year 1", lambda s: s.edit(2, timestamp_us=-(2**62))),
    ("timestamp_us: text", lambda s: s.edit(2, timestamp_us="noon")),
    ("session_id: a number", lambda s: s.edit(2, session_id=5)),
    ("session_id: not a UUID", lambda s: s.edit(2, session_id="zz" * 16)),
    ("topic: a lone surrogate", lambda s: s.edit(2, topic="\ud800")),
    ("topic: NUL", lambda s: s.edit(2, topic="Message\x00Added")),
    ("topic: a list", lambda s: s.edit(2, topic=["MessageAdded"])),
    ("no stored payload", lambda s: s.edit(2, stored=...)),
    ("two stored payloads", lambda s: s.edit(2, state="{}")),
    ("stored: an array", lambda s: s.edit(2, stored=[1])),
    ("stored: a lone surrogate", lambda s: s.stored(s.plain, rechain=False, key="\udc80")),
    ("stored: NaN", lambda s: s.line(s.plain, s.records[s.plain] and json.dumps(
        {**s.records[s.plain], "stored": {**s.records[s.plain]["stored"], "x": float("nan")}}))),
    ("state_base64: not base64", lambda s: s.edit(2, stored=..., state_base64="!!")),
    ("state_base64: a number", lambda s: s.edit(2, stored=..., state_base64=12)),
    ("state: a number", lambda s: s.edit(2, stored=..., state=12)),
    ("event shown: not the stored one", lambda s: s.edit(s.plain, event={
        **s.records[s.plain]["event"], "key": "another"})),
    ("event shown: an array", lambda s: s.edit(2, event=[1])),
    ("event shown: missing", lambda s: s.edit(2, event=...)),
    ("actor shown: another", lambda s: s.edit(2, actor={"account_id": "x", "user_id": "",
                                                        "agent_id": "", "role": "member",
                                                        "trace_id": ""})),
    ("hash: 2 hex digits", lambda s: s.edit(2, hash="ab")),
    ("hash: not hex", lambda s: s.edit(2, hash="zz" * 32)),
    ("hash: a number", lambda s: s.edit(2, hash=5)),
    ("hash: altered content (chain broken)", lambda s: s.stored(s.plain, rechain=False, key="x")),
    ("data_key: a string", lambda s: s.edit(s.keyed, data_key="key")),
    ("data_key: an array", lambda s: s.edit(s.keyed, data_key=[1])),
    ("data_key: material not base64", lambda s: s.key(s.keyed, material="!!!")),
    ("data_key: material of 4 bytes", lambda s: s.key(s.keyed, material="AAAAAA==")),
    ("data_key: material a number", lambda s: s.key(s.keyed, material=5)),
    ("data_key: id of 500 characters", lambda s: s.key(s.keyed, key_id="k" * 500)),
    ("data_key: id with NUL", lambda s: s.key(s.keyed, key_id="k\x00")),
    ("data_key: scope unknown", lambda s: s.key(s.keyed, scope="planet")),
    ("data_key: tenant with NUL", lambda s: s.key(s.keyed, tenant="ac\x00me")),
    ("data_key: tenant a lone surrogate", lambda s: s.key(s.keyed, tenant="\ud800")),
    ("data_key: created_at not a time", lambda s: s.key(s.keyed, created_at="soon")),
    ("data_key: destroyed yet with material",
     lambda s: s.key(s.keyed, destroyed_at="2026-01-01T00:00:00Z")),
    ("data_key: another session's", lambda s: s.key(s.keyed, session_id=str(uuid.uuid4()))),
    ("data_key: on an unsealed event", lambda s: s.edit(
        s.plain, data_key=s.records[s.keyed]["data_key"])),
    ("no data key lines", lambda s: Crafted(
        _dump([{k: v for k, v in r.items() if k != "data_key"} for r in s.records]), s.keyed + 1)),
    ("rechained: an unknown topic", lambda s: s.edit(s.plain, True, topic="os:system")),
    ("rechained: sealed text not base64", lambda s: s.stored(
        s.keyed, sealed={**s.records[s.keyed]["stored"]["sealed"], "c": "@@@@"})),
    ("rechained: sealed text of 3 bytes", lambda s: s.stored(
        s.keyed, sealed={**s.records[s.keyed]["stored"]["sealed"], "c": "AAAA"})),
    ("rechained: a key that opens nothing", lambda s: Crafted(_dump(_rechained([
        *s.records[:s.keyed], {**s.records[s.keyed], "data_key": {
            **s.records[s.keyed]["data_key"], "material": B64(bytes(32)).decode()}},
        *s.records[s.keyed + 1:]])), s.keyed + 1)),
    ("rechained: an actor of the wrong shape", lambda s: s.stored(s.keyed, a=[1, [2]])),
    ("rechained: archive ids a string", lambda s: s.stored(s.committed, archive={
        **s.records[s.committed]["stored"]["archive"], "message_ids": 7})),
    ("rechained: archive ids a bad run", lambda s: s.stored(s.committed, archive={
        **s.records[s.committed]["stored"]["archive"], "message_ids": [[2, -5]]})),
    ("rechained: a session moved to another account", lambda s: s.stored(
        s.index(lambda r: r["type"] == "Started" and r["tenant"] == "acme"), tenant="globex")),
]  # fmt: skip


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Source:
    """An export of an encrypted ledger: ALICE's s1 (committed, with state) and s2, BOB's b1."""
    ledger = SessionLedger(
        f"sqlite:///{tmp_path_factory.mktemp('export') / 'source.db'}", encryption=True
    )
    try:
        ledger.add_message(ALICE, "s1", "user", "First question. About Kafka.")
        ledger.add_items(ALICE, "s1", [{"role": "assistant", "content": "An answer."}],
                         state={"step": 1})  # fmt: skip
        ledger.commit(ALICE, "s1")
        ledger.add_message(ALICE, "s1", "user", "Live question.")
        ledger.add_message(ALICE, "s2", "user", "Another session.")
        ledger.add_message(BOB, "b1", "user", "bob's", shared_state={"app:x": {"n": 1}})
        return Source(list(ledger.export(ADMIN)))
    finally:
        ledger.close()


def test_the_import_catalogue_is_large() -> None:
    """At least 30 crafted import files, each named once."""
    names = [name for name, _ in IMPORTS]
    assert len(IMPORTS) >= 30 and len(set(names)) == len(names)


def _key_rows(ledger: SessionLedger) -> list[Any]:
    return ledger.core.store.keyring.store.records()


@pytest.mark.parametrize(("name", "craft"), IMPORTS, ids=[c[0] for c in IMPORTS])
def test_a_hostile_import_is_invalid_input_naming_the_line_and_records_nothing(
    make_ledger: Callable[..., SessionLedger],
    source: Source,
    name: str,
    craft: Callable[[Source], Crafted],
) -> None:
    """The import raises exactly InvalidInput, naming the crafted line; the empty ledger stays
    empty -- no event, no snapshot, no data key."""
    ledger = make_ledger()
    crafted = craft(source)
    before = store_state(ledger)
    with pytest.raises(InvalidInput) as raised:
        ledger.import_(crafted.lines)
    assert type(raised.value) is InvalidInput, f"{name}: {raised.value}"
    assert f"Line {crafted.line}" in str(raised.value), f"{name}: {raised.value}"
    assert store_state(ledger) == before and _key_rows(ledger) == []
    assert ledger.import_(_dump(source.records)).events == len(source.records) - 1  # still empty


# A mutation of one line of a real export: a JSON value somewhere in it replaced, a field
# dropped or added, or a character of its text changed, dropped or put in.
JSON_VALUE = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
              st.floats(allow_nan=False), st.text(max_size=12)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6,
)  # fmt: skip


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            found += _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _paths(v, (*path, i))
    return found


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replaced(value[head], rest, new)}
    copied = list(value)
    copied[head] = _replaced(value[head], rest, new)
    return copied


@st.composite
def mutated_exports(draw: st.DrawFn, records: Records) -> tuple[list[str], int]:
    at = draw(st.integers(0, len(records) - 1))
    text = json.dumps(records[at], ensure_ascii=False)
    kind = draw(st.sampled_from(["value", "drop", "add", "text"]))
    if kind == "text":
        spot = draw(st.integers(0, len(text)))
        piece = draw(st.text(min_size=0, max_size=3))
        cut = draw(st.integers(0, 3))
        mutated = text[:spot] + piece + text[spot + cut :]
    else:
        paths = _paths(records[at])
        path = draw(st.sampled_from(paths))
        if kind == "value":
            new = _replaced(records[at], path, draw(JSON_VALUE))
        elif kind == "drop" and path:
            parent = path[:-1]
            container = records[at]
            for step in parent:
                container = container[step]
            trimmed = (
                {k: v for k, v in container.items() if k != path[-1]}
                if isinstance(container, dict)
                else [v for i, v in enumerate(container) if i != path[-1]]
            )
            new = _replaced(records[at], parent, trimmed)
        else:
            new = (
                _replaced(
                    records[at], (), {**records[at], draw(st.text(max_size=6)): draw(JSON_VALUE)}
                )
                if isinstance(records[at], dict)
                else records[at]
            )
        mutated = json.dumps(new, ensure_ascii=False)
    lines = _dump(records)
    lines[at] = mutated
    return lines, at + 1


@settings(
    max_examples=120, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)  # fmt: skip
@given(data=st.data())
def test_any_mutated_export_line_imports_or_is_invalid_input_and_records_nothing(
    source: Source, data: st.DataObject, backend: str, database_url: str, tmp_path: Path
) -> None:
    """One line of a real export mutated anyhow (rechained or not): the import either
    succeeds -- and then the ledger verifies deep and every session loads -- or raises
    exactly InvalidInput naming a line of the file, leaving the ledger empty."""
    rechain = data.draw(st.booleans())
    records = _rechained(source.records) if rechain else source.records
    lines, _ = data.draw(mutated_exports(records))
    # Each example imports into an empty ledger: on SQLite a file of its own (an in-memory
    # ledger cannot read a data key while verify streams its rows on its one connection),
    # on PostgreSQL the test's schema, emptied afterwards.
    url = f"sqlite:///{tmp_path / uuid.uuid4().hex}.db" if backend == "sqlite" else database_url
    with SessionLedger(url) as ledger:
        try:
            _import_mutated(ledger, lines)
        finally:
            if backend == "postgres":
                with ledger.core.store.event_recorder.engine.begin() as connection:
                    connection.exec_driver_sql(
                        "TRUNCATE chatledger_events, chatledger_snapshots, chatledger_keys"
                    )


def _import_mutated(ledger: SessionLedger, lines: list[Any]) -> None:
    try:
        result = ledger.import_(lines)
    except InvalidInput as error:
        assert type(error) is InvalidInput
        assert re.search(r"\bLine (\d+)", str(error)), str(error)
        assert store_state(ledger).events == 0 and _key_rows(ledger) == []
        return
    assert result.events >= 1
    assert ledger.verify(ADMIN, deep=True).ok
    starts = [json.loads(line) for line in list(ledger.export(ADMIN))[1:]]
    for start in (r for r in starts if r["version"] == 1):
        tenant, key = start["tenant"], start["key"]
        if key.startswith("~state:"):  # a shared state scope
            ledger.shared_state(ADMIN, key.removeprefix("~state:"), account_id=tenant)
            continue
        assert ledger.history(ADMIN, key, account_id=tenant)
        with contextlib.suppress(UnknownSession):  # (deleted: its history stays)
            ledger.session(ADMIN, key, account_id=tenant)
