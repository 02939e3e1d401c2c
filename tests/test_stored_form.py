"""The stored form: compact rows, snapshots bounded by the live state, the fast read path.

- Every session event comes back equal from its format-2 row; a ``MessageAdded`` is
  stored in its compact shape, a framework item without its derived text.
- The trusted read of long message runs builds the same messages as the validated
  decode, and ``Session.replay_messages`` the same state as replaying one by one.
- A snapshot references its live archives instead of embedding them: its size does not
  grow with their bodies, and loading from it gives the replayed session.
- A cold load (a new ledger on the same database) equals the validated replay.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from uuid import uuid4

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, text
from test_upgrade_commit_order import old_ledger_url  # noqa: F401 (a fixture)

from chatledger import SessionLedger, StoreUnavailable
from chatledger.adapters.codec import decode, encode, trusted_messages
from chatledger.domain.events import (
    ArchiveMerged,
    Committed,
    CompactionPrepared,
    Forked,
    MessageAdded,
    Started,
    StateChanged,
    TailReplaced,
)
from chatledger.domain.identity import message_id_at
from chatledger.domain.session import Session
from chatledger.domain.timestamps import to_micros
from chatledger.domain.values import ArchiveSummary, Message, Principal, ToolCall
from support import ADMIN, ALICE

T0 = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)
SID = uuid4()
ITEMS: list[dict[str, Any]] = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Where?"}]},
    {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"id": 1}'},
    {"type": "function_call_output", "call_id": "c1", "output": '{"status": "shipped"}'},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Ok."}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It"}]},
    {"unknown": ["shape", 1, 2.5, None, True]},
]

text_ = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
moments = st.sampled_from(
    [T0, T0 + timedelta(seconds=1), T0.astimezone(timezone(timedelta(hours=2)))]
)
principals = st.builds(
    Principal,
    account_id=st.sampled_from(["acme", "globex"]),
    user_id=st.sampled_from(["", "u"]),
    agent_id=st.sampled_from(["", "bot"]),
    role=st.sampled_from(["member", "admin"]),
    trace_id=st.sampled_from(["", "t-1"]),
)


@st.composite
def messages(draw: st.DrawFn, when: datetime) -> Message:
    item = draw(st.none() | st.sampled_from(ITEMS))
    tool = draw(st.none() | st.builds(ToolCall, tool_name=st.just("search")))
    return Message(
        id=draw(st.text("abcdef0123456789", min_size=1, max_size=32)),
        role=draw(st.sampled_from(["system", "developer", "user", "assistant", "tool"])),
        content=draw(text_),
        created_at=draw(st.just(when) | moments),
        name=draw(st.none() | st.just("lookup")),
        tool_call=tool,
        item=item,
    )


@st.composite
def message_added(draw: st.DrawFn) -> MessageAdded:
    """A MessageAdded of SID; its message's id now and then the id of its place (which
    the row then leaves out)."""
    when = draw(moments)
    version = draw(st.integers(2, 10**6))
    message = draw(messages(when))
    if draw(st.booleans()):
        message = message.named(message_id_at(SID, version))
    return MessageAdded(
        originator_id=SID,
        originator_version=version,
        timestamp=when,
        actor=draw(principals),
        message=message,
        idempotency_key=draw(st.none() | st.just("k-1")),
    )


def places(events: list[MessageAdded]) -> list[str]:
    """The ids of the events' places (what a run's reader is given beside the rows)."""
    return [message_id_at(e.originator_id, e.originator_version) for e in events]


def _round_trip(event: Any) -> Any:
    topic, state = encode(event)
    return decode(topic, state, event.originator_id, event.originator_version,
                  to_micros(event.timestamp))  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(message_added())
def test_a_message_comes_back_equal_from_its_compact_row(event: MessageAdded) -> None:
    """Any MessageAdded decodes from its format-2 row to an equal event."""
    topic, state = encode(event)
    assert topic == "MessageAdded" and "timestamp" not in json.loads(state)
    assert _round_trip(event) == event


@settings(max_examples=100, deadline=None)
@given(st.lists(message_added(), min_size=1, max_size=12))
def test_trusted_messages_equal_the_validated_decode(events: list[MessageAdded]) -> None:
    """The unvalidated read of a run of messages builds exactly the validated messages."""
    states = [encode(e)[1] for e in events]
    stamps = [to_micros(e.timestamp) for e in events]
    assert trusted_messages(states, stamps, places(events)) == [e.message for e in events]


def test_a_framework_item_is_stored_without_its_derived_text() -> None:
    """An item's role and text are derived from it on reading, so they are not stored twice."""
    item = ITEMS[4]
    message = Message(id="m", role="assistant", content="It", created_at=T0, item=item)
    event = MessageAdded(
        originator_id=SID, originator_version=2, timestamp=T0, actor=ALICE, message=message
    )
    state = encode(event)[1]
    assert state.count(b'"It"') == 1 and b'"c":' not in state
    assert _round_trip(event) == event


