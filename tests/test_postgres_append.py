"""The PostgreSQL append path's own connections: prepared statements, spare positions, NOTIFY.

A one-row append runs a statement prepared on the appender's connection
through libpq (``PostgresAppender._run``); these tests hold what that must
survive and what it must not cost.
"""

from __future__ import annotations

from typing import Any

import pytest

from chatledger import SessionLedger
from chatledger.adapters.append_postgres import PostgresAppender
from support import ALICE

pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


def _appender(ledger: SessionLedger) -> PostgresAppender:
    appender = ledger.core.store.event_recorder.postgres
    assert appender is not None
    return appender


def test_an_append_after_the_server_dropped_its_prepared_statements_records_once(
    ledger: SessionLedger,
) -> None:
    """DEALLOCATE ALL on the appender's connection: the next appends prepare again, once each."""
    appender = _appender(ledger)
    appender.notifier.close()  # no notifications: the appends keep to one connection
    for n in range(3):
        ledger.add_message(ALICE, "s", "user", f"before {n}")
    with appender.lent() as writer:
        writer.cursor.execute("DEALLOCATE ALL")
    for n in range(3):
        ledger.add_message(ALICE, "s", "user", f"after {n}")
    with appender.lent() as writer:
        writer.cursor.execute("SELECT name FROM pg_prepared_statements")
        prepared = {name for (name,) in writer.cursor.fetchall()}
    assert "chatledger_append_one" in prepared  # the connection the appends used
    contents = [m.content for m in ledger.session(ALICE, "s").buffer]
    assert contents == [f"before {n}" for n in range(3)] + [f"after {n}" for n in range(3)]
    assert ledger.verify(ALICE).ok


def test_a_single_writer_numbers_its_appends_without_a_round_trip(
    ledger: SessionLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the notifier holds a connection, appends keep to the one they used last."""
    appender = _appender(ledger)
    appender.notifier.close()  # the test plays the notifier's part
    ledger.add_message(ALICE, "a", "user", "first")
    ledger.add_message(ALICE, "b", "user", "first")
    numbered: list[int] = []
    real_number = PostgresAppender.number

    def number(self: PostgresAppender, cursor: Any, rows: Any) -> Any:
        numbered.append(len(rows))
        return real_number(self, cursor, rows)

    monkeypatch.setattr(PostgresAppender, "number", number)
    n = 0
    for _ in range(8):
        with appender.lent():  # what the notifier borrows for a NOTIFY
            for _ in range(3):
                ledger.add_message(ALICE, "ab"[n % 2], "user", f"message {n}")
                n += 1
        for _ in range(3):
            ledger.add_message(ALICE, "ab"[n % 2], "user", f"message {n}")
            n += 1
    # One round trip when the first append found the only connection lent out; after
    # that the hot connection's spare positions serve every append.
    assert len(numbered) <= 1, f"{len(numbered)} numbering round trips for {n} appends"
    contents = [m.content for m in ledger.session(ALICE, "a").buffer]
    assert contents == ["first"] + [f"message {i}" for i in range(0, n, 2)]
    assert ledger.verify(ALICE).ok


def test_a_value_out_of_a_columns_range_fails_the_append_and_records_nothing(
    ledger: SessionLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fact over 64 bits is refused as psycopg would (a DataError), never a struct.error."""
    from chatledger import StoreUnavailable
    from chatledger.adapters import store

    ledger.add_message(ALICE, "s", "user", "before")
    real = store.stored_facts

    def too_big(*args: Any, **kwargs: Any) -> Any:
        return real(*args, **kwargs)._replace(prompt_tokens=2**63)

    monkeypatch.setattr(store, "stored_facts", too_big)
    with pytest.raises(StoreUnavailable, match="cannot hold"):
        ledger.add_message(ALICE, "s", "user", "too big")
    monkeypatch.undo()
    assert [m.content for m in ledger.session(ALICE, "s").buffer] == ["before"]
    assert ledger.verify(ALICE).ok
