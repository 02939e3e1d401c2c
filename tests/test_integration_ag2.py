"""``LedgerStorage``: AG2's history ``Storage`` on SQLite and PostgreSQL.

Pinned here: events of every kind come back equal; their text reaches the
ledger (tokens, ``context()``); ``set_history`` is recorded as the changed
tail, never a wipe; ``drop_history`` deletes (erases, with encryption); AG2's
own ``SessionStore`` keeps a retained stream across a restart; a real agent
turn lands in the ledger with time travel and ``verify``. AG2's own session
tests run against this class in ``tests/integrations/run_framework_suites.py``.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest

from chatledger import InvalidInput, Principal, SessionLedger
from support import ALICE, BOB

if os.environ.get("CHATLEDGER_REQUIRE_INTEGRATIONS", "") in ("", "0"):
    pytest.importorskip("ag2.acp", reason="ag2 is not installed: pip install 'chatledger[ag2]'")

from ag2 import Agent
from ag2.acp.sessions import SessionStore
from ag2.events import (
    BaseEvent,
    BinaryInput,
    HumanMessage,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextInput,
    ToolCallEvent,
    ToolCallsEvent,
    ToolResult,
    ToolResultEvent,
    ToolResultsEvent,
    UnknownEvent,
    Usage,
    UsageEvent,
)
from ag2.history import Storage
from ag2.stream import MemoryStream
from ag2.testing import TestConfig

from chatledger.integrations.ag2 import LedgerStorage, event_item, item_event, stream_key


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


@pytest.fixture
def storage(ledger: SessionLedger) -> LedgerStorage:
    return LedgerStorage(ledger, principal=ALICE)


def conversation() -> list[BaseEvent]:
    call = ToolCallEvent(id="c1", name="lookup", arguments='{"order": 7}')
    result = ToolResultEvent(parent_id="c1", name="lookup", result=ToolResult(TextInput("ok")))
    return [
        ModelRequest([TextInput("Where is order 7?")]),
        ModelResponse(message=ModelMessage("Checking."), tool_calls=ToolCallsEvent([call])),
        ToolResultsEvent([result]),
        ModelResponse(message=ModelMessage("It shipped.")),
    ]


def saved(storage: LedgerStorage, stream: MemoryStream, events: list[BaseEvent]) -> None:
    """``events`` saved one by one, the way a stream's subscriber saves them."""

    async def save() -> None:
        for event in events:
            await storage.save_event(event, _Context(stream))

    run(save())


class _Context:
    """The one part of AG2's ``Context`` a storage reads: ``context.stream``."""

    def __init__(self, stream: MemoryStream) -> None:
        self.stream = stream


def test_it_is_an_ag2_storage(storage: LedgerStorage) -> None:
    """LedgerStorage is an ``ag2.history.Storage`` and starts with no history."""
    assert Storage in LedgerStorage.__mro__  # a subclass of the protocol, as MemoryStorage is
    assert run(storage.get_history(uuid.uuid4())) == []


def test_events_of_every_kind_come_back_equal(storage: LedgerStorage) -> None:
    """Requests, responses with tool calls, tool results, human messages, telemetry and
    binary inputs are read back equal to what was saved, in order."""
    stream = MemoryStream(storage)
    events = [
        *conversation(),
        HumanMessage("Thanks"),
        UsageEvent(usage=Usage(prompt_tokens=12, completion_tokens=3)),
        ModelRequest([BinaryInput(b"\x00\xff", media_type="image/png")]),
    ]
    saved(storage, stream, events)
    assert run(storage.get_history(stream.id)) == events


def test_event_text_reaches_the_ledger(storage: LedgerStorage, ledger: SessionLedger) -> None:
    """Each event's role and text (tool calls as name(args)) feed tokens and context()."""
    stream = MemoryStream(storage)
    saved(storage, stream, conversation())
    key = stream_key(stream.id)
    assert [(m.role, m.content) for m in ledger.items(ALICE, key)] == [
        ("user", "Where is order 7?"),
        ("assistant", 'Checking.\nlookup({"order": 7})'),
        ("tool", "ok"),
        ("assistant", "It shipped."),
    ]
    prompt = ledger.context(ALICE, key)
    assert prompt.tokens > 0 and "It shipped." in [m.content for m in prompt.messages]


