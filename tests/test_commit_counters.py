"""Commit counters are stored only on the rows of events that change archives.

Only ``Committed``, ``ArchiveMerged``, ``Forked`` and ``Deleted`` change a
session's commit count, live archive count and last commit time, so a slim
row of any other event leaves them empty (0, 0, NULL) and readers take them
from the session's newest archive-changing row at or before it
(``chatledger.projections.facts``, ``fact_reads.fill_counters``). The
timeline, its samples and the working set must give the counters a replay
gives; verify must still find an edited counter.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, text

from chatledger import SessionLedger
from chatledger.read_models import ReadModels
from support import ADMIN, ALICE


def _history(ledger: SessionLedger) -> None:
    """Messages, two commits, a merge, more messages, a deletion and a restart."""
    for round_ in range(3):
        ledger.add_messages(
            ALICE, "s", [{"role": "user", "content": f"m{round_}.{n}"} for n in range(3)]
        )
        if round_ < 2:
            ledger.commit(ALICE, "s")
    ledger.merge_archives(ALICE, "s", threshold=1)
    ledger.add_message(ALICE, "s", "assistant", "after the merge")
    ledger.delete_session(ALICE, "s")
    ledger.add_message(ALICE, "s", "user", "afresh")


def _replayed(ledger: SessionLedger, version: int) -> tuple[Any, ...]:
    """The session's commit counters after ``version``, replayed (deleted or not)."""
    store = ledger.core.store
    session = store.load(ledger.session(ALICE, "s").session_id, version)
    return session.commit_count, len(session.archives), session.last_commit_at


def _stored(ledger: SessionLedger) -> list[tuple[Any, ...]]:
    engine = ledger.core.store.event_recorder.engine
    with engine.connect() as connection:
        return [
            tuple(row)
            for row in connection.execute(
                text(
                    "SELECT topic, commit_count, archive_count, last_commit_us "
                    "FROM chatledger_events WHERE originator_version > 1 ORDER BY id"
                )
            )
        ]


def test_only_archive_changing_rows_store_the_commit_counters(make_ledger: Any) -> None:
    """After a commit, the rows of messages store no commit counters (0, 0, NULL); the
    rows of commits, merges and deletions do."""
    ledger = make_ledger()
    _history(ledger)
    rows = _stored(ledger)
    assert {row[1:] for row in rows if row[0] == "MessageAdded"} == {(0, 0, None)}
    committed = [row[1:] for row in rows if row[0] == "Committed"]
    assert [row[:2] for row in committed] == [(1, 1), (2, 2)] and committed[1][2] is not None
    assert ledger.verify(ADMIN, deep=True).ok


def test_the_timeline_and_its_samples_give_the_replayed_counters(make_ledger: Any) -> None:
    """Every timeline entry -- paged from either end, or sampled -- shows the commit count,
    live archive count and last commit time the session had after that event."""
    ledger = make_ledger()
    _history(ledger)
    with ReadModels(ledger) as models:
        whole = models.timeline(ALICE, "s", limit=1000)
        pages = models.timeline(ALICE, "s", after_version=6, limit=4) + models.timeline(
            ALICE, "s", newest=True, limit=3
        )
        sample = models.timeline_sample(ALICE, "s", points=5)
    assert len(whole) > 10 and len(sample) == 5
    for entry in [*whole, *pages, *sample]:
        shown = (entry.commit_count, entry.archive_count, entry.last_commit_at)
        assert shown == _replayed(ledger, entry.version), entry.version
    assert any(e.commit_count == 2 and e.event_type == "MessageAdded" for e in whole)


def test_the_working_set_gives_the_counters_of_the_last_commit(make_ledger: Any) -> None:
    """Followed event by event or rebuilt at once (a rebuild of few sessions looks each
    one's last rows up), the working set shows the counters the session has now, though
    its last rows are messages."""
    ledger = make_ledger()
    with ReadModels(ledger) as models:
        for round_ in range(2):
            ledger.add_messages(ALICE, "s", [{"role": "user", "content": f"q{round_}"}] * 20)
            ledger.commit(ALICE, "s")
            ledger.add_message(ALICE, "s", "user", "then a message")
            models.catch_up()
        followed = models.working_set(ADMIN)
        failed: list[BaseException] = []
        event.listen(
            models.projector.engine, "handle_error", lambda c: failed.append(c.original_exception)
        )
        models.rebuild()
        assert not failed  # its SQL ran as written: no batch fell back to another way
        rebuilt = models.working_set(ADMIN)
    view = ledger.session(ALICE, "s")
    for entries in (followed, rebuilt):
        (entry,) = entries
        assert (entry.commit_count, entry.archive_count, entry.last_commit_at) == (
            view.commit_count, view.archive_count, view.last_commit_at,
        )  # fmt: skip
        assert entry.commit_count == 2


@pytest.mark.parametrize("value", ["3", "NULL"])
def test_verify_finds_an_edited_counter_on_a_message_row(make_ledger: Any, value: str) -> None:
    """A commit count written into a message row that stores none, or one taken out of a
    commit's row, is reported by the deep verify."""
    ledger = make_ledger()
    _history(ledger)
    topic = "MessageAdded" if value == "3" else "Committed"
    column = "commit_count" if value == "3" else "last_commit_us"
    engine = ledger.core.store.event_recorder.engine
    with engine.begin() as connection:
        position = connection.execute(
            text(f"SELECT MAX(id) FROM chatledger_events WHERE topic = '{topic}'")
        ).scalar_one()
        connection.execute(
            text(f"UPDATE chatledger_events SET {column} = {value} WHERE id = :id"),
            {"id": position},
        )
    issues = ledger.verify(ADMIN, deep=True).issues
    assert [i.reason for i in issues] == ["stored facts differ from the event"]
