"""Invariants over random histories (hypothesis).

- The aggregate's own state and the projection folds agree after every event.
- Snapshot + tail replay equals full replay.
- Random add / commit / commit_snapshot / merge sequences, with a randomly
  failing summarizer and archive store, match a simple reference model, and
  a failed operation never changes any view.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatledger import InMemoryArchiveStore, SessionLedger
from chatledger.domain.events import new_id
from chatledger.domain.session import Session
from chatledger.domain.values import ArchiveSummary, Message
from chatledger.projections import project
from support import ALICE, FlakySummarizer

T0 = datetime(2026, 1, 1, tzinfo=UTC)

operation = st.one_of(
    st.tuples(
        st.just("add"),
        st.sampled_from(["user", "assistant", "tool", "system"]),
        st.text(max_size=30),
    ),
    st.tuples(st.just("commit"), st.booleans()),
    st.tuples(
        st.just("snapshot"), st.lists(st.integers(0, 20), min_size=1, max_size=4, unique=True)
    ),
    st.tuples(st.just("merge"), st.integers(1, 3)),
    st.tuples(st.just("evict")),
    st.tuples(st.just("remove"), st.lists(st.integers(0, 20), min_size=1, max_size=3, unique=True)),
    st.tuples(st.just("replace"), st.integers(1, 3), st.text(max_size=20)),
    st.tuples(st.just("state"), st.dictionaries(st.sampled_from("abc"), st.integers(), max_size=2)),
    st.tuples(st.just("delete")),
)


def _drive_aggregate(ops: list[tuple[object, ...]]) -> Session:
    clock = (T0 + timedelta(seconds=i) for i in itertools.count())
    session = Session.start(tenant="acme", key="k", actor=ALICE, timestamp=next(clock))
    for op in ops:
        now = next(clock)
        live = list(session.buffer)
        if op[0] == "add":
            message = Message(id=new_id(), role=op[1], content=op[2], created_at=now)  # type: ignore[arg-type]
            session.add_message(message, actor=ALICE, timestamp=now)
        elif session.deleted and op[0] not in ("state", "delete"):
            continue  # only a new message (or state) starts a deleted session afresh
        elif op[0] in ("commit", "snapshot") and live:
            chosen = live if op[0] == "commit" else [live[i % len(live)] for i in op[1]]  # type: ignore[attr-defined]
            ids = tuple(dict.fromkeys(chosen))
            archive = ArchiveSummary(
                archive_id=new_id(),
                overview="o",
                abstract="a",
                message_ids=ids,
                tokens=1,
                created_at=now,
            )
            session.commit(archive, actor=ALICE, timestamp=now)
        elif op[0] == "commit":
            session.record_commit_failure(
                attempt_id="x", error="e", message_count=0, actor=ALICE, timestamp=now
            )
        elif op[0] == "merge" and len(session.archives) >= 2:
            count = min(len(session.archives), 1 + op[1])  # type: ignore[operator]
            sources = session.archives[:count]
            merged = ArchiveSummary(
                archive_id=new_id(),
                overview="m",
                abstract="m",
                message_ids=tuple(i for a in sources for i in a.message_ids),
                tokens=1,
                created_at=now,
            )
            session.merge_archives(
                merged, [a.archive_id for a in sources], actor=ALICE, timestamp=now
            )
        elif op[0] == "evict":
            session.evict("idle", idle_seconds=1.0, actor=ALICE, timestamp=now)
        elif op[0] == "remove" and live:
            ids = list(dict.fromkeys(live[i % len(live)] for i in op[1]))  # type: ignore[attr-defined]
            session.remove_items(ids, reason="remove", actor=ALICE, timestamp=now)
        elif op[0] == "replace" and live:
            tail = live[-min(len(live), int(op[1])) :]  # type: ignore[call-overload]
            new = Message(id=new_id(), role="assistant", content=str(op[2]), created_at=now)
            session.replace_tail(tail, [new], actor=ALICE, timestamp=now)
        elif op[0] == "delete" and not session.deleted:
            session.delete(actor=ALICE, timestamp=now)
        elif op[0] == "state":
            session.change_state(dict(op[1]), actor=ALICE, timestamp=now)  # type: ignore[call-overload]
    return session


@settings(max_examples=150, deadline=None)
@given(st.lists(operation, max_size=40))
def test_aggregate_state_and_folds_agree_after_every_event(ops: list[tuple[object, ...]]) -> None:
    """For any history, folding any prefix gives the aggregate's state at that version."""
    session = _drive_aggregate(ops)
    events = session.collect_events()
    replayed: Session | None = None
    for n, event in enumerate(events, start=1):
        replayed = event.mutate(replayed)  # type: ignore[arg-type]
        assert replayed is not None
        folded = project(events[:n])  # type: ignore[arg-type]
        assert tuple(replayed.buffer.values()) == folded.buffer.messages
        assert replayed.pending_tokens == folded.buffer.pending_tokens
        assert replayed.turn_count == folded.buffer.turn_count
        assert tuple(replayed.archives) == folded.archives.live
        meta = folded.meta
        assert (replayed.message_count, replayed.commit_count, len(replayed.archives)) == (
            meta.message_count,
            meta.commit_count,
            meta.archive_count,
        )
        assert (replayed.last_commit_at, replayed.updated_at, replayed.evicted) == (
            meta.last_commit_at,
            meta.updated_at,
            meta.evicted,
        )
    assert replayed is not None and replayed.to_state() == session.to_state()


