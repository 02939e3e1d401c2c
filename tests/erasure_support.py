"""Helpers of the erasure tests: a session holding a known plaintext in every kind of content."""

from __future__ import annotations

import json
from typing import Any

from chatledger import SessionLedger
from support import ALICE

SECRET = "Zanzibar-7731"
SEARCH = {"tool_name": "search", "prompt_tokens": 10, "completion_tokens": 5}


def fill(ledger: SessionLedger, key: str = "s1", principal: Any = ALICE) -> None:
    """A session whose every kind of content holds SECRET."""
    ledger.add_message(principal, key, "user", f"My code is {SECRET}, keep it safe.")
    ledger.add_message(principal, key, "tool", f"lookup {SECRET}", tool_call=SEARCH)
    ledger.add_items(
        principal,
        key,
        [
            {"type": "function_call", "call_id": "c1", "name": "vault", "arguments": SECRET},
            {"type": "function_call_output", "call_id": "c1", "output": f"ok {SECRET}"},
        ],
    )
    ledger.update_state(principal, key, {"code": SECRET})
    ledger.set_task(principal, key, {"objective": f"Protect {SECRET}", "constraints": [SECRET]})
    ledger.commit(principal, key)
    ledger.add_message(principal, key, "assistant", f"Noted {SECRET}.")
    ledger.advance_extraction(principal, key, 1, f"found {SECRET}")


def holds_secret(value: object) -> bool:
    """Whether ``value`` (any result, as JSON) still says SECRET."""
    if hasattr(value, "model_dump_json"):
        return SECRET in value.model_dump_json()
    return SECRET in json.dumps(value, default=str)


def stored_text(ledger: SessionLedger) -> str:
    """Every row of every table of the ledger's database, as one text (to look for an
    identifier that must not be stored in the clear)."""
    from sqlalchemy import MetaData, select

    engine = ledger.core.store.event_recorder.engine
    tables = MetaData()
    tables.reflect(engine)
    with engine.connect() as connection:
        return "\n".join(
            repr(row) for table in tables.sorted_tables for row in connection.execute(select(table))
        )
