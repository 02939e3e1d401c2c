"""The agent's working state: task state, extraction watermark, compaction handshake, commit
tasks, snapshot archives, imported usage and retention ratios -- on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import pytest

from chatledger import (
    ConcurrencyConflict,
    InvalidInput,
    ReadModels,
    SessionLedger,
    SessionRegistry,
    TaskState,
)
from support import ALICE, BOB, FixedClock, FlakySummarizer, store_state

TASK = TaskState(
    objective="Get order 7 delivered",
    active_task="Ask the carrier",
    constraints=("No refunds above 50 EUR",),
    blockers=("Carrier API down",),
    notes="Customer prefers email.",
)


def test_task_state_is_recorded_and_readable_at_every_version(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """set_task records the working state; session() shows it now and as of earlier versions;
    it survives reopening the store."""
    ledger = make_ledger()
    ledger.add_message(ALICE, "s1", "user", "Where is order 7?")
    assert ledger.set_task(ALICE, "s1", TASK) == TASK
    assert ledger.session(ALICE, "s1").task == TASK
    assert ledger.session(ALICE, "s1", at_version=2).task == TaskState()
    ledger.set_task(ALICE, "s1", {"objective": "Refund instead"})
    assert ledger.session(ALICE, "s1", at_version=3).task == TASK
    assert make_ledger(cache_size=0).session(ALICE, "s1").task.objective == "Refund instead"


def test_a_failed_commit_leaves_the_whole_working_state_as_it_was(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Buffer, counters, task state, watermark and a pending compaction token all stay."""
    summarizer = FlakySummarizer()
    ledger = make_ledger(summarizer=summarizer)
    for i in range(3):
        ledger.add_message(ALICE, "s1", "user", f"Question {i}.")
    ledger.set_task(ALICE, "s1", TASK)
    ledger.advance_extraction(ALICE, "s1", 2, "Two questions about order 7.")
    token = ledger.prepare_compaction(ALICE, "s1")
    before = ledger.session(ALICE, "s1").model_dump(exclude={"version", "updated_at"})
    summarizer.failing = True
    assert ledger.commit(ALICE, "s1").status == "failed"
    after = ledger.session(ALICE, "s1")
    assert after.model_dump(exclude={"version", "updated_at"}) == before
    assert after.pending_compaction == token


def test_the_watermark_moves_down_with_items_it_had_read(ledger: SessionLedger) -> None:
    """Removing or committing items below the watermark moves it down by as many."""
    ids = [ledger.add_message(ALICE, "s1", "user", f"m{i}").message_id for i in range(5)]
    ledger.advance_extraction(ALICE, "s1", 3, "read three")
    ledger.remove_items(ALICE, "s1", [ids[1], ids[4]])  # one below, one above
    assert ledger.session(ALICE, "s1").watermark == 2
    ledger.commit_snapshot(ALICE, "s1", [ids[0]])
    view = ledger.session(ALICE, "s1")
    assert (view.watermark, view.extraction_summary) == (1, "read three")
    with pytest.raises(InvalidInput, match="watermark"):
        ledger.advance_extraction(ALICE, "s1", 9, "too far")


def test_a_commit_may_derive_the_objective(make_ledger: Callable[..., SessionLedger]) -> None:
    """With derive_objective, a commit sets the objective from the first user message."""
    ledger = make_ledger(derive_objective=True)
    ledger.add_message(ALICE, "s1", "user", "Please move my parcel to Berlin. It is urgent.")
    ledger.commit(ALICE, "s1")
    assert ledger.session(ALICE, "s1").task.objective == "Please move my parcel to Berlin."
    assert ledger.history(ALICE, "s1")[-1].type == "TaskStateChanged"
    ledger.add_message(ALICE, "s1", "user", "Another topic entirely.")
    ledger.commit(ALICE, "s1")  # an objective is set: it stays
    assert ledger.session(ALICE, "s1").task.objective == "Please move my parcel to Berlin."


