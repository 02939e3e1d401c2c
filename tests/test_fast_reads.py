"""The fast read paths hold the validated ones equal, for every stored form.

- ``message_added_of_row`` (``verify(deep=True)`` and imports) decodes a format-2
  ``MessageAdded`` row into exactly the validated event, or declines (None) -- and
  declines every row the validated decode refuses, so a deep check or an import still
  refuses what it refused.
- ``stored_run`` (loads) gives a run whose messages, ids, tokens and user turns are the
  validated ones, plain, sealed and erased alike; its one-pass parse of plain text runs
  gives what the general parse gives, for payloads edited into any shape;
  ``texts_tokens`` is ``estimate_tokens`` summed, ``tokens_of_texts`` each one.
- ``Session.replay_run`` keeps a run unbuilt and leaves the state of replaying it one by
  one, and dropping its messages (a commit) the state of dropping built ones;
  ``Session.newest_within`` (a run's newest that fit, counted before any is built) keeps
  what the message-by-message walk keeps, for any budget; a cold ``context()`` equals a
  warm one, erased content reading ``[erased]``.
- ``checked_messages`` (``verify(deep=True)``) reads a run of message rows into exactly
  what ``message_added_of_row`` gives each row, or declines the run where it declines a
  row; ``message_run_facts`` gives, column by column, each row's ``stored_facts`` (slim
  or whole); ``buffer_json`` writes a checked run's messages, none built, as the JSON
  pydantic writes of them (what a snapshot's buffer holds).
- ``verify(deep=True)`` applies runs of messages at once and still reports the row whose
  fact was doctored, whose payload was changed into another valid one, or which cannot be
  applied, in the order the rows come.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter
from test_audit import REPLAYED, _execute, _mutate_column, _rechained, _rows, _state_bytes
from test_stored_form import T0, message_added, places, principals

from chatledger import Principal, SessionLedger
from chatledger.adapters import recorders
from chatledger.adapters.codec import (
    BuiltMessages,
    StoredMessages,
    buffer_json,
    checked_messages,
    decode,
    decode_payloads,
    encode,
    message_added_of_row,
    parsed_run,
    stored_run,
)
from chatledger.adapters.recorders import StreamColumns
from chatledger.adapters.sealing import open_compact_message, row_aad
from chatledger.domain.events import MessageAdded
from chatledger.domain.identity import message_ids_at
from chatledger.domain.message_runs import newest_fitting, newest_that_fit
from chatledger.domain.session import LIVE, Session, SessionCounters
from chatledger.domain.timestamps import from_micros, from_micros_all, to_micros
from chatledger.domain.values import (
    ERASED,
    Message,
    assemble_all,
    estimate_tokens,
    texts_tokens,
    tokens_of_texts,
)
from chatledger.errors import StoreUnavailable
from chatledger.projections.facts import message_run_facts, slim_facts, stored_facts
from support import ADMIN, ALICE

KEY_ID = "key-1"
T0_SID = uuid4()
CIPHER = AESGCM(os.urandom(32))


def _keys(key_id: str) -> AESGCM | None:
    return CIPHER if key_id == KEY_ID else None


def _no_keys(key_id: str) -> AESGCM | None:
    return None


def _row(event: MessageAdded, sealed: bool = False) -> tuple[bytes, int]:
    state = encode(event, (KEY_ID, CIPHER) if sealed else None)[1]
    return state, to_micros(event.timestamp)


def _anywhere(count: int) -> list[str]:
    """The ids of ``count`` places of T0_SID (for rows that name their own ids)."""
    return message_ids_at(T0_SID, range(1, count + 1))


def _validated(event: MessageAdded, state: bytes, ciphers: Any = _keys) -> Any:
    return decode("MessageAdded", state, event.originator_id, event.originator_version,
                  to_micros(event.timestamp), ciphers)  # fmt: skip


def _same(fast: Any, slow: Any) -> None:
    """Equal, and dumped and printed alike."""
    assert fast == slow
    assert fast.model_dump() == slow.model_dump()
    assert repr(fast) == repr(slow)


@settings(max_examples=300, deadline=None)
@given(message_added())
def test_the_fast_decode_of_a_message_row_equals_the_validated_one(event: MessageAdded) -> None:
    """Every MessageAdded row decodes fast into the validated event, or is left to it (only
    one with a timestamp of its own: not UTC, or a message time not the event's)."""
    state, stamp = _row(event)
    fast = message_added_of_row(state, event.originator_id, event.originator_version, stamp)
    slow = _validated(event, state)
    if fast is None:
        payload = json.loads(state)
        assert "at" in payload or "ts" in payload
    else:
        _same(fast, slow)


@settings(max_examples=100, deadline=None)
@given(message_added())
def test_sealed_message_rows_are_left_to_the_validated_decode(event: MessageAdded) -> None:
    """A sealed row (opened, or erased without its key) is never decoded by the fast path."""
    state, stamp = _row(event, sealed=True)
    assert message_added_of_row(state, event.originator_id, event.originator_version, stamp) is None


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-2, 300)
    | st.floats(allow_nan=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=5,
)
ODD_VALUES = (
    JSON_VALUES
    | st.sampled_from(["", "x" * 129, "x" * 128, "robot", "user", "\x07", "a\nb", "member"])
    | st.lists(st.sampled_from(["acme", "", "u", "admin", "\x00", "x" * 257, 1]), max_size=6)
    | st.fixed_dictionaries(
        {"tool_name": st.sampled_from(["s", "", "\x01"])},
        optional={
            "status": st.sampled_from(["success", "error", "bad", None]),
            "prompt_tokens": st.sampled_from([0, 3, -1, 2.0, 2.5, True, "3"]),
            "extra": st.just(1),
        },
    )
)