@settings(max_examples=60, deadline=None)
@given(st.lists(operation, min_size=1, max_size=30), st.data())
def test_snapshot_plus_tail_equals_full_replay(
    ops: list[tuple[object, ...]], data: st.DataObject
) -> None:
    """Rebuilding from a snapshot at any version plus the later events equals a full replay."""
    session = _drive_aggregate(ops)
    events = session.collect_events()
    cut = data.draw(st.integers(1, len(events)))
    prefix: Session | None = None
    for event in events[:cut]:
        prefix = event.mutate(prefix)  # type: ignore[arg-type]
    assert prefix is not None
    snapshot = Session.Snapshot.take(prefix)
    assert snapshot.state.archives == ()  # referenced, not embedded
    rebuilt = snapshot.rebuild({e.originator_version: e for e in events[:cut]})
    assert snapshot.matches(rebuilt)
    for event in events[cut:]:
        event.mutate(rebuilt)
    assert rebuilt.to_state() == session.to_state()
    assert rebuilt.version == session.version


@dataclass
class Reference:
    """The simplest model of a session: a list of live ids and a list of archives."""

    buffer: list[str] = field(default_factory=list)
    archives: list[list[str]] = field(default_factory=list)
    commits: int = 0
    messages: int = 0


ledger_operation = st.one_of(
    st.tuples(st.just("add"), st.integers(1, 3)),
    st.tuples(st.just("commit"), st.booleans(), st.booleans()),
    st.tuples(
        st.just("snapshot"),
        st.lists(st.integers(0, 10), min_size=1, max_size=3, unique=True),
        st.booleans(),
    ),
    st.tuples(st.just("merge"), st.booleans()),
)


def test_random_operations_match_the_reference_model(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Random adds, commits, snapshots and merges (some failing) match the reference model."""
    summarizer = FlakySummarizer()
    store = InMemoryArchiveStore()
    ledger = make_ledger(summarizer=summarizer, archive_store=store, snapshot_interval=7)

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(ledger_operation, min_size=1, max_size=15))
    def run(ops: list[tuple[object, ...]]) -> None:
        key = uuid.uuid4().hex
        model = Reference()
        ledger.add_message(ALICE, key, "user", "seed")
        model.buffer.append(ledger.session(ALICE, key).buffer[0].id)
        model.messages = 1
        for op in ops:
            before = ledger.session(ALICE, key)
            if op[0] == "add":
                count = int(op[1])  # type: ignore[call-overload]
                batch = [{"role": "assistant", "content": f"c{i}"} for i in range(count)]
                added = ledger.add_messages(ALICE, key, batch)
                model.buffer += [a.message_id for a in added]
                model.messages += len(added)
            elif op[0] in ("commit", "snapshot"):
                fail_summary, fail_store = (op[1], op[2]) if op[0] == "commit" else (op[2], False)
                summarizer.failing, store.available = bool(fail_summary), not fail_store
                if op[0] == "commit":
                    chosen = list(model.buffer)
                    result = ledger.commit(ALICE, key)
                else:
                    chosen = (
                        list(dict.fromkeys(model.buffer[i % len(model.buffer)] for i in op[1]))
                        if model.buffer
                        else []
                    )  # type: ignore[attr-defined]
                    if not chosen:
                        continue
                    result = ledger.commit_snapshot(ALICE, key, chosen)
                summarizer.failing, store.available = False, True
                if not chosen:
                    assert result.reason == "empty_buffer"
                elif fail_summary or fail_store:
                    assert result.status == "failed"
                    after = ledger.session(ALICE, key)
                    assert after.model_dump(exclude={"version", "updated_at"}) == before.model_dump(
                        exclude={"version", "updated_at"}
                    )
                else:
                    assert result.archived
                    # An archive lists its messages in buffer (chronological) order.
                    model.archives.append([i for i in model.buffer if i in chosen])
                    model.buffer = [i for i in model.buffer if i not in chosen]
                    model.commits += 1
            elif op[0] == "merge":
                summarizer.failing = bool(op[1])
                result = ledger.merge_archives(ALICE, key, threshold=1)
                summarizer.failing = False
                if len(model.archives) >= 2 and not op[1]:
                    assert result.merged
                    model.archives = [[i for a in model.archives for i in a]]
                else:
                    assert not result.merged
                    assert ledger.session(ALICE, key) == before
            view = ledger.session(ALICE, key)
            assert [m.id for m in view.buffer] == model.buffer
            lineage = project(e.event for e in ledger.history(ALICE, key)).archives
            covered = [list(lineage.message_ids(a.archive_id)) for a in view.archives]
            assert covered == model.archives
            assert [a.metadata.get("message_count", len(a.message_ids)) for a in view.archives] == [
                len(ids) for ids in model.archives
            ]
            assert (view.commit_count, view.message_count) == (model.commits, model.messages)

    run()
    assert summarizer.calls > 0  # the commits above really reached the summarizer
