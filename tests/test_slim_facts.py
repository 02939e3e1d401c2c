"""Slim fact rows: after a session's first row, the store leaves out what that row says.

A row after the first leaves its tenant and key empty, its event type empty
where the topic is the type's short name (not for the events that carry
archives), and its five actor columns empty where the actor is the one who
started the session (``chatledger.projections.facts``). Rows written before
hold every column. The tests here hold the answers equal on slim, full and
mixed stores -- audit log, timeline, read models (shared and staged),
verify, export -- and check that verify still finds an edited slim row.
Full rows are made from slim ones in SQL, exactly as earlier versions wrote
them; ``test_upgrade_erasure`` adds the fixture written by an earlier version.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from chatledger import Principal, SessionLedger
from chatledger.adapters.sql_read_models import READ_MODEL_NAMES, dump_rows
from chatledger.projections.facts import FACT_COLUMNS
from chatledger.read_models import ReadModels
from support import ADMIN, ALICE, BOB, restore_fixture

CAROL = Principal(account_id="acme", user_id="carol", agent_id="helper", trace_id="t-9")
SEARCH = {"tool_name": "search", "prompt_tokens": 10, "completion_tokens": 5}
_FIRST = (
    "(SELECT f.{c} FROM chatledger_events f WHERE f.originator_id = "
    "chatledger_events.originator_id AND f.originator_version = 1)"
)
_ACTOR = ("actor_account", "actor_user", "actor_agent", "actor_role", "trace_id")
# Every slim row made whole, as the versions before slim rows wrote it.
_FILL = (
    "UPDATE chatledger_events SET "
    f"tenant = {_FIRST.format(c='tenant')}, session_key = {_FIRST.format(c='session_key')}, "
    "event_type = CASE WHEN event_type = '' THEN topic ELSE event_type END, "
    "status = CASE WHEN status = '' THEN 'live' ELSE status END, "
    + ", ".join(
        f"{c} = CASE WHEN actor_account = '' THEN {_FIRST.format(c=c)} ELSE {c} END" for c in _ACTOR
    )
    + " WHERE originator_version > 1 AND tenant = '' AND {which}"
)


def _history(ledger: SessionLedger) -> None:
    """Sessions of two accounts with every kind of row: messages by the starter and by
    others, tool calls, commits, a merge, a fork, an eviction by an admin, a close, a
    deletion and a restart, imported usage."""
    ledger.add_messages(ALICE, "s", [{"role": "user", "content": f"m{n}"} for n in range(4)])
    ledger.add_message(ALICE, "s", "tool", "found", tool_call=SEARCH)
    ledger.add_message(CAROL, "s", "tool", "failed", tool_call={**SEARCH, "status": "error"})
    ledger.commit(ALICE, "s")
    ledger.add_message(CAROL, "s", "assistant", "again")
    ledger.commit(ALICE, "s")
    ledger.merge_archives(ALICE, "s")
    ledger.fork(ALICE, "s", ledger.session(ALICE, "s").version, "s-fork")
    ledger.add_message(ALICE, "s-fork", "tool", "forked", tool_call={"tool_name": "fetch"})
    ledger.evict(ADMIN, "s", account_id="acme")
    ledger.add_message(ALICE, "s", "user", "back")
    ledger.add_messages(BOB, "b", [{"role": "user", "content": "hi"}] * 3)
    ledger.close_session(BOB, "b")
    ledger.delete_session(ALICE, "s-fork")
    ledger.add_message(CAROL, "s-fork", "user", "anew")
    legacy = {"tool_name": "legacy", "call_count": 3, "success_count": 2, "fail_count": 1}
    ledger.import_usage(ALICE, "s", [{**legacy, "prompt_tokens": 7}])


def _answers(ledger: SessionLedger, models: ReadModels) -> dict[str, Any]:
    """Everything the stored facts answer, through the public API."""
    models.rebuild()
    with models.engine.connect() as connection:
        rows = {name: dump_rows(connection, name) for name in READ_MODEL_NAMES}
    return {
        "audit": models.audit(ADMIN, limit=1000),
        "audit acme": models.audit(ADMIN, account_id="acme", limit=1000),
        "audit of bob": models.audit(BOB, limit=1000),
        "audit by type": models.audit(ALICE, types=["MessageAdded", "Committed"], limit=1000),
        "audit of s": models.audit(ALICE, session="s", limit=1000),
        "timeline": [models.timeline(ALICE, key, limit=1000) for key in ("s", "s-fork")]
        + [models.timeline(BOB, "b", newest=True, limit=2)],
        "usage": models.usage(ADMIN),
        "working set": models.working_set(ADMIN, include_evicted=True),
        "read model rows": rows,
        "verify": ledger.verify(ADMIN, deep=True),
        "export": list(ledger.export(ADMIN)),
    }


def _fill(ledger: SessionLedger, which: str) -> int:
    """Make the slim rows selected by the SQL condition ``which`` whole; how many there were."""
    engine = ledger.core.store.event_recorder.engine
    with engine.begin() as connection:
        return connection.execute(text(_FILL.format(which=which))).rowcount


def _slim_rows(ledger: SessionLedger) -> int:
    engine = ledger.core.store.event_recorder.engine
    with engine.connect() as connection:
        return int(
            connection.execute(
                text("SELECT COUNT(*) FROM chatledger_events WHERE tenant = ''")
            ).scalar_one()
        )


@pytest.fixture
def models(ledger: SessionLedger) -> Iterator[ReadModels]:
    opened = ReadModels(ledger)
    yield opened
    opened.close()


def test_rows_after_the_first_leave_out_what_the_first_row_and_topic_say(
    ledger: SessionLedger,
) -> None:
    """A first row holds every fact; a later message by the starter leaves tenant, key, type,
    actor and a live status empty; another actor's is kept; archive events keep their type,
    other statuses are kept."""
    ledger.add_message(ALICE, "s", "user", "hello")
    ledger.add_message(CAROL, "s", "user", "hi")
    ledger.commit(ALICE, "s")
    ledger.evict(ADMIN, "s", account_id="acme")
    engine = ledger.core.store.event_recorder.engine
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT originator_version, event_type, tenant, session_key, actor_account, "
                "actor_user, actor_agent, actor_role, trace_id, status FROM chatledger_events "
                "ORDER BY originator_version"
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        (1, "Started", "acme", "s", "acme", "alice", "support-bot", "member", "t-1", "live"),
        (2, "", "", "", "", "", "", "", "", ""),
        (3, "", "", "", "acme", "carol", "helper", "member", "t-9", ""),
        (4, "Committed", "", "", "", "", "", "", "", ""),
        (5, "", "", "", "ops", "root", "console", "admin", "adm", "evicted"),
    ]


def test_full_slim_and_mixed_rows_give_the_same_answers(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """Audit log, timeline, read models, deep verify and export answer the same whether the
    rows after the first are slim, whole (as earlier versions wrote them) or mixed."""
    _history(ledger)
    slim = _answers(ledger, models)
    assert slim["verify"].ok, slim["verify"].issues
    count = _slim_rows(ledger)
    assert count > 20
    assert _fill(ledger, "MOD(originator_version, 2) = 0") > 0  # mixed within sessions
    assert 0 < _slim_rows(ledger) < count
    assert _answers(ledger, models) == slim
    _fill(ledger, "1 = 1")
    assert _slim_rows(ledger) == 0
    assert _answers(ledger, models) == slim


def test_new_events_of_a_store_written_whole_are_slim_and_read_alike(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """Appending to sessions whose earlier rows are whole: the new rows are slim, and the
    answers are those of a store written slim from the start."""
    _history(ledger)
    _fill(ledger, "1 = 1")
    ledger.add_message(ALICE, "s", "tool", "late", tool_call=SEARCH)
    ledger.add_message(BOB, "b", "user", "later")
    assert _slim_rows(ledger) == 3  # b was closed: Reactivated, then the message
    mixed = _answers(ledger, models)
    assert mixed["verify"].ok, mixed["verify"].issues
    _fill(ledger, "1 = 1")
    assert _answers(ledger, models) == mixed
    (late,) = [u for u in mixed["usage"] if u.tool_name == "search"]
    assert (late.account_id, late.session_key, late.call_count) == ("acme", "s", 3)


def test_read_models_elsewhere_get_slim_rows_filled_in(
    ledger: SessionLedger, other_database_url: str
) -> None:
    """Read models in another database (facts staged per batch) equal shared ones: the
    staged copy of a slim row carries its session's account and key."""
    _history(ledger)
    shared = ReadModels(ledger, batch_size=4)
    elsewhere = ReadModels(ledger, url=other_database_url, batch_size=3)
    try:
        shared.catch_up()
        elsewhere.catch_up()
        for models in (shared, elsewhere):
            assert {(u.account_id, u.session_key) for u in models.usage(ADMIN)} == {
                ("acme", "s"), ("acme", "s-fork"),
            }  # fmt: skip
        with shared.engine.connect() as one, elsewhere.engine.connect() as other:
            for name in READ_MODEL_NAMES:
                assert dump_rows(other, name) == dump_rows(one, name)
    finally:
        shared.close()
        elsewhere.close()