EDIT = st.tuples(
    st.sampled_from(["a", "i", "r", "c", "n", "x", "t", "k", "at", "z"]), st.none() | ODD_VALUES
)
"""A key of a message payload and the value it is edited to (None: dropped, if asked)."""


def _edited(state: bytes, edits: list[tuple[str, Any]], drop: bool) -> bytes:
    """The payload with ``edits`` made (a None value drops its key when ``drop``)."""
    payload = json.loads(state)
    for key, value in edits:
        if drop and value is None:
            payload.pop(key, None)
        else:
            payload[key] = value
    return json.dumps(payload, ensure_ascii=False).encode()


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message_added(), st.lists(EDIT, min_size=1, max_size=3), st.booleans())
def test_the_fast_decode_declines_every_row_the_validated_decode_refuses(
    event: MessageAdded, edits: list[tuple[str, Any]], drop: bool
) -> None:
    """A row edited into any shape: where validation refuses it, the fast decode declines
    (so verify(deep=True) and imports still report it); where it accepts, the two agree."""
    state, stamp = _row(event)
    edited = _edited(state, edits, drop)
    fast = message_added_of_row(edited, event.originator_id, event.originator_version, stamp)
    try:
        slow = _validated(event, edited)
    except (KeyError, TypeError, ValueError):
        assert fast is None
        return
    if fast is not None:
        _same(fast, slow)


@st.composite
def plain_runs(draw: st.DrawFn) -> list[MessageAdded]:
    """Consecutive MessageAdded events of one session in the shapes ``checked_messages``
    takes: no framework item, each message's time its event's, in UTC."""
    events = draw(st.lists(message_added(), min_size=1, max_size=8))
    when = T0 + timedelta(seconds=draw(st.integers(0, 2)))
    return [
        e.model_copy(
            update={
                "originator_version": 10 + n,
                "timestamp": when,
                "message": e.message.model_copy(update={"item": None, "created_at": when}),
            }
        )
        for n, e in enumerate(events)
    ]


@settings(max_examples=300, deadline=None)
@given(plain_runs(), st.integers(0, 7), st.lists(
    st.tuples(st.sampled_from(["a", "i", "r", "c", "n", "x", "t", "k", "at", "z"]),
              st.none() | ODD_VALUES),
    max_size=3,
), st.booleans())  # fmt: skip
def test_a_checked_run_holds_what_each_row_decodes_to(
    events: list[MessageAdded], at: int, edits: list[tuple[str, Any]], drop: bool
) -> None:
    """A run of message rows, one perhaps edited into any shape: checked_messages gives
    each row's message, actor and key as message_added_of_row does -- or declines, as it
    must where that declines a row (so the deep check still refuses what it refused);
    a run of the usual rows it takes."""
    rows = [_row(e) for e in events]
    if edits:
        state, stamp = rows[at % len(rows)]
        rows[at % len(rows)] = (_edited(state, edits, drop), stamp)
    checked = checked_messages([s for s, _ in rows], [t for _, t in rows], places(events))
    singly = [message_added_of_row(s, e.originator_id, e.originator_version, t)
              for e, (s, t) in zip(events, rows, strict=True)]  # fmt: skip
    if not edits:
        assert checked is not None
    if checked is None:
        return
    assert None not in singly
    for event, message, actor, key, tokens in zip(
        singly, checked.messages(), checked.actors, checked.keys, checked.each_tokens, strict=True
    ):
        assert event is not None
        _same(message, event.message)
        _same(actor, event.actor)
        assert (key, tokens) == (event.idempotency_key, event.message.tokens)
    assert checked.ids == [e.message.id for e in singly if e is not None]
    assert checked.roles == [e.message.role for e in singly if e is not None]
    assert checked.tool_calls == [e.message.tool_call for e in singly if e is not None]
    assert (checked.tokens, checked.user_turns) == (
        sum(checked.each_tokens),
        checked.roles.count("user"),
    )


