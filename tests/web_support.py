"""Helpers shared by the viewer's tests: a populated ledger and a way to tamper with it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from chatledger import SessionLedger
from support import ALICE, BOB, FlakySummarizer

EVIL = '<script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2">'
SECRET = "bob's secret plan"


def populate(ledger: SessionLedger, summarizer: FlakySummarizer) -> None:
    """acme/t-1: 15 events with commits, a failed commit, a merge and a tool call, then a fork
    acme/t-1-retry; globex/secret (another tenant, same key space)."""
    for i in range(5):
        content = EVIL if i == 2 else f"Question {i} about order #{i}."
        ledger.add_message(ALICE, "t-1", "user", content)
        ledger.add_message(
            ALICE,
            "t-1",
            "tool",
            f"{i} rows",
            tool_call={"tool_name": "db.query", "prompt_tokens": 30, "completion_tokens": 12},
        )
        if i % 2:
            ledger.commit(ALICE, "t-1")
    summarizer.failing = True
    ledger.commit(ALICE, "t-1")  # version 14: CommitFailed
    summarizer.failing = False
    ledger.merge_archives(ALICE, "t-1", threshold=1)  # version 15: ArchiveMerged
    ledger.fork(ALICE, "t-1", 5, "t-1-retry")
    ledger.add_message(BOB, "secret", "user", SECRET)
    ledger.add_message(BOB, "t-1", "user", SECRET)  # the same key in another account


def tamper(ledger: SessionLedger, key_version: int) -> None:
    """Change one stored byte of an event of acme/t-1, directly in the database."""
    engine = ledger.core.store.event_recorder.engine
    with engine.begin() as connection:
        row: Any = connection.execute(
            text(
                "SELECT e.id, e.state FROM chatledger_events e JOIN chatledger_events f "
                "ON f.originator_id = e.originator_id AND f.originator_version = 1 "
                "WHERE f.tenant = 'acme' AND f.session_key = 't-1' AND e.originator_version = :v"
            ),
            {"v": key_version},
        ).one()
        state = bytes(row.state).replace(b"Question 3", b"Question 9")
        assert state != bytes(row.state)
        connection.execute(
            text("UPDATE chatledger_events SET state = :state WHERE id = :id"),
            {"state": state, "id": row.id},
        )
