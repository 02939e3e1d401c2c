"""The append hot path builds exactly what the validated path builds.

``add_message`` and ``add_items`` build their messages, events and results without
a second pydantic validation of values checked a moment before; a plain text
message's payload is written as text, and an item's size is bounded before it is
measured. These tests hold each shortcut equal to the validated construction, the
payload to the canonical JSON every row stores, and the size limit to the byte.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from uuid import uuid4

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatledger import AddedMessage, Principal, SessionLedger
from chatledger.adapters.codec import decode, encode, json_text
from chatledger.domain.events import MessageAdded
from chatledger.domain.failures import InvalidInput
from chatledger.domain.items import describe_item, described
from chatledger.domain.limits import MAX_JSON_DEPTH, Limits, check_json
from chatledger.domain.session import Session
from chatledger.domain.timestamps import to_micros
from chatledger.domain.values import Message, assemble
from chatledger.service.item_writes import build_items
from chatledger.service.messages import build_message

T0 = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
# Any valid text: quotes, backslashes, control characters, non-ASCII, astral planes.
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)
principals = st.builds(
    Principal,
    account_id=st.sampled_from(["acme", 'q"uote', "ünï"]),
    user_id=st.sampled_from(["", "u", "\\"]),
    agent_id=st.sampled_from(["", "bot"]),
    role=st.sampled_from(["member", "admin"]),
    trace_id=st.sampled_from(["", "t-1"]),
)
roles = st.sampled_from(["system", "developer", "user", "assistant", "tool"])
ITEMS: list[dict[str, object]] = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Where?"}]},
    {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"id": 1}'},
    {"type": "function_call_output", "call_id": "c1", "output": '{"status": "shipped"}'},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Ok."}]},
    {"role": "model", "parts": [{"text": "Hi"}, {"function_call": {"name": "f", "args": {}}}]},
    {"unknown": ["shape", 1, 2.5, None, True]},
]


def message_added(message: Message, when: datetime, actor: Principal | None = None) -> MessageAdded:
    """The second event of a new session: ``message`` added at ``when``."""
    return MessageAdded(
        originator_id=uuid4(), originator_version=2, timestamp=when,
        actor=actor or Principal(account_id="acme"), message=message,
    )  # fmt: skip


def read_back(event: MessageAdded, topic: str, state: bytes) -> MessageAdded:
    """The event the stored row of ``event`` decodes to."""
    back: MessageAdded = decode(topic, state, event.originator_id, 2, to_micros(event.timestamp))
    return back


def canonical(payload: bytes) -> bytes:
    """The JSON every stored payload is: ``json.dumps`` of its object, compact, not ASCII."""
    return json.dumps(json.loads(payload), ensure_ascii=False, separators=(",", ":")).encode()


@settings(max_examples=300, deadline=None)
@given(texts, roles, principals, st.sampled_from([T0, T0 + timedelta(seconds=3)]))
def test_a_plain_message_payload_is_the_canonical_json(
    content: str, role: str, actor: Principal, when: datetime
) -> None:
    """A text message's payload, written as text, is byte for byte the canonical JSON."""
    message = Message(id=uuid4().hex, role=role, content=content, created_at=when)  # type: ignore[arg-type]
    event = message_added(message, when, actor)
    topic, state = encode(event)
    assert state == canonical(state)
    assert json.loads(state) == {
        "a": json.loads(state)["a"], "i": message.id, "r": role, "c": content,
    }  # fmt: skip
    assert read_back(event, topic, state) == event


def test_the_actor_is_written_for_each_principal_not_the_last_one() -> None:
    """Two principals in turn each get their own actor list (the remembered one is per object)."""
    first = Principal(account_id="acme", user_id="u", agent_id="a")
    second = Principal(account_id="acme", user_id="v", role="admin")
    payloads = []
    for actor in (first, second, first):
        message = Message(id=uuid4().hex, role="user", content="hi", created_at=T0)
        event = message_added(message, T0, actor)
        payloads.append(json.loads(encode(event)[1])["a"])
    assert payloads == [["acme", "u", "a"], ["acme", "v", "", "admin"], ["acme", "u", "a"]]


@settings(max_examples=200, deadline=None)
@given(texts, roles)
def test_build_message_gives_the_validated_message(content: str, role: str) -> None:
    """The message built without a second validation (no id: its session names it) equals,
    dumps and prints, once named, as the validated one with the same values."""
    unnamed = build_message(Limits(), T0, role, content)
    assert unnamed.id == ""
    built = unnamed.named("m-1")
    validated = Message(id="m-1", role=role, content=content, created_at=T0)  # type: ignore[arg-type]
    assert built == validated
    assert built.model_dump() == validated.model_dump()
    assert repr(built) == repr(validated)
    assert built.model_fields_set == {
        "id", "role", "content", "created_at", "name", "tool_call", "item",
    }  # fmt: skip


def test_add_message_records_the_validated_event_and_result() -> None:
    """Session.add_message queues the event MessageAdded(...) would be, and the ledger
    returns the result AddedMessage(...) would be."""
    actor = Principal(account_id="acme", user_id="u")
    session = Session.start(tenant="acme", key="k", actor=actor, timestamp=T0)
    message = Message(id="m1", role="user", content="hello", created_at=T0)
    session.add_message(message, actor=actor, timestamp=T0)
    event = session.collect_events()[-1]
    validated = MessageAdded(
        originator_id=session.id, originator_version=2, timestamp=T0, actor=actor, message=message
    )
    assert event == validated and repr(event) == repr(validated)
    assert event.model_dump() == validated.model_dump()
    with SessionLedger("sqlite://") as ledger:
        added = ledger.add_message(actor, "k", "user", "hello")
        assert added == AddedMessage(
            message_id=added.message_id, version=2, pending_tokens=1, position=2
        )