@settings(max_examples=200, deadline=None)
@given(plain_runs(), st.lists(message_added(), max_size=3), st.booleans())
def test_buffer_json_is_the_json_pydantic_writes_of_the_messages(
    events: list[MessageAdded], others: list[MessageAdded], built_run: bool
) -> None:
    """``buffer_json`` of built messages and runs -- a checked run written from its columns
    before any of its messages is built -- is the JSON pydantic writes of their messages,
    in order: what a snapshot's buffer holds (the deep check compares the bytes)."""
    rows = [_row(e) for e in events]
    checked = checked_messages([s for s, _ in rows], [t for _, t in rows], places(events))
    assert checked is not None
    built = [e.message for e in others]
    runs: list[Any] = [checked, BuiltMessages(list(built))] if built_run else [checked]
    written = buffer_json(built, runs)
    messages = (*built, *checked.messages(), *(built if built_run else ()))
    assert written == TypeAdapter(tuple[Message, ...]).dump_json(messages)


def test_a_run_tells_tool_calls_equal_in_value_but_not_in_type_apart() -> None:
    """Tool calls equal in value but not in type (1, 1.0, True) each get their own
    validation: a run with one that validation refuses is declined, as its row is."""
    stamp = to_micros(T0)

    def row(n: int, tokens: object) -> bytes:
        tool = json.dumps({"tool_name": "s", "prompt_tokens": tokens})
        return f'{{"a":["acme"],"i":"m{n}","r":"tool","c":"x","t":{tool}}}'.encode()

    taken = [row(n, tokens) for n, tokens in enumerate([1, 1.0, True, 1, True])]
    checked = checked_messages(taken, [stamp] * len(taken), _anywhere(len(taken)))
    assert checked is not None
    for state, message in zip(taken, checked.messages(), strict=True):
        event = message_added_of_row(state, T0_SID, 5, stamp)
        assert event is not None
        _same(message, event.message)
    refused = [*taken, row(9, 1.5)]
    assert message_added_of_row(refused[-1], T0_SID, 5, stamp) is None
    assert checked_messages(refused, [stamp] * len(refused), _anywhere(len(refused))) is None


@settings(max_examples=200, deadline=None)
@given(
    plain_runs(),
    principals,
    st.tuples(st.integers(0, 50), st.integers(0, 500), st.integers(0, 50)),
    st.integers(0, 5),
    st.none() | st.just(T0),
    st.sampled_from([LIVE, "deleted", "erased"]),
    st.sampled_from(["several", "one", "the first"]),
)
def test_the_facts_of_a_run_are_each_rows_stored_facts(
    events: list[MessageAdded],
    first: Principal,
    before: tuple[int, int, int],
    commits: int,
    last_commit: datetime | None,
    status: Any,
    actors_of_run: str,
) -> None:
    """message_run_facts gives, column by column, what stored_facts gives row by row --
    whole, and slim for a session started by ``first`` (some of the actors, one actor
    object throughout -- as a checked run has it -- or that one the session's starter)."""
    counts = SessionCounters(*before, commits, commits, last_commit, LIVE)
    after = SessionCounters(0, 0, 0, commits, commits, last_commit, status)
    if actors_of_run == "several" and events[0].actor != first and len(events) > 1:
        events[1] = events[1].model_copy(update={"actor": first})
    elif actors_of_run != "several":
        only = first if actors_of_run == "the first" else events[0].actor
        events = [e.model_copy(update={"actor": only}) for e in events]
    messages = [e.message for e in events]
    tokens = [m.tokens for m in messages]
    rows = []
    pending, turns = counts.pending_tokens, counts.turn_count
    for n, event in enumerate(events, start=1):
        pending += event.message.tokens
        turns += event.message.role == "user"
        now = after._replace(message_count=counts.message_count + n, pending_tokens=pending,
                             turn_count=turns)  # fmt: skip
        rows.append(stored_facts(event, "acme", "k", now))
    actors, keys = [e.actor for e in events], [e.idempotency_key for e in events]
    for slim in (False, True):
        expected = [slim_facts(f, 10 + n, first, compact=True) for n, f in enumerate(rows)]
        columns = message_run_facts(
            [m.role for m in messages], [m.tool_call for m in messages], actors, keys, tokens,
            "acme", "k", counts, after, first, slim=slim,
        )  # fmt: skip
        assert columns == list(zip(*(expected if slim else rows), strict=True))


