"""Agent-framework items, taking them out of the buffer, optimistic concurrency and state.

Every test runs on SQLite and PostgreSQL through the public API.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from chatledger import (
    ConcurrencyConflict,
    InvalidInput,
    ItemsRemoved,
    SessionLedger,
    StateChanged,
    TailReplaced,
)
from support import ALICE, BOB, store_state

ITEMS: list[dict[str, Any]] = [
    {"role": "developer", "content": "Be brief."},
    {
        "type": "message",
        "id": "msg_1",
        "role": "user",
        "content": [{"type": "input_text", "text": "Where is order 7?"}],
    },
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Look the order up."}],
        "encrypted_content": "gAAAA...",
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_9",
        "name": "lookup_order",
        "arguments": '{"order": 7}',
    },
    {"type": "function_call_output", "call_id": "call_9", "output": "Shipped Monday."},
    {
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "It shipped Monday.", "annotations": []}],
    },
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"q": ["x", 1.5]}},
]


def test_items_round_trip_exactly_and_in_order(make_ledger: Callable[..., SessionLedger]) -> None:
    """Any JSON object comes back equal (==), in order, also after a cold reload."""
    writer = make_ledger()
    writer.add_items(ALICE, "s1", ITEMS)
    reader = make_ledger(cache_size=0)
    assert [m.as_item() for m in reader.items(ALICE, "s1")] == ITEMS
    assert [m.as_item() for m in reader.session(ALICE, "s1").buffer] == ITEMS
    exported = [json.loads(line) for line in reader.export(ALICE, "s1")][1:]
    stored = [r["stored"]["x"] for r in exported if r["type"] == "MessageAdded"]  # verbatim
    assert stored == ITEMS


def test_an_items_text_feeds_tokens_context_and_summaries(ledger: SessionLedger) -> None:
    """Roles and text are read from the items; an unknown type is carried, counted, not shown."""
    ledger.add_items(ALICE, "s1", ITEMS)
    buffer = ledger.session(ALICE, "s1").buffer
    assert [m.role for m in buffer] == [
        "developer", "user", "assistant", "assistant", "tool", "assistant", "assistant",
    ]  # fmt: skip
    assert buffer[1].content == "Where is order 7?"
    assert buffer[3].content == 'lookup_order({"order": 7})' and buffer[3].name == "lookup_order"
    assert buffer[4].content == "Shipped Monday."
    assert buffer[6].content == "" and buffer[6].tokens > 1  # its JSON still takes room
    context = ledger.context(ALICE, "s1", 10_000)
    assert [m.id for m in context.messages] == [m.id for m in buffer]
    result = ledger.commit(ALICE, "s1")
    overview = ledger.session(ALICE, "s1").archives[0].overview
    assert result.archived and "user: Where is order 7?" in overview
    assert "encrypted_content" not in overview and "{" not in overview.split("lookup_order")[0]


ADK_EVENTS: list[dict[str, Any]] = [
    {
        "id": "e1", "author": "user", "invocation_id": "inv-1", "timestamp": 1.0,
        "content": {"role": "user", "parts": [{"text": "Where is order 7?"}]},
    },
    {
        "id": "e2", "author": "shop_agent", "invocation_id": "inv-1", "timestamp": 2.0,
        "content": {
            "role": "model",
            "parts": [{"function_call": {"id": "c1", "name": "lookup", "args": {"order": 7}}}],
        },
    },
    {
        "id": "e3", "author": "shop_agent", "invocation_id": "inv-1", "timestamp": 3.0,
        "content": {
            "role": "user",
            "parts": [{"function_response": {"id": "c1", "name": "lookup",
                                             "response": {"status": "shipped"}}}],
        },
    },
    {
        "id": "e4", "author": "shop_agent", "invocation_id": "inv-1", "timestamp": 4.0,
        "content": {"role": "model",
                    "parts": [{"text": "It shipped."}, {"text": "Anything else?"}]},
        "actions": {"state_delta": {"order": 7}},
    },
    {"role": "model", "parts": [{"text": "A bare GenAI Content."}]},
]  # fmt: skip


def test_google_genai_and_adk_items_are_read_through_their_parts(ledger: SessionLedger) -> None:
    """ADK Events and GenAI Contents: roles from content.role, text from the parts, calls as
    name(args), responses as JSON; the item itself is kept verbatim."""
    ledger.add_items(ALICE, "adk", ADK_EVENTS)
    buffer = ledger.session(ALICE, "adk").buffer
    assert [m.role for m in buffer] == ["user", "assistant", "tool", "assistant", "assistant"]
    assert buffer[0].content == "Where is order 7?" and buffer[0].name is None
    assert buffer[1].content == 'lookup({"order":7})' and buffer[1].name == "lookup"
    assert buffer[2].content == '{"status":"shipped"}'
    assert buffer[3].content == "It shipped.\nAnything else?" and buffer[3].name == "shop_agent"
    assert buffer[4].content == "A bare GenAI Content."
    assert [m.as_item() for m in buffer] == ADK_EVENTS
    ledger.commit(ALICE, "adk")
    assert "Where is order 7?" in ledger.session(ALICE, "adk").archives[0].overview


def test_plain_messages_read_as_items(ledger: SessionLedger) -> None:
    """A message recorded as text (or by an earlier version) reads back as {role, content}."""
    ledger.add_message(ALICE, "s1", "user", "hello")
    assert [m.as_item() for m in ledger.items(ALICE, "s1")] == [
        {"role": "user", "content": "hello"}
    ]


@pytest.mark.parametrize(
    "bad",
    [[{"x": float("nan")}], ["not an object"], [], "a string", [{1: "int key"}], [{"t": "\ud800"}]],
    ids=repr,
)
def test_items_that_cannot_be_recorded_are_invalid_input(ledger: SessionLedger, bad: Any) -> None:
    """Non-objects, empty lists and non-JSON values are refused; nothing is recorded."""
    with pytest.raises(InvalidInput):
        ledger.add_items(ALICE, "s1", bad)
    assert store_state(ledger).events == 0


# ------------------------------------------------------------------ removal
def _fill(ledger: SessionLedger, n: int = 4) -> list[str]:
    return [
        a.message_id
        for a in ledger.add_messages(
            ALICE, "s1", [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i} " * 8}
                          for i in range(n)],
        )
    ]  # fmt: skip


def test_removed_items_leave_the_buffer_but_not_the_history(ledger: SessionLedger) -> None:
    """remove_items: counters recomputed, context and commits skip them, time travel keeps them."""
    ids = _fill(ledger)
    before = ledger.session(ALICE, "s1")
    removed = ledger.remove_items(ALICE, "s1", [ids[0], ids[2]])
    assert [m.id for m in removed] == [ids[0], ids[2]]
    after = ledger.session(ALICE, "s1")
    assert [m.id for m in after.buffer] == [ids[1], ids[3]]
    assert after.turn_count == 0 and after.pending_tokens == sum(m.tokens for m in after.buffer)
    assert after.message_count == before.message_count  # messages ever added
    assert ledger.history(ALICE, "s1")[-1].type == "ItemsRemoved"
    assert len(ledger.session(ALICE, "s1", at_version=before.version).buffer) == 4
    change = ledger.diff(ALICE, "s1", before.version, after.version)
    assert [m.id for m in change.messages_removed] == [ids[0], ids[2]]
    assert ids[0] not in [m.id for m in ledger.context(ALICE, "s1").messages]
    ledger.commit(ALICE, "s1")
    assert ledger.session(ALICE, "s1").archives[0].message_ids == (ids[1], ids[3])
    assert ledger.verify(ALICE).ok


def test_pop_takes_the_newest_item_only_if_it_is_the_expected_one(ledger: SessionLedger) -> None:
    """pop_item returns the newest item; with expected_id a moved tail is a conflict."""
    ids = _fill(ledger, 2)
    state = store_state(ledger)
    with pytest.raises(ConcurrencyConflict):
        ledger.pop_item(ALICE, "s1", expected_id=ids[0])
    assert store_state(ledger) == state
    popped = ledger.pop_item(ALICE, "s1", expected_id=ids[1])
    assert popped is not None and popped.id == ids[1]
    assert ledger.pop_item(ALICE, "s1") is not None
    assert ledger.pop_item(ALICE, "s1") is None  # empty: nothing recorded
    types = [e.type for e in ledger.history(ALICE, "s1")]
    assert types.count("ItemsRemoved") == 2


def test_clear_buffer_empties_it_without_an_archive(ledger: SessionLedger) -> None:
    """clear_buffer removes every live item in one event; no archive, no summary."""
    _fill(ledger)
    cleared = ledger.clear_buffer(ALICE, "s1")
    view = ledger.session(ALICE, "s1")
    assert len(cleared) == 4 and view.buffer == () and view.archives == ()
    event = ledger.history(ALICE, "s1")[-1].event
    assert isinstance(event, ItemsRemoved) and event.reason == "clear"
    assert ledger.clear_buffer(ALICE, "s1") == []


def test_replace_tail_is_atomic_and_refuses_a_moved_tail(ledger: SessionLedger) -> None:
    """replace_tail swaps the last K items in one event, or conflicts and records nothing."""
    ids = _fill(ledger)
    summary = [{"role": "assistant", "content": "Summary of m2 and m3."}]
    added = ledger.replace_tail(ALICE, "s1", ids[2:], summary)
    buffer = ledger.session(ALICE, "s1").buffer
    assert [m.id for m in buffer] == [*ids[:2], added[0].message_id]
    assert isinstance(ledger.history(ALICE, "s1")[-1].event, TailReplaced)
    state = store_state(ledger)
    with pytest.raises(ConcurrencyConflict):  # the tail is no longer ids[2:]
        ledger.replace_tail(ALICE, "s1", ids[2:], summary)
    with pytest.raises(ConcurrencyConflict):  # not the newest items
        ledger.replace_tail(ALICE, "s1", ids[:1], summary)
    assert store_state(ledger) == state


# ------------------------------------------------------------ concurrency
@pytest.mark.parametrize(
    "write",
    [
        lambda lg, v: lg.add_message(ALICE, "s1", "user", "x", expected_version=v),
        lambda lg, v: lg.add_items(
            ALICE, "s1", [{"role": "user", "content": "x"}], expected_version=v
        ),
        lambda lg, v: lg.commit(ALICE, "s1", expected_version=v),
        lambda lg, v: lg.remove_items(
            ALICE, "s1", [lg.items(ALICE, "s1")[0].id], expected_version=v
        ),
        lambda lg, v: lg.update_state(ALICE, "s1", {"k": 1}, expected_version=v),
        lambda lg, v: lg.evict(ALICE, "s1", expected_version=v),
        lambda lg, v: lg.close_session(ALICE, "s1", expected_version=v),
    ],
    ids=["add_message", "add_items", "commit", "remove_items", "update_state", "evict", "close"],
)
def test_expected_version_makes_every_write_conditional(
    ledger: SessionLedger, write: Callable[[SessionLedger, int], Any]
) -> None:
    """A write at the wrong version conflicts and records nothing; at the right one it lands."""
    _fill(ledger, 2)
    version = ledger.session(ALICE, "s1").version
    state = store_state(ledger)
    with pytest.raises(ConcurrencyConflict, match="version"):
        write(ledger, version - 1)
    assert store_state(ledger) == state
    write(ledger, version)
    assert ledger.session(ALICE, "s1").version > version


def test_items_reads_the_tail_or_what_came_after_a_version(ledger: SessionLedger) -> None:
    """items(limit=) is the newest live items; items(after_version=) those added since."""
    ids = _fill(ledger)
    version = ledger.session(ALICE, "s1").version
    more = [a.message_id for a in ledger.add_items(ALICE, "s1", [{"role": "user", "content": "n"}])]
    assert [m.id for m in ledger.items(ALICE, "s1", limit=2)] == [ids[3], *more]
    assert [m.id for m in ledger.items(ALICE, "s1", after_version=version)] == more
    assert ledger.items(ALICE, "s1", limit=0) == []


# ------------------------------------------------------------------- state
def test_state_changes_with_the_items_and_is_kept_at_every_version(ledger: SessionLedger) -> None:
    """State set with items lands in the same write; it is readable as of any version."""
    first = ledger.add_items(
        ALICE, "s1", [{"role": "user", "content": "hi"}], state={"lang": "de", "step": 1}
    )
    ledger.update_state(ALICE, "s1", {"step": 2})
    assert ledger.state(ALICE, "s1").state == {"lang": "de", "step": 2}
    assert ledger.session(ALICE, "s1").state == {"lang": "de", "step": 2}
    assert ledger.state(ALICE, "s1", at_version=first[0].version).state == {}
    assert ledger.state(ALICE, "s1", at_version=first[0].version + 1).state == {
        "lang": "de", "step": 1,
    }  # fmt: skip
    types = [e.type for e in ledger.history(ALICE, "s1")]
    assert types == ["Started", "MessageAdded", "StateChanged", "StateChanged"]
    copy = ledger.fork(ALICE, "s1", 4, "s1-copy")
    assert copy.state == {"lang": "de", "step": 2}


def test_shared_state_changes_atomically_with_the_session(ledger: SessionLedger) -> None:
    """Shared scopes change in the same transaction as the session, or not at all."""
    ledger.add_items(
        ALICE, "s1", [{"role": "user", "content": "hi"}],
        state={"k": 1}, shared_state={"app:shop": {"theme": "dark"}, "user:shop:ann": {"n": 1}},
    )  # fmt: skip
    assert ledger.shared_state(ALICE, "app:shop").state == {"theme": "dark"}
    assert ledger.shared_state(ALICE, "user:shop:ann").state == {"n": 1}
    assert ledger.shared_state(BOB, "app:shop").state == {}  # another tenant's scope
    state = store_state(ledger)
    with pytest.raises(ConcurrencyConflict):
        ledger.add_items(
            ALICE, "s1", [{"role": "user", "content": "x"}],
            shared_state={"app:shop": {"theme": "light"}}, expected_version=1,
        )  # fmt: skip
    assert store_state(ledger) == state
    assert ledger.shared_state(ALICE, "app:shop").state == {"theme": "dark"}
    last = ledger.history(ALICE, "s1")[-1].event
    assert isinstance(last, StateChanged) and last.changes == {"k": 1}


def test_state_scope_keys_are_reserved(ledger: SessionLedger) -> None:
    """A session key may not pose as a state scope."""
    with pytest.raises(InvalidInput, match="reserved"):
        ledger.add_message(ALICE, "~state:app:shop", "user", "sneaky")


def test_state_scopes_are_not_sessions_of_the_working_set(ledger: SessionLedger) -> None:
    """A shared scope's stream is audited and verified, but never listed as a session."""
    ledger.add_items(
        ALICE, "s1", [{"role": "user", "content": "hi"}], shared_state={"app:shop": {"a": 1}}
    )
    ledger.read_models.catch_up()
    assert [row.session_key for row in ledger.working_set(ALICE)] == ["s1"]
    assert ledger.verify(ALICE).sessions_checked == 2
