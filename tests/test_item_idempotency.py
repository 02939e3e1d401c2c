"""Idempotency keys on the agent-framework item writes: a retry returns the first result.

``add_items``, ``pop_item``, ``clear_buffer``, ``remove_items`` and
``replace_tail`` with the key of a write that already landed record nothing
and return what that write returned; the same key with a different write is
``InvalidInput``.
"""

from __future__ import annotations

import pytest

from chatledger import InvalidInput, SessionLedger
from support import ALICE

ITEM = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}


def versions(ledger: SessionLedger) -> int:
    return ledger.session(ALICE, "s").version


def test_a_retried_add_items_returns_the_recorded_items(ledger: SessionLedger) -> None:
    """The same ``add_items`` call with the same key records nothing and returns the same."""
    first = ledger.add_items(ALICE, "s", [ITEM, ITEM], idempotency_key="k", state={"a": 1})
    version = versions(ledger)
    assert ledger.add_items(ALICE, "s", [ITEM, ITEM], idempotency_key="k", state={"a": 1}) == first
    assert versions(ledger) == version
    with pytest.raises(InvalidInput, match="idempotency key"):
        ledger.add_items(ALICE, "s", [{"role": "user", "content": "other"}], idempotency_key="k")


def test_retried_removals_return_what_they_removed(ledger: SessionLedger) -> None:
    """Retried ``pop_item``/``remove_items``/``clear_buffer`` return the first call's items."""
    ledger.add_items(ALICE, "s", [ITEM, {"role": "user", "content": "b"}, ITEM, ITEM])
    popped = ledger.pop_item(ALICE, "s", idempotency_key="pop")
    assert ledger.pop_item(ALICE, "s", idempotency_key="pop") == popped
    oldest = ledger.items(ALICE, "s")[0]
    assert ledger.remove_items(ALICE, "s", [oldest.id], idempotency_key="rm") == [oldest]
    assert ledger.remove_items(ALICE, "s", [oldest.id], idempotency_key="rm") == [oldest]
    cleared = ledger.clear_buffer(ALICE, "s", idempotency_key="clear")
    version = versions(ledger)
    assert len(cleared) == 2
    assert ledger.clear_buffer(ALICE, "s", idempotency_key="clear") == cleared
    assert versions(ledger) == version
    with pytest.raises(InvalidInput, match="idempotency key"):
        ledger.pop_item(ALICE, "s", idempotency_key="clear")


def test_a_retried_replace_tail_returns_the_recorded_replacement(ledger: SessionLedger) -> None:
    """A retried ``replace_tail`` (whose tail is gone by now) returns the first result."""
    ledger.add_items(ALICE, "s", [ITEM, ITEM])
    tail = [m.id for m in ledger.items(ALICE, "s")]
    first = ledger.replace_tail(ALICE, "s", tail, [{"type": "compaction"}], idempotency_key="c")
    version = versions(ledger)
    assert ledger.replace_tail(ALICE, "s", tail, [{"type": "compaction"}], idempotency_key="c") == (
        first
    )
    assert versions(ledger) == version