def _messages_of(events: list[MessageAdded], ciphers: Any = _keys) -> list[Message]:
    return [_validated(e, _row(e, sealed=ciphers is not None)[0], ciphers).message for e in events]


def _run(events: list[MessageAdded], sealed: bool, ciphers: Any) -> Any:
    rows = [_row(e, sealed) for e in events]
    aad = row_aad(events[0].originator_id, "MessageAdded")

    def opener(payload: dict[str, Any], sealed_part: Any) -> None:
        open_compact_message(payload, sealed_part, ciphers, aad)

    return stored_run([s for s, _ in rows], [t for _, t in rows], places(events), opener)


def _holds(run: Any, messages: list[Message]) -> None:
    assert run.messages() == messages
    assert [run.message(i) for i in range(len(run))] == messages
    assert list(run.ids) == [m.id for m in messages]
    assert run.tokens == sum(m.tokens for m in messages)
    assert run.user_turns == sum(1 for m in messages if m.role == "user")
    assert [repr(m) for m in run.messages()] == [repr(m) for m in messages]


@settings(max_examples=150, deadline=None)
@given(st.lists(message_added(), min_size=1, max_size=10), st.sampled_from(["plain", "sealed",
                                                                            "erased"]))  # fmt: skip
def test_a_stored_run_holds_the_validated_messages(events: list[MessageAdded], form: str) -> None:
    """A run of stored messages -- plain, sealed or erased -- offers exactly the validated
    messages, their ids, tokens and user turns (built lazily or at once)."""
    events = [e.model_copy(update={"originator_id": events[0].originator_id}) for e in events]
    ciphers = _no_keys if form == "erased" else _keys
    run = _run(events, form != "plain", ciphers)
    expected = [_validated(e, _row(e, form != "plain")[0], ciphers).message for e in events]
    _holds(run, expected)
    if form == "erased":
        assert all(m.content == ERASED for m in run.messages())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=3) | st.text(min_size=4, max_size=30), max_size=20))
def test_texts_tokens_is_estimate_tokens_summed(texts: list[str]) -> None:
    """The counting in C code gives what estimate_tokens gives text by text."""
    assert texts_tokens(texts) == sum(estimate_tokens(t) for t in texts)
    assert tokens_of_texts(texts) == [estimate_tokens(t) for t in texts]
    assert {type(n) for n in tokens_of_texts(texts)} <= {int}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 40), max_size=3000), st.integers(-5, 20_000))
def test_the_newest_that_fit_are_counted_as_the_walk_keeps_them(
    tokens: list[int], budget: int
) -> None:
    """newest_fitting (sums bisected, in growing stretches from the end) counts the
    messages, and their tokens, that a walk from the newest keeps up to the first that
    does not fit; it counts none when all fit, and none twice."""
    kept, remaining = 0, budget
    for n in reversed(tokens):
        if n > remaining:
            break
        kept, remaining = kept + 1, remaining - n
    asked: list[tuple[int, int]] = []

    def tokens_of(start: int, end: int) -> list[int]:
        asked.append((start, end))
        return tokens[start:end]

    found = newest_fitting(len(tokens), sum(tokens), tokens_of, budget)
    assert found == (kept, budget - remaining)
    assert sum(end - start for start, end in asked) <= len(tokens)
    if sum(tokens) <= budget:
        assert not asked


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-62_135_596_800_000_000, 253_402_300_799_999_999), max_size=40),
       st.integers(1, 5))  # fmt: skip
