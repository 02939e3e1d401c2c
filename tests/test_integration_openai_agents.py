"""``ChatLedgerSession``: the OpenAI Agents SDK's session protocol on SQLite and PostgreSQL.

The SDK's own session test files also run against it, in an opt-in job
(``python3 dev.py agents-sdk-tests``, see tests/integrations/); these tests
pin the contract on both databases and what the ledger adds: every item
stays in the history, compaction is one event, writes survive cancellation
and unknown outcomes.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from typing import Any

import pytest

from chatledger import (
    AccessDenied,
    AsyncSessionLedger,
    InvalidInput,
    ItemsRemoved,
    SessionLedger,
    TailReplaced,
    UnknownSession,
    WriteOutcomeUnknown,
)
from erasure_support import stored_text
from support import ALICE, BOB

if os.environ.get("CHATLEDGER_REQUIRE_INTEGRATIONS", "") not in ("", "0"):
    import agents  # CI installs the SDK: a missing one is a failure there, not a skip
else:
    agents = pytest.importorskip(
        "agents", reason="openai-agents is not installed: pip install 'chatledger[openai-agents]'"
    )

from agents import Agent, Runner, set_tracing_disabled
from agents.memory import Session, SessionSettings
from agents.testing import ScriptedModel, assistant_message

from chatledger.integrations.openai_agents import ChatLedgerSession

set_tracing_disabled(True)  # the Runner would otherwise try to export traces over the network

ITEMS: list[Any] = [
    {"role": "developer", "content": "Answer briefly."},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Order 9?"}]},
    {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"id": 9}'},
    {"type": "function_call_output", "call_id": "c1", "output": "Delivered."},
    {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
]


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


@pytest.fixture
def session(ledger: SessionLedger) -> ChatLedgerSession:
    """A chatledger-backed SDK session named ``agent-1`` for ALICE."""
    return ChatLedgerSession("agent-1", ledger, ALICE)


def test_it_is_an_sdk_session(session: ChatLedgerSession) -> None:
    """The class satisfies the SDK's runtime-checkable ``Session`` protocol."""
    assert isinstance(session, Session)
    assert session.session_id == "agent-1"
    assert session.session_settings == SessionSettings()


def test_items_come_back_exactly_and_in_order(session: ChatLedgerSession) -> None:
    """Every SDK item shape is stored verbatim and read back ``==``, oldest first."""
    run(session.add_items(ITEMS[:3]))
    run(session.add_items(ITEMS[3:]))
    assert run(session.get_items()) == ITEMS
    assert run(session.get_items(limit=2)) == ITEMS[-2:]
    assert run(session.get_items(limit=0)) == []
    assert run(session.get_items(limit=-1)) == ITEMS  # SQLiteSession: a negative limit is none


def test_session_settings_give_the_default_limit(ledger: SessionLedger) -> None:
    """``session_settings.limit`` bounds ``get_items()``; an explicit limit wins."""
    limited = ChatLedgerSession("agent-1", ledger, ALICE, session_settings={"limit": 2})
    run(limited.add_items(ITEMS))
    assert run(limited.get_items()) == ITEMS[-2:]
    assert run(limited.get_items(limit=4)) == ITEMS[-4:]
    assert limited.session_settings == SessionSettings(limit=2)


def test_an_unknown_session_is_empty_and_is_not_created(
    session: ChatLedgerSession, ledger: SessionLedger
) -> None:
    """Reading, popping and clearing a session that was never written records nothing."""
    assert run(session.get_items()) == []
    assert run(session.pop_item()) is None
    run(session.clear_session())
    run(session.add_items([]))
    with pytest.raises(UnknownSession):
        ledger.session(ALICE, "agent-1")


def test_pop_and_clear_keep_the_items_in_the_history(
    session: ChatLedgerSession, ledger: SessionLedger
) -> None:
    """Popped and cleared items leave the session but stay in the ledger (time travel)."""
    run(session.add_items(ITEMS))
    assert run(session.pop_item()) == ITEMS[-1]
    assert run(session.get_items()) == ITEMS[:-1]
    before_clear = ledger.session(ALICE, "agent-1").version
    run(session.clear_session())
    assert run(session.get_items()) == []
    assert run(session.pop_item()) is None
    removed = [e.event for e in ledger.history(ALICE, "agent-1") if e.type == "ItemsRemoved"]
    assert [isinstance(e, ItemsRemoved) and e.reason for e in removed] == ["pop", "clear"]
    then = ledger.session(ALICE, "agent-1", at_version=before_clear).buffer
    assert [m.as_item() for m in then] == ITEMS[:-1]


