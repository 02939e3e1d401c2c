"""Persisted read models: working set, archive history, audit log, usage, idle eviction.

Every test runs on SQLite and PostgreSQL. The service is used directly
(``ReadModels(ledger)``); catch-up is explicit unless a test starts the
follower thread. The hypothesis test pins the core promise: replaying the
whole log in one go (a rebuild) gives exactly the rows that incremental
processing in arbitrary small batches gave, and both agree with the aggregate.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from chatledger import (
    AccessDenied,
    Evicted,
    InvalidInput,
    Principal,
    SessionLedger,
    StoreUnavailable,
)
from chatledger.adapters.schema import LOG_START
from chatledger.adapters.sql_read_models import READ_MODEL_NAMES, WorkingSetModel, dump_rows
from chatledger.domain.identity import session_id
from chatledger.domain.session import Session
from chatledger.projections.archive_events import ARCHIVE_EVENT_TYPES, archive_event_from_event
from chatledger.projections.facts import FACT_COLUMNS, stored_facts
from chatledger.read_models import ProjectionTimeout, ReadModels
from support import ADMIN, ALICE, BOB, FixedClock, FlakySummarizer

SEARCH = {"tool_name": "search", "prompt_tokens": 10, "completion_tokens": 5}


@pytest.fixture
def open_models() -> Iterator[Callable[..., ReadModels]]:
    """Open ReadModels on a ledger (closed at the end of the test)."""
    opened: list[ReadModels] = []

    def make(ledger: SessionLedger, **kwargs: Any) -> ReadModels:
        models = ReadModels(ledger, **kwargs)
        opened.append(models)
        return models

    yield make
    for models in opened:
        models.close()


@pytest.fixture
def models(ledger: SessionLedger, open_models: Callable[..., ReadModels]) -> ReadModels:
    """Read models of the test ledger, in its own database."""
    return open_models(ledger)


def snapshot(models: ReadModels) -> dict[str, Any]:
    """Every row of every read model, sorted."""
    with models.engine.connect() as connection:
        return {name: dump_rows(connection, name) for name in READ_MODEL_NAMES}


def event_count(ledger: SessionLedger) -> int:
    with ledger.core.store.event_recorder.engine.connect() as connection:
        return int(connection.execute(text("SELECT COUNT(*) FROM chatledger_events")).scalar_one())


# ------------------------------------------------------------- working set
def test_working_set_lists_live_sessions_most_recently_active_first(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """Sessions come newest activity first; touching an old one moves it to the top."""
    for key in ("s1", "s2", "s3"):
        ledger.add_message(ALICE, key, "user", f"hello {key}")
    ledger.add_message(ALICE, "s1", "assistant", "back again")
    models.catch_up()
    rows = models.working_set(ALICE)
    assert [r.session_key for r in rows] == ["s1", "s3", "s2"]
    assert [r.session_key for r in models.working_set(ALICE, order="created")] == [
        "s3",
        "s2",
        "s1",
    ]
    assert [r.session_key for r in models.working_set(ALICE, order="key")] == ["s1", "s2", "s3"]
    assert [r.session_key for r in models.working_set(ALICE, limit=1, offset=1)] == ["s3"]


def test_working_set_row_matches_the_session(ledger: SessionLedger, models: ReadModels) -> None:
    """Counters, tokens, turns, commits, archives and times equal the aggregate's."""
    ledger.add_messages(
        ALICE,
        "s",
        [{"role": "user", "content": "x" * 40}, {"role": "assistant", "content": "y" * 80}],
    )
    ledger.commit(ALICE, "s")
    ledger.add_message(ALICE, "s", "user", "z" * 12)
    models.catch_up()
    (row,) = models.working_set(ALICE)
    view = ledger.session(ALICE, "s")
    assert (row.account_id, row.user_id, row.agent_id) == ("acme", "alice", "support-bot")
    assert row.session_id == view.session_id
    assert row.message_count == view.message_count == 3
    assert row.pending_tokens == view.pending_tokens == 3
    assert row.turn_count == view.turn_count == 1
    assert row.commit_count == row.archive_count == 1
    assert row.last_commit_at == view.last_commit_at
    assert row.created_at == view.created_at
    assert row.last_activity_at == view.updated_at
    assert row.status == "live"
    assert row.version == view.version