def test_stored_times_read_back_exactly_one_by_one_or_at_once(
    stamps: list[int], repeats: int
) -> None:
    """from_micros (and from_micros_all, of many: repeated ones included) gives the exact
    microsecond of a stored timestamp, which to_micros gives back."""
    stamps = [us for us in stamps for _ in range(repeats)]
    exact = [EPOCH + timedelta(microseconds=us) for us in stamps]
    assert [from_micros(us) for us in stamps] == exact == from_micros_all(stamps)
    assert [to_micros(when) for when in from_micros_all(stamps)] == stamps


def test_messages_assembled_at_once_equal_validated_ones() -> None:
    """assemble_all gives each model the validated one's fields and its own fields set."""
    fields = [{"id": f"m{n}", "role": "user", "content": "x" * n, "created_at": T0,
               "name": None, "tool_call": None, "item": None} for n in range(3)]  # fmt: skip
    built = assemble_all(Message, [dict(f) for f in fields])
    assert built == [Message(**f) for f in fields]
    assert [m.model_fields_set for m in built] == [set(fields[0])] * 3
    assert built[0].model_fields_set is not built[1].model_fields_set


def test_plain_text_runs_are_kept_unbuilt_and_others_are_built() -> None:
    """Plain text messages make a lazy StoredMessages; an item, a tool call or a message
    time of its own make the run build its messages at once (still the validated ones)."""
    plain = [
        b'{"a":["acme"],"i":"m1","r":"user","c":"hi"}',
        b'{"a":["acme"],"i":"m2","r":"tool","c":"","n":"x"}',
    ]
    stamps = [to_micros(T0)] * 2
    assert isinstance(stored_run(plain, stamps, _anywhere(2)), StoredMessages)
    with_item = [
        *plain,
        b'{"a":["acme"],"i":"m3","x":{"type":"message","role":"user","content":"yo"}}',
    ]
    assert not isinstance(stored_run(with_item, [*stamps, stamps[0]], _anywhere(3)), StoredMessages)
    odd_rows = (
        b'{"a":["acme"],"i":5,"r":"user","c":"hi"}',
        b'{"a":["acme"],"i":"m","r":"robot","c":"x"}',
        b'{"a":["acme"],"i":"m","r":"user","c":["x"]}',
        b'{"a":["acme"],"i":"m","r":["user"],"c":"x"}',
        b'{"a":["acme"],"i":null,"r":"user","c":"x"}',
    )
    for odd in odd_rows:
        with pytest.raises(ValueError):
            StoredMessages(decode_payloads([odd]), stamps[:1], _anywhere(1))


RAW_PAYLOADS = st.sampled_from([
    b'{"a":["acme"],"i":"m1","i":"m2","r":"user","c":"twice the id"}',
    b'{"a":["acme"],"i":"m1","r":"user","c":"\\ud83d\\ude00 \\u00e9 \\" \\\\ \\n"}',
    b'{"a":["acme"],"i":"m1","r":"user","c":"\\ud800 a lone surrogate"}',
    b'{"a":["acme"],"i":"m1","r":"user","c":"a raw \x01 control"}',
    b'{"a":["acme"],"i":"m1","r":"user","c":"\xff not UTF-8"}',
    b' {"a" : ["acme"] , "i":"m1","r":"user","c":"spaced"} ',
    b'{"a":["acme"],"i":"m1","r":"user","c":"x"},{"a":["acme"],"i":"m2","r":"user","c":"y"}',
    b'{"a":["acme"],"i":"m1","r":"user","c":"x"',
    b'{"a":[,],"i":"m1","r":"user","c":"x"}',
    b'{"a":"not a list","i":"m1","r":"user","c":"x","n":null,"k":null}',
    b'{"i":"m1","r":"user","c":"no actor"}',
    b'[]',
    b'',
])  # fmt: skip


def _outcome(build: Callable[[], Any]) -> Any:
    """What a run offers (its kind, messages, ids, tokens, user turns), or the error."""
    try:
        run = build()
        messages = run.messages()
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        return type(error)
    return (
        type(run).__name__, [repr(m) for m in messages], [repr(run.message(i)) for i in
        range(len(run))], list(run.ids), run.tokens, run.user_turns,
    )  # fmt: skip


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(message_added(), st.lists(EDIT, max_size=2), st.booleans()),
        min_size=1,
        max_size=4,
    ),
    st.lists(RAW_PAYLOADS, max_size=1),
)
def test_the_one_pass_parse_of_a_run_equals_the_general_parse(
    rows: list[tuple[MessageAdded, list[tuple[str, Any]], bool]], raw: list[bytes]
) -> None:
    """stored_run's one-pass parse of plain text payloads gives what the general parse
    gives -- the same messages, ids, tokens and user turns, or the same refusal -- for
    payloads edited into any shape (a key dropped or odd, an unknown key, odd JSON)."""
    states, stamps = [], []
    for event, edits, drop in rows:
        state, stamp = _row(event)
        states.append(_edited(state, edits, drop))
        stamps.append(stamp)
    for extra in raw:
        states.append(extra)
        stamps.append(stamps[0])
    placed = _anywhere(len(states))
    assert _outcome(lambda: stored_run(states, stamps, placed)) == _outcome(
        lambda: parsed_run(states, stamps, placed)
    )