def test_set_history_records_the_changed_tail(
    storage: LedgerStorage, ledger: SessionLedger
) -> None:
    """A repair replaces only the tail after the unchanged prefix (one TailReplaced); the
    replaced events stay readable at the earlier version."""
    stream = MemoryStream(storage)
    saved(storage, stream, conversation())
    key = stream_key(stream.id)
    before = ledger.session(ALICE, key).version
    repaired = [*conversation()[:3], ModelResponse(message=ModelMessage("Shipped Monday."))]
    run(storage.set_history(stream.id, repaired))
    assert run(storage.get_history(stream.id)) == repaired
    last = ledger.history(ALICE, key)[-1]
    assert last.type == "TailReplaced" and last.version == before + 1
    old = ledger.session(ALICE, key, at_version=before).buffer
    assert old[-1].content == "It shipped."


def test_set_history_removes_appends_or_records_nothing(
    storage: LedgerStorage, ledger: SessionLedger
) -> None:
    """A shorter history is an ItemsRemoved, a longer one appends, the same one (AG2
    equality: a new created_at is the same event) records nothing."""
    stream = MemoryStream(storage)
    key = stream_key(stream.id)
    run(storage.set_history(stream.id, conversation()))
    run(storage.set_history(stream.id, conversation()))  # re-created events: equal
    assert [e.type for e in ledger.history(ALICE, key)] == ["Started", *["MessageAdded"] * 4]
    run(storage.set_history(stream.id, conversation()[:1]))
    assert ledger.history(ALICE, key)[-1].type == "ItemsRemoved"
    run(storage.set_history(stream.id, []))
    assert run(storage.get_history(stream.id)) == []
    run(storage.set_history(stream.id, conversation()[:2]))
    assert run(storage.get_history(stream.id)) == conversation()[:2]
    assert len(ledger.history(ALICE, key)) == 9  # started, 4 added, 2 removals, 2 added


def test_drop_history_deletes_and_a_new_write_starts_afresh(
    storage: LedgerStorage, ledger: SessionLedger
) -> None:
    """drop_history records Deleted (history kept); the stream then reads empty and a new
    save starts it afresh."""
    stream = MemoryStream(storage)
    saved(storage, stream, conversation())
    run(storage.drop_history(stream.id))
    run(storage.drop_history(stream.id))  # nothing left to drop: no error
    assert run(storage.get_history(stream.id)) == []
    key = stream_key(stream.id)
    assert ledger.history(ALICE, key)[-1].type == "Deleted"
    saved(storage, stream, [HumanMessage("again")])
    assert run(storage.get_history(stream.id)) == [HumanMessage("again")]


def test_drop_history_erases_with_encryption(make_ledger: Any) -> None:
    """On a ledger with encryption, drop_history erases the session: nothing readable is
    left, the chain still verifies."""
    ledger = make_ledger(encryption=True)
    storage = LedgerStorage(ledger, principal=ALICE)
    stream = MemoryStream(storage)
    saved(storage, stream, conversation())
    run(storage.drop_history(stream.id))
    key = stream_key(stream.id)
    assert run(storage.get_history(stream.id)) == []
    assert ledger.history(ALICE, key)[-1].type == "Erased"
    assert ledger.verify(ALICE, key).ok


def test_session_store_history_survives_a_restart(database_url: str) -> None:
    """AG2's SessionStore with retain_history=True on LedgerStorage: a second store (a new
    process's) adopts the stream by id and reads the history back."""
    first = LedgerStorage(database_url, principal=ALICE)

    async def before_restart() -> uuid.UUID:
        store = SessionStore(storage=first, retain_history=True)
        session = await store.create(cwd="/work")
        await store.stream(session).history.replace(conversation())
        await store.aclose()  # the process goes away; the history is retained
        return session.stream_id

    stream_id = run(before_restart())
    first.close()
    second = LedgerStorage(database_url, principal=ALICE)

    async def after_restart() -> list[BaseEvent]:
        store = SessionStore(storage=second)
        session, adopted = await store.get_or_adopt(stream_id)
        assert adopted
        return list(await store.stream(session).history.get_events())

    try:
        assert run(after_restart()) == conversation()
    finally:
        second.close()