def test_the_working_state_survives_eviction_and_adoption(ledger: SessionLedger) -> None:
    """A registry that retains history and adopts an evicted session finds its task state, in
    its own tenant."""

    async def scenario() -> None:
        async with SessionRegistry(ledger, ALICE, max_sessions=1, retain_history=True) as registry:
            live = await registry.create()
            await live.add_message("user", "hello")
            ledger.set_task(ALICE, live.session_id, TASK)
            await registry.create()  # the cap evicts the first one
            again, adopted = await registry.get_or_adopt(live.session_id)
            assert adopted and (await again.view()).task == TASK

    asyncio.run(scenario())
    with pytest.raises(Exception):  # noqa: B017 -- another tenant: refused
        ledger.session(BOB, "whatever", account_id="acme")


# ----------------------------------------------------------- the handshake
def test_a_compaction_token_is_consumed_once(ledger: SessionLedger) -> None:
    """prepare -> complete works once; a second prepare while pending and a second complete
    are refused without recording anything."""
    ledger.add_message(ALICE, "s1", "user", "hi")
    ledger.advance_extraction(ALICE, "s1", 1, "greeting")
    token = ledger.prepare_compaction(ALICE, "s1", ttl_seconds=60)
    assert (token.message_count, token.watermark) == (1, 1)
    state = store_state(ledger)
    with pytest.raises(ConcurrencyConflict, match="pending"):
        ledger.prepare_compaction(ALICE, "s1")
    assert store_state(ledger) == state
    ledger.complete_compaction(ALICE, "s1", token.token)
    assert ledger.session(ALICE, "s1").pending_compaction is None
    state = store_state(ledger)
    with pytest.raises(InvalidInput, match="No compaction"):
        ledger.complete_compaction(ALICE, "s1", token.token)
    assert store_state(ledger) == state


def test_an_expired_compaction_token_is_refused_and_cleared(
    ledger: SessionLedger, clock: FixedClock
) -> None:
    """Past its TTL the token is refused, and the refusal clears it (a recorded event)."""
    ledger.add_message(ALICE, "s1", "user", "hi")
    token = ledger.prepare_compaction(ALICE, "s1", ttl_seconds=30)
    clock.now += timedelta(minutes=5)
    with pytest.raises(InvalidInput, match="expired"):
        ledger.complete_compaction(ALICE, "s1", token.token)
    assert ledger.session(ALICE, "s1").pending_compaction is None
    last = ledger.history(ALICE, "s1")[-1]
    assert last.type == "CompactionCleared" and last.event.reason == "expired"  # type: ignore[attr-defined]
    again = ledger.prepare_compaction(ALICE, "s1")  # a new one may be prepared
    assert again.token != token.token


def test_consuming_any_token_clears_an_expired_one(
    ledger: SessionLedger, clock: FixedClock
) -> None:
    """An expired pending token is cleared by a consume whichever token is presented (a
    stale or made-up one too): one CompactionCleared(expired) naming the pending token;
    a wrong token while the pending one is live records nothing."""
    ledger.add_message(ALICE, "s1", "user", "hi")
    token = ledger.prepare_compaction(ALICE, "s1", ttl_seconds=30)
    state = store_state(ledger)
    with pytest.raises(InvalidInput, match="No compaction"):
        ledger.complete_compaction(ALICE, "s1", "not-the-token")  # live: nothing recorded
    assert store_state(ledger) == state
    assert ledger.session(ALICE, "s1").pending_compaction == token
    clock.now += timedelta(minutes=5)
    with pytest.raises(InvalidInput, match="No compaction"):
        ledger.complete_compaction(ALICE, "s1", "not-the-token")
    assert ledger.session(ALICE, "s1").pending_compaction is None
    last = ledger.history(ALICE, "s1")[-1]
    assert last.type == "CompactionCleared"
    assert (last.event.token, last.event.reason) == (token.token, "expired")  # type: ignore[attr-defined]
    versions = ledger.session(ALICE, "s1").version
    with pytest.raises(InvalidInput, match="No compaction"):
        ledger.complete_compaction(ALICE, "s1", token.token)  # cleared: nothing more recorded
    assert ledger.session(ALICE, "s1").version == versions