def _edit(ledger: SessionLedger, assignment: str, version: int) -> None:
    engine = ledger.core.store.event_recorder.engine
    with engine.begin() as connection:
        connection.execute(
            text(f"UPDATE chatledger_events SET {assignment} WHERE originator_version = :v"),
            {"v": version},
        )


@pytest.mark.parametrize(
    ("assignment", "deep", "edited"),
    [
        ("tenant = 'globex'", False, "tenant"),
        ("session_key = 'other'", False, "session_key"),
        ("event_type = 'Committed'", False, "event_type"),
        ("actor_account = 'mallory'", True, "actor_account"),
        ("actor_user = 'mallory'", True, "actor_user"),
        ("pending_tokens = 0", True, "pending_tokens"),
    ],
)
def test_an_edited_slim_row_is_reported_with_the_column_edited(
    ledger: SessionLedger, assignment: str, deep: bool, edited: str
) -> None:
    """Verify finds a slim row's edited fact (naming facts always, the others in the deep
    check) and names just the column edited."""
    ledger.add_messages(ALICE, "s", [{"role": "user", "content": "one"}] * 3)
    _edit(ledger, assignment, 3)
    report = ledger.verify(ADMIN, deep=deep)
    (issue,) = report.issues
    assert (issue.version, issue.reason) == (3, "stored facts differ from the event")
    assert issue.found == f"edited fact columns: {edited}"