def test_members_see_their_account_and_admins_see_all(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """Tenant filtering: a member lists only its account; an admin lists every account."""
    ledger.add_message(ALICE, "a", "user", "hi")
    ledger.add_message(BOB, "b", "user", "hi")
    models.catch_up()
    assert [r.account_id for r in models.working_set(ALICE)] == ["acme"]
    assert [r.account_id for r in models.working_set(BOB)] == ["globex"]
    assert sorted(r.account_id for r in models.working_set(ADMIN)) == ["acme", "globex"]
    assert [r.session_key for r in models.working_set(ADMIN, account_id="globex")] == ["b"]
    with pytest.raises(AccessDenied):
        models.working_set(ALICE, account_id="globex")


def test_bad_query_arguments_are_invalid_input(models: ReadModels) -> None:
    """Bad pages, orders, datetimes and event types raise InvalidInput, never a driver error."""
    with pytest.raises(InvalidInput):
        models.working_set(ALICE, limit=0)
    with pytest.raises(InvalidInput):
        models.working_set(ALICE, order="size")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        models.audit(ALICE, since=ledger_time().replace(tzinfo=None))
    with pytest.raises(InvalidInput):
        models.audit(ALICE, types=["Exploded"])
    with pytest.raises(InvalidInput):
        models.rebuild("nonsense")
    with pytest.raises(InvalidInput):
        models.wait_for_projections(-1)


def ledger_time() -> Any:
    return FixedClock().now


# --------------------------------------------------------- archive history
def test_archive_history_keeps_merged_archives_with_lineage(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """Live archives equal the session's; merged ones stay, pointing to their merge."""
    for n in range(3):
        ledger.add_message(ALICE, "s", "user", f"message {n}")
        ledger.commit(ALICE, "s")
    merge = ledger.merge_archives(ALICE, "s", threshold=1, max_count=2)
    assert merge.merged
    models.catch_up()
    live = models.archives(ALICE, "s")
    assert [a.archive_id for a in live] == [
        a.archive_id for a in ledger.session(ALICE, "s").archives
    ]
    everything = {a.archive_id: a for a in models.archives(ALICE, "s", include_merged=True)}
    assert len(everything) == 4
    assert everything[merge.archive_id or ""].merged_from == merge.source_archive_ids
    for source in merge.source_archive_ids:
        assert everything[source].merged_into == merge.archive_id
        assert not everything[source].live
    assert everything[merge.archive_id or ""].message_ids == tuple(
        i for s in merge.source_archive_ids for i in everything[s].message_ids
    )
    assert models.archives(BOB, "s") == []  # same key, other tenant: another session


@pytest.mark.skipif(not hasattr(SessionLedger, "fork"), reason="the ledger has no fork yet")
def test_a_fork_starts_with_the_origins_buffer_counters_and_archives(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """A forked session enters the working set with the origin's state as of the fork."""
    ledger.add_message(ALICE, "origin", "user", "one")
    ledger.commit(ALICE, "origin")
    ledger.add_message(ALICE, "origin", "user", "two two two two")
    version = ledger.session(ALICE, "origin").version
    ledger.fork(ALICE, "origin", version, "copy")
    models.catch_up()
    rows = {r.session_key: r for r in models.working_set(ALICE)}
    view = ledger.session(ALICE, "copy")
    copy = rows["copy"]
    assert (copy.message_count, copy.pending_tokens, copy.turn_count) == (
        view.message_count,
        view.pending_tokens,
        view.turn_count,
    )
    assert (copy.commit_count, copy.archive_count) == (view.commit_count, view.archive_count)
    assert [a.archive_id for a in models.archives(ALICE, "copy")] == [
        a.archive_id for a in view.archives
    ]
    assert models.audit(ALICE, session="copy")[0].summary.startswith("forked from 'origin'")
    assert models.usage(ALICE, "copy") == []


@pytest.mark.skipif(not hasattr(SessionLedger, "fork"), reason="the ledger has no fork yet")
def test_a_fork_keeps_the_message_ids_of_a_merged_archive_it_copies(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """A merged archive copied by a fork lists the messages its (uncopied) sources covered."""
    for n in range(3):
        ledger.add_message(ALICE, "origin", "user", f"question {n}")
        ledger.commit(ALICE, "origin")
    ledger.merge_archives(ALICE, "origin", threshold=1)
    ledger.fork(ALICE, "origin", ledger.session(ALICE, "origin").version, "copy")
    models.catch_up()
    (merged,) = models.archives(ALICE, "origin")
    (copied,) = models.archives(ALICE, "copy")
    assert copied.archive_id == merged.archive_id
    assert copied.message_ids == merged.message_ids and len(merged.message_ids) == 3


# ---------------------------------------------------------------- audit log
def test_audit_has_one_row_per_event_with_actor_and_summary(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """Each event has one audit row: its position, version, type, actor, time and a summary."""
    ledger.add_message(ALICE, "s", "user", "hello")
    ledger.commit(ALICE, "s")
    ledger.evict(ADMIN, "s", account_id="acme")
    models.catch_up()
    rows = models.audit(ALICE)
    history = ledger.history(ALICE, "s")
    assert [(r.version, r.event_type, r.timestamp) for r in rows] == [
        (e.version, e.type, e.timestamp) for e in history
    ]
    assert [r.position for r in rows] == sorted({r.position for r in rows})
    assert rows[-1].actor.trace_id == "adm" and rows[-1].actor.account_id == "ops"
    assert rows[-1].account_id == "acme" and rows[-1].session_key == "s"
    assert rows[0].summary == "started session 's' in account 'acme'"
    assert rows[1].summary.startswith("user message ")
    assert rows[2].summary.startswith("committed 1 message into archive ")
    assert rows[3].summary == "evicted (admin)"


def test_audit_filters_by_session_time_and_type_and_pages(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """Audit queries filter by session, [since, until), event types, and page by offset."""
    for key in ("a", "b"):
        ledger.add_messages(ALICE, key, [{"role": "user", "content": str(n)} for n in range(3)])
    ledger.add_message(BOB, "a", "user", "not yours")
    models.catch_up()
    only_a = models.audit(ALICE, session="a")
    assert {r.session_key for r in only_a} == {"a"} and len(only_a) == 4
    assert len(models.audit(ALICE)) == 8
    added = models.audit(ALICE, types=["MessageAdded"])
    assert len(added) == 6
    middle = added[2].timestamp
    assert all(r.timestamp >= middle for r in models.audit(ALICE, since=middle))
    assert all(r.timestamp < middle for r in models.audit(ALICE, until=middle))
    pages = [models.audit(ALICE, limit=3, offset=n) for n in (0, 3, 6)]
    assert [r.position for page in pages for r in page] == [r.position for r in models.audit(ALICE)]
    assert {r.account_id for r in models.audit(ADMIN)} == {"acme", "globex"}
    assert {r.account_id for r in models.audit(BOB)} == {"globex"}


# -------------------------------------------------------------------- usage
def test_usage_counts_tool_calls_and_merges_across_batches(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """Calls, outcomes and tokens per tool add up; later batches merge into stored totals."""
    ledger.add_message(ALICE, "s", "tool", "r1", tool_call=SEARCH)
    ledger.add_message(ALICE, "s", "tool", "r2", tool_call={**SEARCH, "status": "error"})
    models.catch_up()
    ledger.add_message(ALICE, "s", "tool", "r3", tool_call={"tool_name": "fetch"})
    ledger.add_message(ALICE, "s", "tool", "r4", tool_call=SEARCH)
    ledger.add_message(BOB, "s", "tool", "r5", tool_call=SEARCH)
    models.catch_up()
    usage = {u.tool_name: u for u in models.usage(ALICE, "s")}
    search = usage["search"]
    assert (search.call_count, search.success_count, search.fail_count) == (3, 2, 1)
    assert (search.prompt_tokens, search.completion_tokens, search.total_tokens) == (30, 15, 45)
    assert usage["fetch"].call_count == 1 and usage["fetch"].total_tokens == 0
    assert {u.account_id for u in models.usage(ADMIN)} == {"acme", "globex"}
    assert [u.account_id for u in models.usage(BOB)] == ["globex"]


# ------------------------------------------------------- read your writes
def test_wait_for_projections_reads_your_own_writes(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """Waiting for a message's position makes it visible, with or without a follower thread."""
    added = ledger.add_message(ALICE, "s", "user", "hello")
    models.wait_for_projections(added.position, timeout=5)
    assert models.working_set(ALICE)[0].message_count == 1
    models.start()
    try:
        again = ledger.add_message(ALICE, "s", "user", "again")
        models.wait_for_projections(again.position, timeout=5)
        assert models.working_set(ALICE)[0].message_count == 2
    finally:
        models.stop()


def test_waiting_for_a_position_never_reached_times_out(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """A position beyond the log raises ProjectionTimeout (a StoreUnavailable) after the timeout."""
    added = ledger.add_message(ALICE, "s", "user", "hello")
    started = time.monotonic()
    with pytest.raises(ProjectionTimeout) as raised:
        models.wait_for_projections(added.position + 100, timeout=0.2)
    assert isinstance(raised.value, StoreUnavailable)
    assert time.monotonic() - started < 5


def test_follower_thread_picks_up_writes_of_another_ledger(
    make_ledger: Callable[..., SessionLedger], open_models: Callable[..., ReadModels]
) -> None:
    """A follower sees events appended by another writer (process) without being woken."""
    reader, writer = make_ledger(), make_ledger()
    models = open_models(reader, poll_interval=0.02)
    models.start()
    added = writer.add_message(ALICE, "s", "user", "from elsewhere")
    deadline = time.monotonic() + 5
    while min(models.positions().values()) < added.position:
        assert time.monotonic() < deadline, "the follower never caught up"
        time.sleep(0.01)
    assert models.last_error is None
    assert [r.session_key for r in models.working_set(ALICE)] == ["s"]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)  # LISTEN/NOTIFY is PG's
def test_postgres_appends_wake_the_listener(
    make_ledger: Callable[..., SessionLedger], open_models: Callable[..., ReadModels]
) -> None:
    """On PostgreSQL an append notifies after it commits, and the listener wakes the follower."""
    reader, writer = make_ledger(), make_ledger()
    projector = open_models(reader).projector
    listener = threading.Thread(target=projector.listen, daemon=True)
    listener.start()
    try:
        assert projector.wakeup.wait(5), "the listener never started"
        time.sleep(0.2)  # LISTEN is in effect once the first wake is set
        projector.wakeup.clear()
        assert not projector.wakeup.wait(0.6)  # nothing appended: nothing wakes it
        writer.add_message(ALICE, "s", "user", "notify me")
        assert projector.wakeup.wait(3), "the append's NOTIFY did not wake the follower"
    finally:
        projector.stop()
        listener.join(5)


# ----------------------------------------------------------------- eviction
def test_evict_idle_evicts_only_idle_sessions_of_the_callers_account(
    ledger: SessionLedger, models: ReadModels, clock: FixedClock
) -> None:
    """Idle live sessions of the member's account get Evicted(idle) with the caller as actor."""
    for key in ("old-b", "old-a"):
        ledger.add_message(ALICE, key, "user", "hi")
        ledger.commit(ALICE, key)
    ledger.add_message(BOB, "bob-old", "user", "hi")
    ledger.commit(BOB, "bob-old")
    clock.now += timedelta(hours=2)
    ledger.add_message(ALICE, "fresh", "user", "hi")
    ledger.commit(ALICE, "fresh")
    assert models.evict_idle(ALICE, 3600) == ["old-a", "old-b"]
    event = ledger.history(ALICE, "old-a")[-1]
    assert isinstance(event.event, Evicted)
    assert event.event.reason == "idle" and event.actor == ALICE
    assert event.event.idle_seconds is not None and event.event.idle_seconds > 7000
    assert not ledger.session(BOB, "bob-old").evicted
    assert not ledger.session(ALICE, "fresh").evicted
    assert models.evict_idle(ALICE, 3600) == []  # already evicted: nothing more to record


def test_admin_evicts_across_accounts_each_in_its_own_tenant(
    ledger: SessionLedger, models: ReadModels, clock: FixedClock
) -> None:
    """An admin's idle sweep covers every account; each event is the session's, actor the admin."""
    ledger.add_message(ALICE, "s", "user", "hi")
    ledger.commit(ALICE, "s")
    ledger.add_message(BOB, "s", "user", "hi")
    ledger.commit(BOB, "s")
    clock.now += timedelta(hours=1)
    assert models.evict_idle(ADMIN, 60) == ["s", "s"]
    for who in (ALICE, BOB):
        last = ledger.history(who, "s")[-1]
        assert isinstance(last.event, Evicted) and last.actor == ADMIN
        assert last.actor.trace_id == "adm"
    models.catch_up()
    assert models.working_set(ADMIN) == []
    assert models.evict_idle(ADMIN, 60, account_id="acme") == []


def test_sessions_with_uncommitted_messages_are_kept_unless_asked(
    ledger: SessionLedger, models: ReadModels, clock: FixedClock
) -> None:
    """skip_pending (the default) keeps sessions with a live buffer; False evicts them too."""
    ledger.add_message(ALICE, "pending", "user", "not committed yet")
    clock.now += timedelta(hours=1)
    assert models.evict_idle(ALICE, 60) == []
    assert models.evict_idle(ALICE, 60, skip_pending=False) == ["pending"]
    view = ledger.session(ALICE, "pending")
    assert view.evicted and len(view.buffer) == 1  # nothing lost: the message is still live


def test_sessions_with_a_commit_in_flight_are_skipped(
    ledger: SessionLedger, models: ReadModels, clock: FixedClock
) -> None:
    """A session whose commit is running in this ledger is not evicted."""
    ledger.add_message(ALICE, "busy", "user", "hi")
    ledger.commit(ALICE, "busy")
    clock.now += timedelta(hours=1)
    sid = session_id("acme", "busy")
    commits = ledger.core.commits
    with pytest.MonkeyPatch.context() as patch:  # as if a commit of "busy" were running
        patch.setattr(commits, "in_flight", lambda candidate: candidate == sid)
        assert models.evict_idle(ALICE, 60) == []
    assert models.evict_idle(ALICE, 60) == ["busy"]


def test_an_evicted_session_keeps_its_history_and_returns_on_a_new_message(
    ledger: SessionLedger, models: ReadModels, clock: FixedClock
) -> None:
    """Eviction hides a session from the live working set only; a new message brings it back."""
    ledger.add_message(ALICE, "s", "user", "hi")
    ledger.commit(ALICE, "s")
    clock.now += timedelta(hours=1)
    assert models.evict_idle(ALICE, 60) == ["s"]
    models.catch_up()
    assert models.working_set(ALICE) == []
    (row,) = models.working_set(ALICE, include_evicted=True)
    assert row.status == "evicted"
    assert len(models.archives(ALICE, "s")) == 1
    assert [r.event_type for r in models.audit(ALICE, session="s")][-1] == "Evicted"
    ledger.add_message(ALICE, "s", "user", "I'm back")
    models.catch_up()
    (row,) = models.working_set(ALICE)
    assert row.status == "live" and row.message_count == 2
    trail = models.audit(ALICE, session="s")
    assert [r.event_type for r in trail][-3:] == ["Evicted", "Reactivated", "MessageAdded"]
    assert trail[-2].summary == "reactivated by a new message (was evicted)"


def test_a_closed_session_leaves_the_working_set_as_closed_until_its_next_message(
    ledger: SessionLedger, models: ReadModels, clock: FixedClock
) -> None:
    """A closed session shows as "closed"; idle eviction leaves it alone; a message reopens it."""
    ledger.add_message(ALICE, "s", "user", "hi")
    ledger.close_session(ALICE, "s")
    models.catch_up()
    assert models.working_set(ALICE) == []
    (row,) = models.working_set(ALICE, include_evicted=True)
    assert row.status == "closed"
    clock.now += timedelta(hours=1)
    assert models.evict_idle(ALICE, 60, skip_pending=False) == []
    ledger.add_message(ALICE, "s", "user", "back again")
    models.catch_up()
    (row,) = models.working_set(ALICE)
    assert row.status == "live" and row.message_count == 2
    reactivated = models.audit(ALICE, session="s", types=["Reactivated"])
    assert [r.summary for r in reactivated] == ["reactivated by a new message (was closed)"]


def test_bad_eviction_arguments_are_invalid_input(models: ReadModels) -> None:
    """A negative limit or a naive 'now' is rejected before anything is recorded."""
    with pytest.raises(InvalidInput):
        models.evict_idle(ALICE, -1)
    with pytest.raises(InvalidInput):
        models.evict_idle(ALICE, 1, now=ledger_time().replace(tzinfo=None))


# ------------------------------------------------- exactly once, rebuilds
OPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "add",
                "add",
                "add",
                "tool",
                "commit",
                "snapshot",
                "merge",
                "fail",
                "evict",
                "close",
                "admin",
                "bob",
                "fork",
            ]
        ),
        st.integers(0, 2),
        st.integers(1, 4),
    ),
    min_size=1,
    max_size=25,
)


def play(
    ledger: SessionLedger, flaky: FlakySummarizer, prefix: str, op: tuple[str, int, int]
) -> None:
    """Apply one random operation (ignoring the ones the ledger legitimately refuses)."""
    kind, index, n = op
    key = f"{prefix}-{index}"
    who: Principal = BOB if kind == "bob" else ALICE
    try:
        if kind in ("add", "bob"):
            roles = ["user", "assistant"]
            messages = [{"role": roles[i % 2], "content": "w" * (i * 7 + 1)} for i in range(n)]
            ledger.add_messages(who, key, messages)
        elif kind == "tool":
            call = {
                "tool_name": f"t{n % 2}",
                "status": "error" if n == 3 else "success",
                "prompt_tokens": n,
                "completion_tokens": 2 * n,
            }
            ledger.add_message(ALICE, key, "tool", "result", tool_call=call)
        elif kind == "admin":
            ledger.add_message(ADMIN, key, "system", "note", account_id="acme")
        elif kind == "commit":
            ledger.commit(ALICE, key)
        elif kind == "snapshot":
            buffer = [m.id for m in ledger.session(ALICE, key).buffer]
            if buffer:
                ledger.commit_snapshot(ALICE, key, buffer[: max(1, len(buffer) // 2)])
        elif kind == "merge":
            ledger.merge_archives(ALICE, key, threshold=1, max_count=n + 1)
        elif kind == "fail":
            flaky.failing = True
            try:
                ledger.commit(ALICE, key)
            finally:
                flaky.failing = False
        elif kind == "evict":
            ledger.evict(ALICE, key)
        elif kind == "close":
            ledger.close_session(ALICE, key)
        elif kind == "fork" and hasattr(ledger, "fork"):
            version = ledger.session(ALICE, key).version
            ledger.fork(ALICE, key, max(1, version - n + 1), f"{key}-fork{version}")
    except Exception as error:  # e.g. committing or evicting a session never started
        if type(error).__name__ not in ("UnknownSession", "InvalidInput"):
            raise


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS, batch=st.integers(1, 7), data=st.data())
def test_rebuild_gives_exactly_the_rows_of_incremental_processing(
    make_ledger: Callable[..., SessionLedger],
    open_models: Callable[..., ReadModels],
    ops: list[tuple[str, int, int]],
    batch: int,
    data: st.DataObject,
) -> None:
    """Random histories, caught up in random small batches, equal a rebuild and the aggregates."""
    flaky = FlakySummarizer()
    ledger = make_ledger(summarizer=flaky)
    models = open_models(ledger, batch_size=batch)
    prefix = f"h{time.monotonic_ns()}"
    for op in ops:
        play(ledger, flaky, prefix, op)
        if data.draw(st.booleans(), label="catch up now"):
            models.catch_up()
    models.catch_up()
    incremental = snapshot(models)
    assert len(models.audit(ADMIN, limit=MAX_ROWS)) == event_count(ledger)
    models.rebuild()
    assert snapshot(models) == incremental
    for row in models.working_set(ADMIN, include_evicted=True, limit=MAX_ROWS):
        who = ADMIN
        view = ledger.session(who, row.session_key, account_id=row.account_id)
        assert (row.message_count, row.pending_tokens, row.turn_count) == (
            view.message_count,
            view.pending_tokens,
            view.turn_count,
        )
        assert (row.commit_count, row.archive_count, row.version) == (
            view.commit_count,
            view.archive_count,
            view.version,
        )
        assert row.status == view.status and (row.status != "live") == view.evicted
        live = [
            a.archive_id for a in models.archives(who, row.session_key, account_id=row.account_id)
        ]
        assert live == [a.archive_id for a in view.archives]
    # The fast JSON path reads every archive-carrying event exactly as the full mapper does.
    log = models.projector.log
    fast = log.archive_events(LOG_START, log.head_cursor())
    app = ledger.core.store
    notifications = app.recorder.select_notifications(1, 100_000)
    identities = {  # from each session's creation event itself, not from stored facts
        n.originator_id: (event.tenant, event.key)
        for n in notifications
        if n.originator_version == 1
        for event in [app.mapper.to_domain_event(n)]
    }
    slow = [
        archive_event_from_event(app.mapper.to_domain_event(n), n.id, *identities[n.originator_id])
        for n in notifications
        if n.topic.rsplit(":", 1)[-1] in ARCHIVE_EVENT_TYPES
    ]
    # The log order is (tx_id, position) on PostgreSQL, where pooled connections hand out
    # spare positions out of commit order; select_notifications reads by position.
    assert sorted(fast, key=lambda e: e.position) == slow


MAX_ROWS = 10_000


def test_two_projectors_racing_never_apply_an_event_twice(
    ledger: SessionLedger, open_models: Callable[..., ReadModels]
) -> None:
    """Two projectors catching up at once (small batches) leave exactly the rows of a rebuild."""
    for n in range(40):
        ledger.add_message(ALICE, f"s{n % 5}", "tool", "r", tool_call=SEARCH)
    first = open_models(ledger, batch_size=3)
    second = open_models(ledger, batch_size=4)
    gate = threading.Event()
    errors: list[BaseException] = []

    def run(models: ReadModels) -> None:
        gate.wait()
        try:
            models.catch_up()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(m,)) for m in (first, second)]
    for thread in threads:
        thread.start()
    gate.set()
    for thread in threads:
        thread.join()
    assert errors == []
    first.catch_up()
    raced = snapshot(first)
    assert sum(u.call_count for u in first.usage(ALICE)) == 40
    first.rebuild()
    assert snapshot(first) == raced


def test_the_projector_never_skips_past_a_writer_still_committing(
    ledger: SessionLedger, models: ReadModels, backend: str
) -> None:
    """An append held open stops the log before it; a later commit is applied only after it."""
    ledger.add_message(ALICE, "first", "user", "hi")
    models.catch_up()
    before = models.positions()
    engine = ledger.core.store.event_recorder.engine
    held = Session.start(tenant="acme", key="held", actor=ALICE, timestamp=ledger_time())
    ((started, counters),) = held.collect_changes()
    row = ledger.core.store.mapper.to_stored_event(started)
    row.__dict__["facts"] = stored_facts(started, "acme", "held", counters)
    raw = engine.raw_connection()
    cursor = raw.cursor()
    if backend == "sqlite":
        # SQLite's append protocol: the write lock, then max(id) + 1.
        cursor.execute("BEGIN IMMEDIATE")
        cursor.execute("SELECT COALESCE(MAX(id), 0) FROM chatledger_events")
        held_position = int(cursor.fetchone()[0]) + 1
        cursor.execute(
            "INSERT INTO chatledger_events (id, originator_id, originator_version, topic, state, "
            f"timestamp_us, hash, {', '.join(FACT_COLUMNS)}) "
            f"VALUES ({', '.join(['?'] * (7 + len(FACT_COLUMNS)))})",
            (
                held_position,
                row.originator_id.hex,
                1,
                row.topic,
                row.state,
                0,
                b"x" * 32,
                *row.facts,
            ),
        )
    else:
        # PostgreSQL's append itself, held before its commit: numbered and chained
        # (a transaction of its own, as always), then inserted in one left open.
        appender = ledger.core.store.event_recorder.postgres
        assert appender is not None
        numbered = appender.number(cursor, [row])
        raw.commit()
        (held_position,) = numbered.positions
        appender.insert(cursor, numbered)
    later: list[int] = []
    writer = threading.Thread(
        target=lambda: later.append(ledger.add_message(BOB, "later", "user", "hi").position)
    )
    writer.start()
    try:
        if backend == "sqlite":
            time.sleep(0.3)
            assert later == []  # one writer at a time: the later one waits for the lock
        else:
            writer.join(timeout=10)  # no global lock: the later writer commits at once
            assert later and later[0] > held_position
            assert [e.session_key for e in models.audit(ADMIN)][-2:] == ["later", "later"]
            with pytest.raises(ProjectionTimeout):
                models.wait_for_projections(later[0], timeout=0.3)
        # Nothing beyond the held append is applied while it may still commit.
        assert models.projector.catch_up() == 0
        assert models.positions() == before
    finally:
        if backend == "sqlite":
            cursor.execute("COMMIT")
        else:
            raw.commit()
        raw.close()
    writer.join(timeout=10)
    assert later
    if backend == "sqlite":
        assert later == [held_position + 2]  # the later writer's Started and message follow
    assert models.catch_up() == 3
    models.wait_for_projections(later[0], timeout=5)
    tail = models.audit(ADMIN)[-3:]
    assert (tail[0].session_key, tail[0].position) == ("held", held_position)
    assert [e.session_key for e in tail] == ["held", "later", "later"]
    assert {r.session_key for r in models.working_set(ADMIN)} == {"first", "held", "later"}


def test_a_changed_version_rebuilds_that_read_model_on_start(
    ledger: SessionLedger, open_models: Callable[..., ReadModels], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bumping a projection's version drops and replays it when read models are next opened."""
    ledger.add_message(ALICE, "s", "user", "hi")
    first = open_models(ledger)
    first.catch_up()
    before = snapshot(first)
    first.close()
    monkeypatch.setattr(WorkingSetModel, "version", WorkingSetModel.version + 1)
    second = open_models(ledger)
    assert second.reset_on_start == ("working_set",)
    assert second.positions()["working_set"] == 0
    assert second.positions()["usage"] > 0
    assert second.catch_up() == 2
    assert snapshot(second) == before


def test_rebuilding_one_read_model_leaves_the_others_alone(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """rebuild(name) rewinds only that model; the result equals what it had."""
    ledger.add_message(ALICE, "s", "tool", "r", tool_call=SEARCH)
    models.catch_up()
    before = snapshot(models)
    assert models.rebuild("usage") == 2
    assert snapshot(models) == before
    assert set(models.positions().values()) == {2}


def test_read_models_can_live_in_a_separate_database(
    ledger: SessionLedger, open_models: Callable[..., ReadModels], tmp_path: Path
) -> None:
    """With a projections URL the read models live there, and the ledger's database has none."""
    models = open_models(ledger, url=f"sqlite:///{tmp_path / 'views.db'}")
    ledger.add_message(ALICE, "s", "user", "hi")
    models.catch_up()
    assert [r.session_key for r in models.working_set(ALICE)] == ["s"]
    with ledger.core.store.event_recorder.engine.connect() as connection:
        names = connection.dialect.get_table_names(connection)
    assert "chatledger_working_set" not in names


def test_a_separate_database_gets_the_same_rows_through_its_staging_table(
    make_ledger: Callable[..., SessionLedger],
    open_models: Callable[..., ReadModels],
    other_database_url: str,
) -> None:
    """Read models in a database of the other kind (facts staged per batch) equal shared ones."""
    flaky = FlakySummarizer()
    ledger = make_ledger(summarizer=flaky)
    for n, kind in enumerate(["msgs", "tool", "commit", "msgs", "merge", "fork", "evict"] * 3):
        play(ledger, flaky, "sep", (kind, n % 3, n))
    shared = open_models(ledger, batch_size=4)
    elsewhere = open_models(ledger, url=other_database_url, batch_size=3)
    shared.catch_up()
    elsewhere.catch_up()
    assert snapshot(elsewhere) == snapshot(shared)
    with elsewhere.engine.connect() as connection:  # the staging table is emptied every batch
        assert (
            connection.execute(text("SELECT COUNT(*) FROM chatledger_projection_stage")).scalar()
            == 0
        )


def test_tables_of_earlier_read_models_are_dropped_when_read_models_open(
    ledger: SessionLedger, open_models: Callable[..., ReadModels]
) -> None:
    """An audit copy and a working-set buffer left by an earlier version go, with their rows."""
    open_models(ledger).close()
    engine = ledger.core.store.event_recorder.engine
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE chatledger_audit (position BIGINT)"))
        connection.execute(text("CREATE TABLE chatledger_working_set_buffer (session_id TEXT)"))
        connection.execute(
            text(
                "INSERT INTO chatledger_projections (name, version, position) "
                "VALUES ('audit', 1, 7)"
            )
        )
        connection.execute(
            text("UPDATE chatledger_projections SET version = 1 WHERE name = 'working_set'")
        )
    models = open_models(ledger)
    assert models.reset_on_start == ("working_set",)
    with engine.connect() as connection:
        names = set(connection.dialect.get_table_names(connection))
        tracked = connection.execute(text("SELECT name FROM chatledger_projections")).scalars()
        assert set(tracked) == set(READ_MODEL_NAMES)
    assert not names & {"chatledger_audit", "chatledger_working_set_buffer"}


def test_read_models_on_too_old_an_sqlite_say_what_they_need(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite before 3.33 (no UPDATE ... FROM) is refused when read models open, clearly."""
    with SessionLedger(f"sqlite:///{tmp_path / 'old.db'}") as ledger:
        dbapi = ledger.core.store.event_recorder.engine.dialect.loaded_dbapi
        monkeypatch.setattr(dbapi, "sqlite_version_info", (3, 31, 1))
        with pytest.raises(StoreUnavailable, match=r"SQLite 3\.33\.0 or newer.*3\.31\.1"):
            ReadModels(ledger)


def test_an_unusable_read_model_database_is_store_unavailable(ledger: SessionLedger) -> None:
    """A projections database that cannot be opened raises StoreUnavailable."""
    with pytest.raises(StoreUnavailable):
        ReadModels(ledger, url="sqlite:////nonexistent-dir/sub/views.db")


# --------------------------------------------- rebuilds in several processes at once
def _rebuild_in_processes(url: str, count: int, *, busy_timeout: str = "10") -> list[Any]:
    """``chatledger rebuild --all`` in ``count`` processes released together; their results."""
    import subprocess
    import sys

    script = (
        "import sys\nfrom chatledger.cli import main\nsys.stdin.readline()\n"
        "sys.exit(main(['rebuild', '--all', '--url', sys.argv[1], '--json']))\n"
    )
    env = {**__import__("os").environ, "CHATLEDGER_BUSY_TIMEOUT": busy_timeout}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(count)
    ]
    try:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outputs = [p.communicate(timeout=120) for p in procs]
        return [(p.returncode, *output) for p, output in zip(procs, outputs, strict=True)]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=60)


def _rows(models: ReadModels) -> dict[str, Any]:
    with models.engine.connect() as connection:
        return {name: dump_rows(connection, name) for name in READ_MODEL_NAMES}


def _big_ledger(make_ledger: Callable[..., SessionLedger]) -> SessionLedger:
    ledger = make_ledger()
    for s in range(12):
        ledger.add_messages(
            ALICE, f"s{s}",
            [{"role": "user", "content": f"m {i}", "tool_call": {"tool_name": "t"}}
             for i in range(250)],
        )  # fmt: skip
        ledger.commit(ALICE, f"s{s}")
    return ledger


def test_rebuilds_in_three_processes_at_once_all_succeed_with_the_same_rows(
    make_ledger: Callable[..., SessionLedger], database_url: str
) -> None:
    """Three processes rebuild every read model at once: each one finishes (none fails with
    "database is locked"), and the rows are those of one rebuild alone."""
    ledger = _big_ledger(make_ledger)
    with ReadModels(ledger) as models:
        models.rebuild()
        alone = _rows(models)
        for _ in range(2):
            outcomes = _rebuild_in_processes(database_url, 3)
            for code, out, err in outcomes:
                assert code == 0 and "locked" not in err, (code, out, err)
            assert _rows(models) == alone


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # (PostgreSQL has no such lock)
def test_a_rebuild_waits_out_a_write_lock_held_past_the_busy_timeout(
    make_ledger: Callable[..., SessionLedger], database_url: str
) -> None:
    """Another process holds SQLite's write lock three times the busy timeout (as a rebuild's
    span of a million events may): a rebuild takes its turn after it instead of failing."""
    import subprocess
    import sys

    ledger = _big_ledger(make_ledger)
    with ReadModels(ledger) as models:
        models.catch_up()  # the read models exist, as where a rebuild is run
    path = database_url.removeprefix("sqlite:///")
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sqlite3, sys, time\nc = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
         "c.execute('BEGIN IMMEDIATE')\nprint('HELD', flush=True)\ntime.sleep(3)\n"
         "c.execute('COMMIT')\n", path],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "HELD"
        started = time.monotonic()
        ((code, _, err),) = _rebuild_in_processes(database_url, 1, busy_timeout="1")
        assert code == 0, err
        assert time.monotonic() - started >= 2  # it waited for the holder
    finally:
        holder.wait(timeout=60)
    with ReadModels(ledger) as models:
        kept = _rows(models)
        models.rebuild()
        assert _rows(models) == kept