def _session_with(prefix: int) -> Session:
    session = Session.start(tenant="acme", key="k", actor=ALICE, timestamp=T0)
    for n in range(prefix):
        session.add_message(Message(id=f"p{n}", role="user", content="x" * n, created_at=T0),
                            actor=ALICE, timestamp=T0)  # fmt: skip
    session.collect_events()
    return Session.from_state(session.id, session.version, session.to_state())


@settings(max_examples=100, deadline=None)
@given(st.lists(message_added(), min_size=1, max_size=8), st.integers(0, 3), st.booleans())
def test_a_run_replayed_unbuilt_leaves_the_state_of_one_by_one(
    events: list[MessageAdded], prefix: int, twice: bool
) -> None:
    """Session.replay_run (one run or two) leaves the state, counters, newest-first messages
    and buffer size of applying each MessageAdded; repeated ids included."""
    one, lazy = _session_with(prefix), _session_with(prefix)
    renumbered = [
        e.model_copy(update={"originator_id": one.id, "originator_version": one.version + n})
        for n, e in enumerate(events, start=1)
    ]
    for event in renumbered:
        event.mutate(one)
    halves = [renumbered[: len(renumbered) // 2], renumbered[len(renumbered) // 2 :]]
    for part in halves if twice else [renumbered]:
        if part:
            rows = [_row(e) for e in part]
            run = stored_run([s for s, _ in rows], [t for _, t in rows], places(part))
            lazy.replay_run(run, part[-1].originator_version, part[-1].timestamp)
    assert lazy.buffer_size == one.buffer_size == len(one.buffer)
    assert list(lazy.newest_messages()) == list(reversed(one.buffer.values()))
    total = one.pending_tokens
    for budget in {-1, 0, 1, total // 3, total // 2, total - 1, total, total + 1}:
        assert lazy.newest_within(budget) == newest_that_fit(one.newest_messages(), budget)
    assert lazy.counters() == one.counters()
    assert lazy.to_state() == one.to_state()
    assert (lazy.version, lazy.modified_on) == (one.version, one.modified_on)
    assert lazy == one


@settings(max_examples=100, deadline=None)
@given(
    st.lists(message_added(), min_size=1, max_size=8), st.integers(0, 3), st.booleans(),
    st.data(),
)  # fmt: skip
def test_dropping_messages_of_unbuilt_runs_leaves_the_state_of_dropping_built_ones(
    events: list[MessageAdded], prefix: int, twice: bool, data: st.DataObject
) -> None:
    """Session.drop_messages (a commit) of runs replayed unbuilt -- a run that leaves whole
    leaves unbuilt, with its own counts -- leaves the state of dropping built messages."""
    built, lazy = _session_with(prefix), _session_with(prefix)
    renumbered = [
        e.model_copy(update={"originator_id": built.id, "originator_version": built.version + n})
        for n, e in enumerate(events, start=1)
    ]
    halves = [renumbered[: len(renumbered) // 2], renumbered[len(renumbered) // 2 :]]
    for part in halves if twice else [renumbered]:
        if part:
            rows = [_row(e) for e in part]
            for session in (built, lazy):
                run = stored_run([s for s, _ in rows], [t for _, t in rows], places(part))
                session.replay_run(run, part[-1].originator_version, part[-1].timestamp)
    assert built.buffer  # built now; lazy's runs stay unbuilt
    ids = [f"p{n}" for n in range(prefix)] + [e.message.id for e in renumbered] + ["gone"]
    dropped = data.draw(st.lists(st.sampled_from(ids), unique=True))
    built.drop_messages(dropped)
    lazy.drop_messages(dropped)
    assert lazy.buffer_size == built.buffer_size
    assert lazy.counters() == built.counters()
    assert lazy.to_state() == built.to_state()


@pytest.mark.parametrize("encryption", [False, True])
def test_a_cold_context_equals_a_warm_one(
    make_ledger: Callable[..., SessionLedger], encryption: bool
) -> None:
    """A new ledger's context() of a long uncommitted session (built lazily) equals the
    context of the ledger that wrote it, and its session() and counters too."""
    writer = make_ledger(encryption=encryption)
    for first in range(0, 300, 20):
        writer.add_messages(ALICE, "long", [
            {"role": "user" if n % 3 else "assistant", "content": f"message {n} " * (n % 7)}
            for n in range(first, first + 20)
        ])  # fmt: skip
    warm_context = writer.context(ALICE, "long", token_budget=500)
    warm_session = writer.session(ALICE, "long")
    cold = make_ledger(encryption=encryption)
    assert cold.context(ALICE, "long", token_budget=500) == warm_context
    assert cold.session(ALICE, "long") == warm_session
    assert 0 < len(warm_context.messages) < 300


def test_a_cold_context_of_an_erased_session_reads_erased(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Erased content stays erased on a cold read: every message reads [erased]."""
    writer = make_ledger(encryption=True)
    writer.add_messages(
        ALICE, "gone", [{"role": "user", "content": f"secret {n}"} for n in range(30)]
    )
    writer.erase(ALICE, "gone")
    context = make_ledger(encryption=True).context(ALICE, "gone")
    assert context.messages and all(m.content == ERASED for m in context.messages)


@pytest.fixture
def runs(make_ledger: Callable[..., SessionLedger]) -> SessionLedger:
    """A session of long runs of messages (some with tool calls), commits and snapshots."""
    ledger = make_ledger(snapshot_interval=4)
    for batch in range(3):
        ledger.add_messages(ALICE, "runs", [
            {"role": "user" if n % 2 else "assistant", "content": f"message {batch}.{n}"}
            | ({"tool_call": {"tool_name": "search", "prompt_tokens": n}} if n % 3 == 0 else {})
            for n in range(9)
        ])  # fmt: skip
        ledger.commit(ALICE, "runs")
    ledger.add_messages(ALICE, "runs", [{"role": "user", "content": "tail"}] * 3)
    assert ledger.verify(ADMIN, deep=True).ok
    return ledger


@pytest.mark.parametrize("column", REPLAYED)
def test_a_doctored_fact_in_a_run_of_messages_is_found_at_its_row(
    runs: SessionLedger, column: str
) -> None:
    """verify(deep=True) checks runs of messages at once, and still names the row whose
    fact was doctored: the first of a run, one inside, the last of the session."""
    messages = [r for r in _rows(runs) if r["topic"] == "MessageAdded"]
    for row in (messages[0], messages[4], messages[-1]):
        _mutate_column(runs, row, column, at=1)
        (issue,) = runs.verify(ADMIN, deep=True).issues
        assert (issue.reason, issue.position) == ("stored facts differ from the event", row["id"])
        assert column in issue.found
        _execute(runs, f"UPDATE chatledger_events SET {column} = :value WHERE id = :id",
                 value=row[column], id=row["id"])  # fmt: skip
    assert runs.verify(ADMIN, deep=True).ok


def _rewrite_message(ledger: SessionLedger, nth: int, field: str, value: Any) -> int:
    """Set ``field`` of the ``nth`` message's payload to ``value``, every hash made to fit
    (no key); returns the row's position."""
    lines = list(ledger.export(ADMIN))
    records = [json.loads(line) for line in lines[1:]]
    target = sorted(
        (r for r in records if r["topic"] == "MessageAdded"), key=lambda r: r["version"]
    )[nth]

    def change(edited: list[dict[str, Any]]) -> None:
        for record in edited:
            if record["position"] == target["position"]:
                payload = json.loads(_state_bytes(record))
                record.pop("stored", None)
                payload[field] = value
                record["state"] = json.dumps(payload, separators=(",", ":"))

    for record in map(json.loads, _rechained(lines, change)[1:]):
        _execute(ledger, "UPDATE chatledger_events SET state = :state, hash = :hash WHERE id = :id",
                 state=_state_bytes(record), hash=bytes.fromhex(record["hash"]),
                 id=record["position"])  # fmt: skip
    return int(target["position"])


@pytest.mark.parametrize(("field", "value", "edited"), [
    ("c", "a much longer text than the message had", "pending_tokens"),
    ("r", "system", "turn_count"),
    ("t", {"tool_name": "fetch", "prompt_tokens": 1}, "tool_name, prompt_tokens"),
])  # fmt: skip
def test_a_payload_inside_a_run_changed_into_another_valid_one_is_found_at_its_row(
    runs: SessionLedger, field: str, value: Any, edited: str
) -> None:
    """A message of a run rewritten into another valid message, its chain made to fit: the
    default check passes it, the deep one reports the stored facts of exactly that row."""
    position = _rewrite_message(runs, 3, field, value)
    assert runs.verify(ADMIN).ok
    (issue,) = runs.verify(ADMIN, deep=True).issues
    assert (issue.reason, issue.position) == ("stored facts differ from the event", position)
    assert issue.found == f"edited fact columns: {edited}"


def test_a_row_inside_a_run_that_cannot_be_applied_is_reported_after_earlier_facts(
    runs: SessionLedger,
) -> None:
    """A chain-consistent message row with a role no message has, inside a run: reported
    as unreplayable at its row -- after a doctored fact earlier in the same run."""
    position = _rewrite_message(runs, 5, "r", "robot")
    assert runs.verify(ADMIN).ok
    (issue,) = runs.verify(ADMIN, deep=True).issues
    assert (issue.reason, issue.position) == ("event cannot be replayed", position)
    earlier = next(r for r in _rows(runs) if r["id"] == position - 2)
    _mutate_column(runs, earlier, "pending_tokens", at=1)
    (issue,) = runs.verify(ADMIN, deep=True).issues
    assert (issue.reason, issue.position) == ("stored facts differ from the event", earlier["id"])


def _columns(found: StreamColumns) -> tuple[list[Any], ...]:
    return (
        list(found.versions), list(found.topics), [bytes(s) for s in found.states],
        list(found.stamps),
    )  # fmt: skip


@pytest.mark.parametrize("per_query", [2, 500])
def test_the_column_read_of_a_stream_gives_its_rows(
    make_ledger: Callable[..., SessionLedger], monkeypatch: pytest.MonkeyPatch, per_query: int
) -> None:
    """stream_columns gives the versions, topics (None for a MessageAdded), states and
    timestamps that stream gives, for every range of a session with commits among its
    messages (their rows read by version, in one query or several; an empty range: no
    rows)."""
    monkeypatch.setattr(recorders, "_VERSIONS_PER_QUERY", per_query)
    ledger = make_ledger()
    for n in range(4):
        ledger.add_messages(
            ALICE, "s", [{"role": "user", "content": f"m{n}.{i}"} for i in range(5)]
        )
        if n != 2:
            ledger.commit(ALICE, "s")
    view = ledger.session(ALICE, "s")
    recorder = ledger.core.store.event_recorder
    last = view.version
    for gt in (None, 0, 1, 6, last - 1, last):
        for lte in (None, 1, 7, last, last + 3):
            found = recorder.stream_columns(view.session_id, gt=gt, lte=lte)
            rows = recorder.stream(view.session_id, gt=gt, lte=lte)
            assert found is not None
            assert _columns(found) == _columns(StreamColumns.of_rows(rows))
    assert "Committed" in recorder.stream_columns(view.session_id).topics  # type: ignore[union-attr]


@pytest.mark.parametrize("snapshots", [False, True])
def test_a_cold_load_across_a_missing_event_fails_as_the_validated_replay_does(
    make_ledger: Callable[..., SessionLedger], snapshots: bool
) -> None:
    """With an event deleted from the middle of a long run of messages, a cold read finds
    the gap (the stretch is read row by row) and raises what the validated replay raises,
    instead of replaying the messages past it."""
    writer = make_ledger(snapshot_interval=30 if snapshots else 10_000)
    for first in range(0, 100, 20):
        writer.add_messages(ALICE, "long", [
            {"role": "user", "content": f"message {n}"} for n in range(first, first + 20)
        ])  # fmt: skip
    sid = writer.session(ALICE, "long").session_id
    row = next(r for r in _rows(writer) if r["originator_version"] == 70)
    _execute(writer, "DELETE FROM chatledger_events WHERE id = :id", id=row["id"])
    cold = make_ledger(snapshot_interval=30 if snapshots else 10_000)
    assert cold.core.store.event_recorder.stream_columns(sid) is None
    with pytest.raises(StoreUnavailable) as fast:
        cold.context(ALICE, "long")
    with pytest.raises(StoreUnavailable) as slow:
        make_ledger().core.store.load(sid, trusted=False)
    assert str(fast.value) == str(slow.value)
    assert cold.context(ALICE, "long", at_version=69).dropped_messages == 0
