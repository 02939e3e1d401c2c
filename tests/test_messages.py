"""Adding messages: session creation on first use, buffer, tokens, turns, batches."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from chatledger import (
    AddedMessage,
    ClientContext,
    InvalidInput,
    SessionLedger,
    UnknownSession,
    estimate_tokens,
)
from support import ALICE, BOB


def test_first_message_starts_the_session(ledger: SessionLedger) -> None:
    """Given no session, when a message is added, then Started and MessageAdded are recorded."""
    added = ledger.add_message(ALICE, "s1", "user", "hello")
    assert isinstance(added, AddedMessage)
    assert added.version == 2
    assert [e.type for e in ledger.history(ALICE, "s1")] == ["Started", "MessageAdded"]


def test_message_lands_in_live_buffer_with_its_fields(ledger: SessionLedger) -> None:
    """A recorded message keeps role, content, name and tool-call data exactly."""
    added = ledger.add_message(
        ALICE,
        "s1",
        "tool",
        "order 7 shipped",
        name="lookup",
        tool_call={"tool_name": "lookup", "status": "error", "prompt_tokens": 3},
    )
    (message,) = ledger.session(ALICE, "s1").buffer
    assert message.id == added.message_id
    assert (message.role, message.content, message.name) == ("tool", "order 7 shipped", "lookup")
    assert message.tool_call is not None
    assert (message.tool_call.tool_name, message.tool_call.status) == ("lookup", "error")
    assert (message.tool_call.prompt_tokens, message.tool_call.completion_tokens) == (3, 0)


@pytest.mark.parametrize(
    ("content", "tokens"), [("x" * 100, 25), ("", 1), ("abc", 1), ("x" * 9, 2)]
)
def test_token_estimate_is_a_quarter_of_characters_at_least_one(content: str, tokens: int) -> None:
    """The token estimate is max(1, len(content) // 4)."""
    assert estimate_tokens(content) == tokens


def test_pending_tokens_and_turn_count_follow_the_buffer(ledger: SessionLedger) -> None:
    """pending_tokens sums the live messages; turn_count counts live user messages."""
    ledger.add_message(ALICE, "s1", "user", "x" * 100)
    ledger.add_message(ALICE, "s1", "assistant", "y" * 40)
    added = ledger.add_message(ALICE, "s1", "user", "")
    view = ledger.session(ALICE, "s1")
    assert added.pending_tokens == view.pending_tokens == 25 + 10 + 1
    assert view.turn_count == 2


def test_should_compress_from_the_configured_threshold(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """should_compress turns true when user turns reach compress_threshold."""
    ledger = make_ledger(compress_threshold=3)
    for i in range(2):
        ledger.add_message(ALICE, "s1", "user", f"q{i}")
        ledger.add_message(ALICE, "s1", "assistant", f"a{i}")
    assert not ledger.session(ALICE, "s1").should_compress
    ledger.add_message(ALICE, "s1", "user", "q3")
    assert ledger.session(ALICE, "s1").should_compress


def test_add_messages_records_all_in_order(ledger: SessionLedger) -> None:
    """A batch is recorded as consecutive versions in the given order."""
    added = ledger.add_messages(
        ALICE, "s1", [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    )
    assert [a.version for a in added] == [2, 3]
    assert [m.content for m in ledger.session(ALICE, "s1").buffer] == ["a", "b"]


def test_add_messages_with_one_bad_message_records_nothing(ledger: SessionLedger) -> None:
    """A batch with any invalid message is rejected whole; the session stays as it was."""
    ledger.add_message(ALICE, "s1", "user", "before")
    before = ledger.session(ALICE, "s1")
    with pytest.raises(InvalidInput):
        ledger.add_messages(
            ALICE, "s1", [{"role": "user", "content": "ok"}, {"role": "robot", "content": "no"}]
        )
    assert ledger.session(ALICE, "s1") == before
    assert len(ledger.history(ALICE, "s1")) == 2


def test_client_context_is_captured_verbatim(ledger: SessionLedger) -> None:
    """The context passed with the first message is recorded in Started as given."""
    context = ClientContext(cwd="/srv/agent", additional_directories=("/data",), meta={"a": [1]})
    ledger.add_message(ALICE, "s1", "user", "hi", context=context)
    started = ledger.history(ALICE, "s1")[0]
    assert started.type == "Started"
    assert started.event.context == context  # type: ignore[attr-defined]
    assert ledger.session(ALICE, "s1").context == context


def test_every_event_records_actor_and_clock_time(ledger: SessionLedger) -> None:
    """Events carry the acting principal and strictly increasing injected-clock times."""
    ledger.add_message(ALICE, "s1", "user", "hi")
    ledger.add_message(ALICE, "s1", "assistant", "hello")
    events = ledger.history(ALICE, "s1")
    assert all(e.actor == ALICE for e in events)
    times = [e.timestamp for e in events]
    assert times == sorted(times)
    assert times[0].year == 2026


def test_unknown_session_reads_raise_typed_error(ledger: SessionLedger) -> None:
    """Reading a session that was never started raises UnknownSession."""
    with pytest.raises(UnknownSession):
        ledger.session(ALICE, "nope")
    with pytest.raises(UnknownSession):
        ledger.history(ALICE, "nope")
    with pytest.raises(UnknownSession):
        ledger.commit(ALICE, "nope")


def test_same_key_in_two_accounts_is_two_sessions(ledger: SessionLedger) -> None:
    """Identity is (account, key): the same key in two tenants never shares history."""
    ledger.add_message(ALICE, "shared", "user", "from acme")
    ledger.add_message(BOB, "shared", "user", "from globex")
    a, b = ledger.session(ALICE, "shared"), ledger.session(BOB, "shared")
    assert a.session_id != b.session_id
    assert [m.content for m in a.buffer] == ["from acme"]
    assert [m.content for m in b.buffer] == ["from globex"]


def test_ledger_reopens_with_the_same_state(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """A second ledger on the same database sees exactly what the first recorded."""
    first = make_ledger()
    first.add_message(ALICE, "s1", "user", "persisted")
    first.commit(ALICE, "s1")
    first.add_message(ALICE, "s1", "user", "live")
    view = first.session(ALICE, "s1")
    first.close()
    assert make_ledger().session(ALICE, "s1") == view