def test_callers_cannot_change_what_is_stored(session: ChatLedgerSession) -> None:
    """Changing an item after adding it, or an item read back, leaves the stored one alone."""
    item: dict[str, Any] = {"type": "message", "role": "user", "content": [{"text": "a"}]}
    run(session.add_items([item]))
    item["content"][0]["text"] = "changed after add"
    read = run(session.get_items())
    read[0]["content"][0]["text"] = "changed after read"
    assert run(session.get_items()) == [
        {"type": "message", "role": "user", "content": [{"text": "a"}]}
    ]


def test_items_that_are_not_json_objects_are_refused(session: ChatLedgerSession) -> None:
    """A non-dict item is ``InvalidInput`` and nothing of the batch is recorded."""
    with pytest.raises(InvalidInput):
        run(session.add_items([{"role": "user", "content": "fine"}, "not an item"]))  # type: ignore[list-item]
    assert run(session.get_items()) == []


def test_it_takes_an_async_ledger_and_an_account(ledger: SessionLedger) -> None:
    """An ``AsyncSessionLedger`` works as well; the tenant rule still holds."""
    aledger = AsyncSessionLedger(ledger)
    run(ChatLedgerSession("agent-1", aledger, ALICE).add_items(ITEMS[:1]))
    assert ledger.items(ALICE, "agent-1")[0].as_item() == ITEMS[0]
    intruder = ChatLedgerSession("agent-1", aledger, BOB, account_id="acme")
    with pytest.raises(AccessDenied):
        run(intruder.get_items())
    with pytest.raises(InvalidInput):
        ChatLedgerSession("agent-1", object(), ALICE)  # type: ignore[arg-type]