def test_a_blanked_actor_that_did_not_start_the_session_is_reported(
    ledger: SessionLedger,
) -> None:
    """Only the starter's actor may be left out: blanking another actor's is an edit."""
    ledger.add_message(ALICE, "s", "user", "one")
    ledger.add_message(CAROL, "s", "user", "two")
    assert ledger.verify(ADMIN, deep=True).ok
    _edit(ledger, ", ".join(f"{c} = ''" for c in _ACTOR), 3)
    assert ledger.verify(ADMIN).ok  # the naming facts are still right
    (issue,) = ledger.verify(ADMIN, deep=True).issues
    assert issue.version == 3 and issue.found.startswith("edited fact columns: actor_account")


def test_an_import_stores_slim_rows_and_answers_as_the_original(
    ledger: SessionLedger, models: ReadModels, tmp_path: Path
) -> None:
    """An export of a store written whole imports as slim rows, with the same answers."""
    _history(ledger)
    _fill(ledger, "1 = 1")
    original = _answers(ledger, models)
    url = f"sqlite:///{tmp_path / 'imported.db'}"
    with SessionLedger(url) as imported:
        imported.import_(original["export"])
        assert _slim_rows(imported) > 20
        copy = ReadModels(imported)
        try:
            answers = _answers(imported, copy)
        finally:
            copy.close()
    # (PostgreSQL's log order is by transaction, SQLite's by position: the audit lists
    # are compared as sets of rows.)
    assert _by_position(answers) == _by_position(original)


def _by_position(answers: dict[str, Any]) -> dict[str, Any]:
    return {
        name: sorted(value, key=lambda r: r.position) if name.startswith("audit") else value
        for name, value in answers.items()
    }


def test_a_slim_row_whose_first_row_is_gone_reads_as_stored(
    ledger: SessionLedger, models: ReadModels
) -> None:
    """With its first row deleted by hand (verify reports it), the audit log still lists a
    session's other rows, as stored, rather than failing."""
    ledger.add_messages(ALICE, "s", [{"role": "user", "content": "one"}] * 2)
    engine = ledger.core.store.event_recorder.engine
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM chatledger_events WHERE originator_version = 1"))
    rows = models.audit(ADMIN)
    assert [(r.version, r.event_type, r.account_id) for r in rows] == [
        (2, "MessageAdded", ""),
        (3, "MessageAdded", ""),
    ]
    assert not ledger.verify(ADMIN).ok


def test_a_ledger_written_before_slim_rows_gets_them_and_reads_alike(
    backend: str, database_url: str, tmp_path: Path
) -> None:
    """A ledger an earlier version wrote (the pre_erasure fixture, every row whole): new
    events of an old session are slim, and its audit log, timeline and deep verify read
    old and new rows alike."""
    old = Principal(account_id="acme", user_id="alice", agent_id="bot", trace_id="t-1")
    url = restore_fixture("pre_erasure", backend, database_url, tmp_path)
    with SessionLedger(url) as ledger, ReadModels(ledger) as models:
        before = _slim_rows(ledger)
        ledger.add_message(old, "s1", "user", "Written after the upgrade.")
        ledger.add_message(CAROL, "s1", "user", "And by someone else.")
        assert _slim_rows(ledger) == before + 2
        report = ledger.verify(ADMIN, deep=True)
        assert report.ok, report.issues
        rows = models.audit(ADMIN, session="s1", account_id="acme", limit=1000)
        rows.sort(key=lambda r: r.version)  # (the dump's transaction ids may sort after ours)
        assert {(r.account_id, r.session_key) for r in rows} == {("acme", "s1")}
        assert [r.actor for r in rows[-2:]] == [old, CAROL]
        assert [r.event_type for r in rows[-2:]] == ["MessageAdded"] * 2
        timeline = models.timeline(old, "s1", newest=True, limit=2)
        assert [r.actor for r in timeline] == [old, CAROL]


def test_an_import_writes_the_very_facts_the_appends_wrote(
    ledger: SessionLedger, tmp_path: Path
) -> None:
    """Import recomputes every row's facts in the slim form: column for column what the
    appends stored (slim_facts of the replayed facts equals stored_facts of the append)."""
    _history(ledger)
    columns = f"id, {', '.join(FACT_COLUMNS)}"
    query = text(f"SELECT {columns} FROM chatledger_events ORDER BY id")
    with ledger.core.store.event_recorder.engine.connect() as connection:
        written = [tuple(r) for r in connection.execute(query)]
    with SessionLedger(f"sqlite:///{tmp_path / 'imported.db'}") as imported:
        imported.import_(list(ledger.export(ADMIN)))
        with imported.core.store.event_recorder.engine.connect() as connection:
            assert [tuple(r) for r in connection.execute(query)] == written