def test_every_kind_of_event_comes_back_equal() -> None:
    """Events of every kind (defaults left out, UTC timestamps in their column) decode equal."""
    archive = ArchiveSummary(archive_id="a1", overview="o", abstract="b", message_ids=("m",),
                             tokens=1, created_at=T0, metadata={"k": [1, 2]})  # fmt: skip
    message = Message(id="m", role="user", content="hi", created_at=T0)
    base = {"originator_id": SID, "timestamp": T0, "actor": ADMIN}
    events = [
        Started(originator_version=1, tenant="acme", key="k",
                originator_topic="chatledger.domain.session:Session", **base),
        Forked(originator_version=1, tenant="acme", key="f", origin_session_id=uuid4(),
               origin_key="k", origin_version=3, buffer=(message,), archives=(archive,),
               message_count=2, commit_count=1, last_commit_at=T0,
               originator_topic="chatledger.domain.session:Session", **base),
        Committed(originator_version=2, archive=archive, kept=True, **base),
        ArchiveMerged(originator_version=3, archive=archive, source_archive_ids=("x", "y"),
                      **base),
        TailReplaced(originator_version=4, removed_ids=("m",), messages=(message,), **base),
        StateChanged(originator_version=5, changes={"a": {"b": None}}, removed=("c",), **base),
        CompactionPrepared(originator_version=6, token="t", expires_at=T0, message_count=1,
                           watermark=0, idempotency_key="key", **base),
    ]  # fmt: skip
    for event in events:
        assert _round_trip(event) == event
    offset = events[2].model_copy(update={"timestamp": T0.astimezone(UTC)})
    assert _round_trip(offset) == offset


@settings(max_examples=100, deadline=None)
@given(st.lists(message_added(), min_size=1, max_size=8), st.integers(0, 3))
def test_replaying_messages_at_once_equals_one_by_one(
    events: list[MessageAdded], prefix: int
) -> None:
    """Session.replay_messages leaves exactly the state of applying each MessageAdded."""
    one = Session.start(tenant="acme", key="k", actor=ALICE, timestamp=T0)
    for n in range(prefix):
        one.add_message(
            Message(id=f"p{n}", role="user", content="x" * n, created_at=T0),
            actor=ALICE, timestamp=T0,
        )  # fmt: skip
    one.collect_events()
    both = [Session.from_state(one.id, one.version, one.to_state()) for _ in range(2)]
    renumbered = [
        e.model_copy(update={"originator_id": one.id, "originator_version": one.version + n})
        for n, e in enumerate(events, start=1)
    ]
    for event in renumbered:
        event.mutate(both[0])
    last = renumbered[-1]
    both[1].replay_messages([e.message for e in renumbered], last.originator_version,
                            last.timestamp)  # fmt: skip
    assert both[0].to_state() == both[1].to_state()
    assert (both[0].version, both[0].modified_on) == (both[1].version, both[1].modified_on)
    assert both[0].counters() == both[1].counters()


def _snapshot_sizes(url: str) -> list[tuple[int, bytes]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT originator_version, state FROM chatledger_snapshots "
                     "ORDER BY originator_version")
            ).all()  # fmt: skip
    finally:
        engine.dispose()
    return [(int(v), bytes(s)) for v, s in rows]


def test_snapshots_do_not_grow_with_the_archives(database_url: str) -> None:
    """Snapshots reference archives: after many commits each is still small, holds no
    archive body, and a new ledger loads the session equal to the one that wrote it."""
    with SessionLedger(database_url, snapshot_interval=10) as ledger:
        for n in range(60):
            ledger.add_messages(
                ALICE, "s", [{"role": "user", "content": f"line {n} " + "x" * 200}] * 10
            )
            ledger.commit(ALICE, "s")
        sizes = _snapshot_sizes(database_url)
        middle = sizes[len(sizes) // 2][0]
        written = ledger.session(ALICE, "s"), ledger.session(ALICE, "s", at_version=middle)
    assert len(sizes) >= 30 and written[0].archive_count == 60
    assert max(len(state) for _, state in sizes) < 3_000
    assert not any(b"overview" in state for _, state in sizes)
    with SessionLedger(database_url, create_tables=False) as cold:
        assert cold.session(ALICE, "s") == written[0]
        assert cold.session(ALICE, "s", at_version=middle) == written[1]
        assert cold.verify(ADMIN).ok


def test_snapshot_bytes_grow_linearly_with_the_commits(database_url: str) -> None:
    """Each snapshot lists every live archive, so snapshots wait longer as archives pile up:
    twice the commits take about twice the snapshot bytes, not four times."""

    def commits(ledger: SessionLedger, count: int) -> int:
        for _ in range(count):
            ledger.add_messages(ALICE, "s", [{"role": "user", "content": "hi"}] * 5)
            ledger.commit(ALICE, "s")
        return sum(len(state) for _, state in _snapshot_sizes(database_url))

    with SessionLedger(database_url, snapshot_interval=10) as ledger:
        half = commits(ledger, 300)
        whole = commits(ledger, 300)
        assert ledger.session(ALICE, "s").archive_count == 600
    assert whole < 2.5 * half


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 30)),
        st.tuples(st.just("items"), st.integers(1, 6)),
        st.tuples(st.just("commit")),
        st.tuples(st.just("remove")),
        st.tuples(st.just("evict")),
        st.tuples(st.just("delete")),
        st.tuples(st.just("state")),
    ),
    max_size=25,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(OPS)