def test_a_cancelled_write_still_lands_before_the_cancellation_is_raised(
    ledger: SessionLedger,
) -> None:
    """Cancelling ``add_items`` mid-write waits for the write, then raises CancelledError."""
    aledger = AsyncSessionLedger(ledger)
    entered, release = threading.Event(), threading.Event()

    def slow_add_items(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(10)
        return ledger.add_items(*args, **kwargs)

    async def add_items(*args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(slow_add_items, *args, **kwargs)

    aledger.add_items = add_items  # type: ignore[method-assign]
    session = ChatLedgerSession("agent-1", aledger, ALICE)

    async def scenario() -> None:
        task = asyncio.create_task(session.add_items(ITEMS[:1]))
        await asyncio.to_thread(entered.wait, 10)
        task.cancel()
        await asyncio.sleep(0.05)
        assert not task.done()  # still waiting for the write's outcome
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(scenario())
    assert [m.as_item() for m in ledger.items(ALICE, "agent-1")] == ITEMS[:1]


def test_a_write_with_an_unknown_outcome_is_retried_once_without_a_duplicate(
    ledger: SessionLedger,
) -> None:
    """After ``WriteOutcomeUnknown`` the same idempotency key is retried: one copy lands."""
    aledger = AsyncSessionLedger(ledger)
    real = aledger.add_items
    keys: list[str] = []

    async def lost_answer(*args: Any, **kwargs: Any) -> Any:
        keys.append(kwargs["idempotency_key"])
        result = await real(*args, **kwargs)
        if len(keys) == 1:
            raise WriteOutcomeUnknown("the COMMIT's answer was lost")
        return result

    aledger.add_items = lost_answer  # type: ignore[method-assign]
    session = ChatLedgerSession("agent-1", aledger, ALICE)
    session.keyed_writes = True  # as on PostgreSQL, the one database with unknown outcomes
    run(session.add_items(ITEMS[:2]))
    assert len(keys) == 2 and keys[0] == keys[1]
    assert [m.as_item() for m in ledger.items(ALICE, "agent-1")] == ITEMS[:2]


def snapshot(session: ChatLedgerSession, limit: int, **kwargs: Any) -> Any:
    # The SDK's compaction hook for stores (an underscore name the SDK itself calls).
    return run(session._get_compaction_snapshot(limit, **kwargs))


def test_the_compaction_snapshot_replaces_the_tail_in_one_event(
    session: ChatLedgerSession, ledger: SessionLedger
) -> None:
    """``replace_suffix`` swaps the newest items for the compacted output: one TailReplaced."""
    run(session.add_items(ITEMS))
    window = snapshot(session, 3)
    assert window.items == ITEMS[-3:] and window.complete is False
    summary = {"type": "compaction", "id": "cmp_1", "encrypted_content": "summary"}
    assert run(window.replace_suffix(1, [summary])) is True
    assert run(session.get_items()) == [*ITEMS[:4], summary]
    last = ledger.history(ALICE, "agent-1")[-1].event
    assert isinstance(last, TailReplaced) and len(last.removed_ids) == 2
    assert snapshot(session, 10).complete is True


def test_a_snapshot_whose_tail_moved_on_replaces_nothing(
    session: ChatLedgerSession, ledger: SessionLedger
) -> None:
    """If items were added after the snapshot, ``replace_suffix`` is False and records nothing."""
    run(session.add_items(ITEMS[:3]))
    window = snapshot(session, 3)
    run(session.add_items(ITEMS[3:4]))
    version = ledger.session(ALICE, "agent-1").version
    assert run(window.replace_suffix(0, [])) is False
    assert run(window.replace_suffix(3, [])) is False  # an empty suffix is never replaced
    assert ledger.session(ALICE, "agent-1").version == version
    assert run(session.get_items()) == ITEMS[:4]


def test_compaction_reclaims_an_expired_prefix(session: ChatLedgerSession) -> None:
    """With ``prune_prefix`` the oldest items it calls expired leave after the replacement."""
    old = [{"role": "user", "content": f"expired {i}"} for i in range(2)]
    run(session.add_items([*old, *ITEMS[:2]]))
    window = snapshot(session, 1, prune_prefix=lambda item: "expired" in str(item))
    assert run(window.replace_suffix(0, [{"type": "compaction", "id": "c"}])) is True
    assert run(session.get_items()) == [ITEMS[0], {"type": "compaction", "id": "c"}]


def test_a_subclass_that_changes_reads_gets_no_snapshot(ledger: SessionLedger) -> None:
    """A subclass overriding ``get_items`` is not given a snapshot that would bypass it."""

    class Filtered(ChatLedgerSession):
        async def get_items(self, limit: int | None = None) -> list[Any]:
            return []

    assert snapshot(Filtered("agent-1", ledger, ALICE), 3) is None


def test_a_runner_turn_is_recorded_in_the_ledger(
    session: ChatLedgerSession, ledger: SessionLedger
) -> None:
    """``Runner.run(..., session=)`` stores the turn; the next turn sees the earlier one."""
    model = ScriptedModel([[assistant_message("Hello Ann.")], [assistant_message("Ann.")]])
    agent = Agent(name="helper", model=model)
    run(Runner.run(agent, "I am Ann.", session=session))
    result = run(Runner.run(agent, "Who am I?", session=session))
    assert result.final_output == "Ann."
    texts = [m.content for m in ledger.items(ALICE, "agent-1")]
    assert texts == ["I am Ann.", "Hello Ann.", "Who am I?", "Ann."]
    assert "I am Ann." in str(model.calls[1].input)


# ------------------------------------------------------------- erasure
def test_with_user_id_an_end_user_is_erased_by_their_own_id(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """ChatLedgerSession(..., user_id=) keeps the items under the user's pseudonym:
    erase_user(principal, user_id) erases them, nothing stored names the user or the
    session id in the clear, another end user is untouched, and the user starts afresh."""
    ledger = make_ledger(encryption=True, busy_timeout=1)
    email = "ann.lee@example.com"
    ann = ChatLedgerSession(f"chat-{email}", ledger, ALICE, user_id=email)
    cid = ChatLedgerSession("chat-cid", ledger, ALICE, user_id="cid")
    run(ann.add_items(ITEMS[:2]))
    run(cid.add_items(ITEMS[:2]))
    ann_key = run(ann.ledger_key())
    assert "ann.lee" not in ann_key and "ann.lee" not in stored_text(ledger)
    assert ledger.history(ALICE, ann_key)[0].actor.user_id.startswith("p")
    result = ledger.erase_user(ALICE, email)
    assert result.erased == (ann_key,)
    assert ledger.history(ALICE, ann_key)[-1].type == "Erased"
    assert "Order 9" not in ledger.session(ALICE, ann_key).model_dump_json()
    assert "ann.lee" not in stored_text(ledger)
    assert run(ann.get_items()) == []  # a new pseudonym: a fresh, empty session
    assert run(ann.ledger_key()) != ann_key
    assert run(cid.get_items()) == ITEMS[:2]
    run(ann.add_items(ITEMS[2:3]))
    assert run(ann.get_items()) == ITEMS[2:3]


def test_without_user_id_the_principal_s_user_owns_the_session(ledger: SessionLedger) -> None:
    """With no user_id the ledger key is the session id and the session is the principal's
    user's: erase_user of that user erases it."""
    session = ChatLedgerSession("agent-9", ledger, ALICE)
    run(session.add_items(ITEMS[:1]))
    assert run(session.ledger_key()) == "agent-9"
    assert ledger.erase_user(ALICE, "alice", allow_unencrypted=True).erased == ("agent-9",)
