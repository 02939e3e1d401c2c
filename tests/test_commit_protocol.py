"""The commit protocol: a commit archives exactly its snapshot or changes nothing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import pytest

from chatledger import (
    ArchiveSummary,
    CommitResult,
    InMemoryArchiveStore,
    InvalidInput,
    Message,
    SessionLedger,
    Summary,
)
from chatledger.projections import project
from support import ALICE, FlakySummarizer


def _fill(ledger: SessionLedger, key: str = "s1", n: int = 4) -> list[str]:
    return [
        ledger.add_message(
            ALICE, key, "user" if i % 2 == 0 else "assistant", f"Msg {i}. More."
        ).message_id
        for i in range(n)
    ]


def _all_views(ledger: SessionLedger, key: str = "s1") -> tuple[object, ...]:
    """Everything a reader can see, except the version/updated_at of audit-only events."""
    view = ledger.session(ALICE, key)
    folded = project(e.event for e in ledger.history(ALICE, key) if e.type != "CommitFailed")
    return (
        view.model_dump(exclude={"version", "updated_at"}),
        ledger.context(ALICE, key, 10_000).model_dump(exclude={"version"}),
        folded.buffer,
        folded.archives,
        folded.meta.model_dump(exclude={"version", "updated_at"}),
    )


def test_empty_buffer_commit_records_nothing(ledger: SessionLedger) -> None:
    """Committing an empty buffer returns reason empty_buffer and records no event."""
    ids = _fill(ledger, n=1)
    ledger.commit_snapshot(ALICE, "s1", ids)
    before = len(ledger.history(ALICE, "s1"))
    result = ledger.commit(ALICE, "s1")
    assert (result.archived, result.reason) == (False, "empty_buffer")
    assert len(ledger.history(ALICE, "s1")) == before


def test_successful_commit_archives_exactly_the_buffer(ledger: SessionLedger) -> None:
    """Success: the buffer loses the covered messages, commit_count +1, archive recorded."""
    ids = _fill(ledger)
    result = ledger.commit(ALICE, "s1")
    assert result.status == "completed" and result.archived
    view = ledger.session(ALICE, "s1")
    assert view.buffer == ()
    assert view.commit_count == 1
    assert view.last_commit_at is not None
    (archive,) = view.archives
    assert archive.archive_id == result.archive_id
    assert list(archive.message_ids) == ids
    assert archive.overview and archive.abstract
    committed = ledger.history(ALICE, "s1")[-1]
    assert committed.type == "Committed"
    assert list(committed.event.message_ids) == ids  # type: ignore[attr-defined]


@pytest.mark.parametrize("fault", ["summarizer", "archive_store", "required_store_missing"])
def test_failed_commit_changes_no_view_and_records_commit_failed(
    make_ledger: Callable[..., SessionLedger], fault: str
) -> None:
    """A failing summarizer or archive store yields status failed, CommitFailed, views intact."""
    summarizer = FlakySummarizer()
    store = InMemoryArchiveStore()
    options: dict[str, object] = {"summarizer": summarizer}
    if fault == "required_store_missing":
        options["require_archive_store"] = True
    else:
        options["archive_store"] = store
    ledger = make_ledger(**options)
    _fill(ledger)
    ledger.commit(ALICE, "s1") if fault != "required_store_missing" else None
    _fill(ledger, n=3)
    before = _all_views(ledger)
    live = len(ledger.session(ALICE, "s1").buffer)
    summarizer.failing = fault == "summarizer"
    store.available = fault != "archive_store"

    result = ledger.commit(ALICE, "s1")

    assert result.status == "failed" and not result.archived
    expected = {
        "summarizer": "summarizer exploded",
        "archive_store": "archive store unavailable",
        "required_store_missing": "archive store unavailable",
    }[fault]
    assert result.error == expected
    assert _all_views(ledger) == before
    failed = ledger.history(ALICE, "s1")[-1]
    assert failed.type == "CommitFailed"
    assert failed.event.error == expected  # type: ignore[attr-defined]
    assert failed.event.message_count == live  # type: ignore[attr-defined]


class _NulSummarizer:
    """Summarises into text holding NUL, or fails with an error message holding NUL."""

    def __init__(self, *, fail: bool) -> None:
        self.fail = fail

    def summarize(self, messages: Sequence[Message]) -> Summary:
        if self.fail:
            raise RuntimeError("upstream said \x00 and\nstopped")
        return Summary(overview="nul\x00here", abstract="a")

    def merge(self, archives: Sequence[ArchiveSummary]) -> Summary:
        return self.summarize(())


@pytest.mark.parametrize("fail", [False, True], ids=["nul-in-summary", "nul-in-error"])
def test_nul_from_a_summarizer_fails_the_commit_cleanly(
    make_ledger: Callable[..., SessionLedger], fail: bool
) -> None:
    """NUL from a summarizer (which text columns cannot hold) gives a recorded CommitFailed."""
    ledger = make_ledger(summarizer=_NulSummarizer(fail=fail))
    _fill(ledger)
    result = ledger.commit(ALICE, "s1")
    assert result.status == "failed"
    assert ("NUL" in (result.error or "")) != fail
    failed = ledger.history(ALICE, "s1")[-1]
    assert failed.type == "CommitFailed"
    (entry,) = ledger.audit(ALICE, session="s1", types=["CommitFailed"])
    assert entry.summary.startswith("commit of 4 messages failed: ")
    assert not any(ord(c) < 32 for c in entry.summary)


def test_commit_after_a_failure_succeeds(make_ledger: Callable[..., SessionLedger]) -> None:
    """A failed commit leaves the session usable: the next commit archives everything."""
    summarizer = FlakySummarizer()
    ledger = make_ledger(summarizer=summarizer)
    ids = _fill(ledger)
    summarizer.failing = True
    assert ledger.commit(ALICE, "s1").status == "failed"
    summarizer.failing = False
    result = ledger.commit(ALICE, "s1")
    assert result.archived and list(result.message_ids) == ids


def test_archive_body_goes_to_the_archive_store(make_ledger: Callable[..., SessionLedger]) -> None:
    """With an archive store, the commit writes the full messages of the archive there."""
    store = InMemoryArchiveStore()
    ledger = make_ledger(archive_store=store)
    ids = _fill(ledger)
    result = ledger.commit(ALICE, "s1")
    assert result.archive_id is not None
    body = store.get(result.archive_id)
    assert body is not None
    assert [m.id for m in body.messages] == ids
    assert body.key == "s1" and body.tenant == "acme"


def test_commit_snapshot_archives_only_the_named_messages(ledger: SessionLedger) -> None:
    """commit_snapshot archives exactly the given ids; every other message stays live."""
    ids = _fill(ledger, n=5)
    result = ledger.commit_snapshot(ALICE, "s1", [ids[1], ids[3]])
    assert result.archived
    view = ledger.session(ALICE, "s1")
    assert [m.id for m in view.buffer] == [ids[0], ids[2], ids[4]]
    assert list(view.archives[0].message_ids) == [ids[1], ids[3]]


@pytest.mark.parametrize("bad", [["nope"], [], ["dup", "dup"], "not-a-list", [3]])
def test_commit_snapshot_with_bad_ids_records_nothing(ledger: SessionLedger, bad: object) -> None:
    """Unknown, duplicate, empty or non-string ids raise InvalidInput and record nothing."""
    _fill(ledger)
    before = ledger.history(ALICE, "s1")
    with pytest.raises(InvalidInput):
        ledger.commit_snapshot(ALICE, "s1", bad)  # type: ignore[arg-type]
    assert ledger.history(ALICE, "s1") == before


class _GatedSummarizer:
    """Blocks inside summarize() until released, to hold a commit in flight."""

    def __init__(self) -> None:
        from chatledger import ExtractiveSummarizer

        self.inner = ExtractiveSummarizer()
        self.entered = threading.Event()
        self.release = threading.Event()

    def summarize(self, messages: Sequence[Message]) -> Summary:
        self.entered.set()
        assert self.release.wait(30)
        return self.inner.summarize(messages)

    def merge(self, archives: Sequence[ArchiveSummary]) -> Summary:
        return self.inner.merge(archives)


def test_second_commit_while_one_is_in_flight_is_refused(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """While a commit is in flight, another returns commit_in_progress and records nothing."""
    gate = _GatedSummarizer()
    ledger = make_ledger(summarizer=gate)
    _fill(ledger)
    started = ledger.commit(ALICE, "s1", wait=False)
    assert gate.entered.wait(30)
    events_before = len(ledger.history(ALICE, "s1"))
    second = ledger.commit(ALICE, "s1")
    assert (second.archived, second.reason) == (False, "commit_in_progress")
    assert len(ledger.history(ALICE, "s1")) == events_before
    gate.release.set()
    assert _wait_task(ledger, started).status == "completed"


def test_messages_added_during_a_commit_stay_live(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """A commit covers its snapshot only: messages added while it runs stay in the buffer."""
    gate = _GatedSummarizer()
    ledger = make_ledger(summarizer=gate)
    ids = _fill(ledger, n=3)
    started = ledger.commit(ALICE, "s1", wait=False)
    assert gate.entered.wait(30)
    late = ledger.add_message(ALICE, "s1", "user", "arrived mid-commit").message_id
    gate.release.set()
    result = _wait_task(ledger, started)
    assert result.archived and list(result.message_ids) == ids
    assert [m.id for m in ledger.session(ALICE, "s1").buffer] == [late]


def _wait_task(ledger: SessionLedger, started: CommitResult) -> CommitResult:
    assert started.status == "processing" and started.task_id
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        task = ledger.task(started.task_id)
        assert task is not None
        if task.status != "processing":
            assert task.result is not None
            return task.result
        time.sleep(0.01)
    raise AssertionError("commit task did not finish")


def test_async_commit_reports_through_task(make_ledger: Callable[..., SessionLedger]) -> None:
    """wait=False returns processing + task id; task() later reports the same outcome."""
    summarizer = FlakySummarizer()
    ledger = make_ledger(summarizer=summarizer)
    _fill(ledger)
    ok = _wait_task(ledger, ledger.commit(ALICE, "s1", wait=False))
    assert ok.status == "completed" and ok.archived
    _fill(ledger)
    summarizer.failing = True
    failed_start = ledger.commit(ALICE, "s1", wait=False)
    failed = _wait_task(ledger, failed_start)
    assert failed.status == "failed" and failed.error == "summarizer exploded"
    task = ledger.task(failed_start.task_id or "")
    assert task is not None and task.status == "failed"
    assert ledger.task("no-such-task") is None


def test_entity_retention_ratio_is_stored_only_when_enabled(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """entity_retention=True stores entity_retention_ratio in archive metadata; off: absent."""
    for enabled in (True, False):
        ledger = make_ledger(entity_retention=enabled)
        key = f"s-{enabled}"
        ledger.add_message(
            ALICE, key, "user", "Deploy `api_server` to Kubernetes. Then ping Alice."
        )
        ledger.commit(ALICE, key)
        metadata = ledger.session(ALICE, key).archives[0].metadata
        assert ("entity_retention_ratio" in metadata) is enabled
        if enabled:
            assert 0.0 <= metadata["entity_retention_ratio"] <= 1.0


def _archives(ledger: SessionLedger, n: int, key: str = "s1") -> list[str]:
    for i in range(n):
        ledger.add_message(ALICE, key, "user", f"Topic {i} about Widget{i}.")
        ledger.commit(ALICE, key)
    return [a.archive_id for a in ledger.session(ALICE, key).archives]


def test_merge_replaces_oldest_archives_with_one(ledger: SessionLedger) -> None:
    """Above the threshold, the oldest archives become one ArchiveMerged archive, lineage kept."""
    ids = _archives(ledger, 5)
    result = ledger.merge_archives(ALICE, "s1", threshold=3)
    assert result.merged
    assert list(result.source_archive_ids) == ids[:3]
    live = [a.archive_id for a in ledger.session(ALICE, "s1").archives]
    assert live == [result.archive_id, ids[3], ids[4]]
    history = project(e.event for e in ledger.history(ALICE, "s1")).archives
    merged = history.record(result.archive_id or "")
    assert merged is not None and list(merged.merged_from) == ids[:3]
    assert all(history.record(i).merged_into == result.archive_id for i in ids[:3])  # type: ignore[union-attr]


def test_merge_with_fewer_than_two_archives_does_nothing(ledger: SessionLedger) -> None:
    """Fewer than two live archives: no merge, nothing recorded."""
    _archives(ledger, 1)
    before = ledger.history(ALICE, "s1")
    result = ledger.merge_archives(ALICE, "s1", threshold=1)
    assert (result.merged, result.reason) == (False, "too_few_archives")
    assert ledger.history(ALICE, "s1") == before


def test_merge_at_or_below_threshold_does_nothing(ledger: SessionLedger) -> None:
    """At or below the threshold nothing is merged."""
    _archives(ledger, 3)
    assert ledger.merge_archives(ALICE, "s1", threshold=3).reason == "below_threshold"


def test_failed_merge_changes_nothing(make_ledger: Callable[..., SessionLedger]) -> None:
    """A summarizer failure during a merge leaves archives and history unchanged."""
    summarizer = FlakySummarizer()
    ledger = make_ledger(summarizer=summarizer)
    _archives(ledger, 4)
    before = (ledger.session(ALICE, "s1"), ledger.history(ALICE, "s1"))
    summarizer.failing = True
    result = ledger.merge_archives(ALICE, "s1", threshold=2)
    assert not result.merged and result.error == "summarizer exploded"
    assert (ledger.session(ALICE, "s1"), ledger.history(ALICE, "s1")) == before


def test_finished_async_tasks_are_bounded(
    make_ledger: Callable[..., SessionLedger], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the newest finished commit tasks are remembered, so memory stays bounded."""
    from chatledger.service import commits

    monkeypatch.setattr(commits, "KEPT_TASKS", 2)
    ledger = make_ledger()
    started = []
    for i in range(3):
        ledger.add_message(ALICE, f"s{i}", "user", "hi")
        started.append(ledger.commit(ALICE, f"s{i}", wait=False))
        _wait_task(ledger, started[-1])
    assert ledger.task(started[0].task_id or "") is None
    assert all(ledger.task(s.task_id or "") is not None for s in started[1:])