def test_a_cold_load_equals_the_validated_replay(
    make_ledger: Callable[..., SessionLedger], ops: list[tuple[Any, ...]]
) -> None:
    """Whatever a session went through, a new ledger on its database loads it (fast path)
    exactly as the validated replay of every event does, at every version too."""
    ledger = make_ledger(snapshot_interval=7)
    counter = itertools.count()
    ledger.add_message(ALICE, "s", "user", "start")
    for op in ops:
        if op[0] == "add":
            ledger.add_messages(
                ALICE, "s", [{"role": "user", "content": f"m{next(counter)}"}] * op[1]
            )
        elif op[0] == "items":
            ledger.add_items(ALICE, "s", [ITEMS[n % len(ITEMS)] for n in range(op[1])])
        elif op[0] == "commit" and ledger.session(ALICE, "s").buffer:
            ledger.commit(ALICE, "s")
        elif op[0] == "remove" and ledger.session(ALICE, "s").buffer:
            ledger.pop_item(ALICE, "s")
        elif op[0] == "evict":
            ledger.evict(ALICE, "s", reason="admin")
        elif op[0] == "delete":
            ledger.delete_session(ALICE, "s")
            ledger.add_message(ALICE, "s", "user", "again")
        elif op[0] == "state":
            ledger.update_state(ALICE, "s", {"n": next(counter)})
    store = ledger.core.store
    sid = ledger.session(ALICE, "s").session_id
    version = store.load(sid).version
    for at in {1, version // 2 or 1, version}:
        fast = store.load(sid, at)
        slow = store.load(sid, at, trusted=False)
        assert fast.to_state() == slow.to_state()
        assert (fast.version, fast.modified_on, fast.counters()) == (
            slow.version,
            slow.modified_on,
            slow.counters(),
        )


def test_an_old_snapshot_loads_and_the_next_one_references_its_archives(
    old_ledger_url: str,  # noqa: F811 (the fixture imported above)
) -> None:
    """After the upgrade a session keeps its newest snapshot of the old form (archives
    embedded): it still loads and verifies, and the session's next snapshot references the
    archives instead -- found from the events that recorded them."""

    def snapshots() -> list[tuple[int, bytes]]:
        return [(v, s) for v, s in _snapshot_sizes(old_ledger_url)]

    with SessionLedger(old_ledger_url, snapshot_interval=2) as ledger:
        kept = snapshots()
        assert [v for v, _ in kept] == [4, 16]  # each session's newest only
        assert b'"archive_id"' in kept[1][1] and b"archive_refs" not in kept[1][1]
        before = ledger.session(ALICE, "s1")
        assert before.archives
        ledger.add_messages(ALICE, "s1", [{"role": "user", "content": "after the upgrade"}] * 3)
        ledger.commit(ALICE, "s1")
        after = ledger.session(ALICE, "s1")
        newest = max(snapshots())
        assert newest[0] > 16
        assert b'"archive_refs":[[' in newest[1] and b'"archive_id"' not in newest[1]
        assert ledger.verify(ADMIN).ok
    with SessionLedger(old_ledger_url, create_tables=False) as cold:
        assert cold.session(ALICE, "s1") == after
        assert cold.session(ALICE, "s1", at_version=before.version) == before


@pytest.mark.parametrize(
    "payload",
    [b"not json", b'{"a":["acme"],"i":"m5"}', b'{"a":["acme"],"i":"m5","r":"user","c":"x","z":1}'],
)
def test_an_edited_message_in_a_run_is_a_clear_error_on_load(
    database_url: str, payload: bytes
) -> None:
    """A message row edited by hand inside a long run is not read on trust: a cold load
    raises StoreUnavailable pointing at verify(), which names the altered version."""
    with SessionLedger(database_url) as ledger:
        ledger.add_messages(ALICE, "s", [{"role": "user", "content": f"m{n}"} for n in range(9)])
        sid = ledger.session(ALICE, "s").session_id
    engine = create_engine(database_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                text(
                    "UPDATE chatledger_events SET state = :state "
                    "WHERE originator_id = :sid AND originator_version = 5"
                ),
                {"state": payload, "sid": sid.hex if database_url.startswith("sqlite") else sid},
            )
    finally:
        engine.dispose()
    with SessionLedger(database_url, create_tables=False) as cold:
        with pytest.raises(StoreUnavailable, match="verify"):
            cold.session(ALICE, "s")
        issues = cold.verify(ADMIN).issues
        assert [(i.version, i.reason) for i in issues] == [(5, "hash mismatch")]