def test_an_agent_turn_is_kept_with_time_travel(
    storage: LedgerStorage, ledger: SessionLedger
) -> None:
    """A scripted AG2 agent's two turns land in the ledger: the context at the first turn's
    end is the first turn, and the chain verifies."""

    def lookup(order: int) -> str:
        """Look an order up."""
        return f"order {order} shipped"

    agent = Agent(
        "helper",
        config=TestConfig(ToolCallEvent(name="lookup", arguments='{"order": 7}'), "Shipped.", "7."),
        tools=[lookup],
    )
    stream = MemoryStream(storage)

    async def chat() -> tuple[str | None, str | None]:
        first = await agent.ask("Where is order 7?", stream=stream)
        second = await first.ask("Which order?")
        return await first.content(), await second.content()

    assert run(chat()) == ("Shipped.", "7.")
    key = stream_key(stream.id)
    versions = [e.version for e in ledger.history(ALICE, key)]
    version = next(
        v for v in versions if ledger.session(ALICE, key, at_version=v).buffer[-1:]
        and ledger.session(ALICE, key, at_version=v).buffer[-1].content == "Shipped."
    )  # fmt: skip
    then = ledger.session(ALICE, key, at_version=version).buffer
    assert then[0].content == "Where is order 7?" and then[-1].content == "Shipped."
    assert "order 7 shipped" in [m.content for m in then]
    assert ledger.verify(ALICE, key).ok


def test_streams_are_kept_per_tenant(ledger: SessionLedger) -> None:
    """The same stream id in two accounts names two sessions."""
    mine, theirs = LedgerStorage(ledger, principal=ALICE), LedgerStorage(ledger, principal=BOB)
    stream = MemoryStream(mine)
    saved(mine, stream, [HumanMessage("mine")])
    assert run(theirs.get_history(stream.id)) == []


def test_an_event_of_a_class_that_is_gone_comes_back_unknown() -> None:
    """An item whose event class cannot be imported reads as AG2's UnknownEvent with its data."""
    item = event_item(HumanMessage("hi"))
    item["ag2"]["module"] = "no_such_module"
    back = item_event(item)
    assert isinstance(back, UnknownEvent)
    assert back.type_name == "no_such_module.HumanMessage" and back.data["content"] == "hi"


def test_a_non_json_event_is_refused_and_nothing_recorded(
    storage: LedgerStorage, ledger: SessionLedger
) -> None:
    """An event holding a value that is not JSON raises InvalidInput and records nothing."""
    stream = MemoryStream(storage)
    with pytest.raises(InvalidInput, match="not JSON"):
        saved(storage, stream, [HumanMessage(content="x", metadata={"f": object()})])
    assert run(storage.get_history(stream.id)) == []
    assert ledger.working_set(ALICE) == []


def test_bad_arguments_are_invalid_input(ledger: SessionLedger) -> None:
    """A ledger of the wrong type, or a principal that is not one, is InvalidInput."""
    with pytest.raises(InvalidInput, match="ledger_or_url"):
        LedgerStorage(42, principal=ALICE)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="principal"):
        LedgerStorage(ledger, principal="alice")  # type: ignore[arg-type]


def test_a_url_opens_a_ledger_that_close_closes(database_url: str) -> None:
    """LedgerStorage(url) opens its own ledger; close() closes it."""
    storage = LedgerStorage(database_url, principal=Principal(account_id="acme", user_id="u"))
    stream = MemoryStream(storage)
    saved(storage, stream, [HumanMessage("hi")])
    storage.close()
    with SessionLedger(database_url) as reopened:
        assert [m.content for m in reopened.items(storage.principal, stream_key(stream.id))] == [
            "hi"
        ]