def test_an_aware_non_utc_clock_still_writes_the_general_form() -> None:
    """A clock in another zone takes the general path: the payload names the time."""
    when = T0.astimezone(timezone(timedelta(hours=2)))
    message = Message(id="m1", role="user", content="hi", created_at=when)
    event = message_added(message, when)
    topic, state = encode(event)
    assert "ts" in json.loads(state)
    assert read_back(event, topic, state) == event


def test_assemble_keeps_the_given_values_and_marks_them_set() -> None:
    """assemble() builds a model holding exactly the values given, all marked as set."""
    built = assemble(AddedMessage, {
        "message_id": "m", "version": 3, "pending_tokens": 4, "position": 9,
    })  # fmt: skip
    assert built == AddedMessage(message_id="m", version=3, pending_tokens=4, position=9)
    assert built.model_fields_set == {"message_id", "version", "pending_tokens", "position"}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_check_json_refuses_exactly_what_is_over_the_limit(value: object) -> None:
    """check_json's quick pass never lets a value over max_bytes through, nor refuses one
    that fits: the limit holds to the byte."""
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    check_json(value, "value", max_bytes=size)
    with pytest.raises(InvalidInput, match=f"takes {size} bytes"):
        check_json(value, "value", max_bytes=size - 1)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(ITEMS))
def test_build_items_gives_the_validated_messages(item: dict[str, object]) -> None:
    """An item's entry, built without a second validation (and without an id, which its
    session gives it), equals the validated one once named."""
    (unnamed,) = build_items(Limits(), T0, [item])
    assert unnamed.id == ""
    built = unnamed.named("m-1")
    validated = Message(
        id="m-1", role=built.role, content=built.content, created_at=T0, name=built.name,
        item=dict(item),
    )  # fmt: skip
    assert built == validated and repr(built) == repr(validated)
    assert (built.role, built.content, built.name) == describe_item(item)


def test_a_message_time_in_another_zone_is_kept_even_at_the_same_instant() -> None:
    """A message created at the event's instant but in another zone keeps its zone: the
    payload names it, and the row reads back with it."""
    elsewhere = T0.astimezone(timezone(timedelta(hours=-5)))
    message = Message(id="m1", role="user", content="hi", created_at=elsewhere)
    event = message_added(message, T0)
    topic, state = encode(event)
    assert json.loads(state)["at"] == elsewhere.isoformat()
    back = read_back(event, topic, state)
    assert back.message.created_at.utcoffset() == timedelta(hours=-5)


def item_event(item: dict[str, object], *, name: str | None = None) -> MessageAdded:
    """A ``MessageAdded`` of ``item`` as ``build_items`` makes it (or with another name),
    with an id of its own."""
    (built,) = build_items(Limits(), T0, [item])
    built = built.named("m-1")
    if name is not None:
        built = built.model_copy(update={"name": name})
    return message_added(built, T0)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(ITEMS) | st.dictionaries(texts, json_values, max_size=4),
    st.sampled_from([None, "renamed"]),
)
def test_an_item_payload_is_the_canonical_json(item: dict[str, object], name: str | None) -> None:
    """An item's payload, written as text, is byte for byte the canonical JSON; the item's
    own text is left out exactly when it gives the message's role, text and name back."""
    event = item_event(item, name=name)
    topic, state = encode(event)
    assert state == canonical(state)
    stored = json.loads(state)
    m = event.message
    derived = describe_item(item) == (m.role, m.content, m.name)
    assert stored["x"] == item and ("r" not in stored) == derived
    assert read_back(event, topic, state) == event


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_the_payload_writer_writes_what_json_dumps_writes(value: object) -> None:
    """The codec's one-off C encoder writes exactly ``json.dumps``'s compact text."""
    assert json_text(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def test_the_payload_writer_refuses_what_json_cannot_hold() -> None:
    """Non-finite numbers and nesting too deep are ValueError, other types TypeError."""
    with pytest.raises(ValueError, match="Out of range float"):
        json_text({"a": [float("nan")]})
    with pytest.raises(TypeError, match="Object of type object"):
        json_text({"a": object()})
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValueError, match="nested too deeply"):
        json_text(deep)


def test_an_item_is_described_again_when_it_is_another_object() -> None:
    """``described`` remembers the last item by identity: an equal copy, or another
    item, is described afresh."""
    first = {"type": "message", "role": "user", "content": "one"}
    assert described(first) == describe_item(first)
    assert described(first) is described(first)
    second = {"type": "message", "role": "user", "content": "two"}
    assert described(second) == ("user", "two", None)
    copy = dict(first)
    assert described(copy) == ("user", "one", None) and described(copy) is not None


def test_a_string_below_the_depth_limit_is_still_refused() -> None:
    """A string nested one level past ``MAX_JSON_DEPTH`` is refused like any deeper node
    (the quick pass bounds strings without a call only above that level)."""
    value: object = "leaf"
    for _ in range(MAX_JSON_DEPTH + 1):
        value = [value]
    with pytest.raises(InvalidInput, match="nested more than"):
        check_json(value, "value", max_bytes=10_000)
    shallower: object = "leaf"
    for _ in range(MAX_JSON_DEPTH):
        shallower = [shallower]
    check_json(shallower, "value", max_bytes=10_000)