# ------------------------------------------------- commits, archives, usage
def test_every_commit_has_a_task_record(make_ledger: Callable[..., SessionLedger]) -> None:
    """Commits that wait get a task id too; task() tells its final status, error and result."""
    summarizer = FlakySummarizer()
    ledger = make_ledger(summarizer=summarizer)
    ledger.add_message(ALICE, "s1", "user", "hi")
    done = ledger.commit(ALICE, "s1")
    record = ledger.task(done.task_id or "")
    assert record is not None and (record.status, record.result) == ("completed", done)
    ledger.add_message(ALICE, "s1", "user", "again")
    summarizer.failing = True
    failed = ledger.commit(ALICE, "s1")
    record = ledger.task(failed.task_id or "")
    assert record is not None and record.status == "failed"
    assert record.result is not None and "summarizer exploded" in (record.result.error or "")


def test_a_snapshot_archive_can_leave_the_buffer_alone(ledger: SessionLedger) -> None:
    """commit_snapshot(keep=True, archive_id=...) archives the messages and keeps them live."""
    ids = [ledger.add_message(ALICE, "s1", "user", f"Fact {i}.").message_id for i in range(3)]
    result = ledger.commit_snapshot(ALICE, "s1", ids[:2], keep=True, archive_id="checkpoint-1")
    view = ledger.session(ALICE, "s1")
    assert result.archive_id == "checkpoint-1" and [a.archive_id for a in view.archives] == [
        "checkpoint-1"
    ]
    assert [m.id for m in view.buffer] == ids and view.commit_count == 1
    assert (
        ledger.commit_snapshot(ALICE, "s1", ids[:1], keep=True, archive_id="checkpoint-1").status
        == "failed"
    )


def test_imported_usage_is_merged_with_recorded_calls(ledger: SessionLedger) -> None:
    """Per-tool totals from an earlier system add up with the calls recorded here."""
    ledger.add_message(
        ALICE, "s1", "tool", "ok",
        tool_call={"tool_name": "search", "prompt_tokens": 10, "completion_tokens": 5},
    )  # fmt: skip
    ledger.import_usage(
        ALICE,
        "s1",
        [
            {"tool_name": "search", "call_count": 7, "success_count": 5, "fail_count": 2,
             "prompt_tokens": 700, "completion_tokens": 70},
            {"tool_name": "crm", "call_count": 1, "success_count": 1, "fail_count": 0},
        ],
        source="legacy-v1",
    )  # fmt: skip
    with ReadModels(ledger) as models:
        models.catch_up()
        usage = {u.tool_name: u for u in models.usage(ALICE, "s1")}
    search = usage["search"]
    assert (search.call_count, search.success_count, search.fail_count) == (8, 6, 2)
    assert (search.prompt_tokens, search.completion_tokens, search.total_tokens) == (710, 75, 785)
    assert usage["crm"].call_count == 1
    with pytest.raises(InvalidInput, match="success_count"):
        ledger.import_usage(ALICE, "s1", [{"tool_name": "x", "call_count": 2, "fail_count": 0}])


def test_commits_can_carry_both_retention_ratios(make_ledger: Callable[..., SessionLedger]) -> None:
    """With entity_retention on, a commit stores entity and information retention ratios."""
    ledger = make_ledger(entity_retention=True)
    ledger.add_message(ALICE, "s1", "user", "Use PostgreSQL and AGFS for Project Falcon.")
    ledger.commit(ALICE, "s1")
    metadata = ledger.session(ALICE, "s1").archives[0].metadata
    assert metadata["entity_retention_ratio"] == 1.0
    assert 0.0 < metadata["information_retention_ratio"] <= 1.0
