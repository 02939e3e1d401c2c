"""Invariants of encryption at rest and erasure, for any content the ledger accepts.

For arbitrary items, state values, contexts and task text, on SQLite and PostgreSQL:
content sealed and read back cold is exactly what was written; after erasure, the
session read cold (every event opened without its key) equals the session redacted in
memory by ``Erased`` -- the same counters, ids, roles and tokens -- and its chain verifies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz import ACCEPTED_JSON, UNICODE

from chatledger import ClientContext, SessionLedger
from support import ALICE

ITEM = st.dictionaries(UNICODE.map(lambda k: k[:8] or "k"), ACCEPTED_JSON, min_size=1, max_size=4)
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("message"), UNICODE),
        st.tuples(st.just("item"), ITEM),
        st.tuples(st.just("state"), st.dictionaries(UNICODE.map(lambda k: k[:8]), ACCEPTED_JSON)),
        st.tuples(st.just("task"), UNICODE),
        st.tuples(st.just("commit"), st.none()),
    ),
    min_size=1,
    max_size=8,
)


def test_sealed_content_reads_back_exactly_and_erases_to_the_redacted_state(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """Cold reads equal warm ones before erasure (content intact) and after it (erased the
    same way in memory and in the store); counters never change; verify passes."""
    writer = make_ledger(encryption=True)
    reader = make_ledger(cache_size=0)
    counter = iter(range(10**9))

    @settings(
        max_examples=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(st.dictionaries(UNICODE.map(lambda k: k[:8]), ACCEPTED_JSON, max_size=3), STEPS)
    def run(meta: dict[str, Any], steps: list[tuple[str, Any]]) -> None:
        key = f"k{next(counter)}"
        writer.add_message(ALICE, key, "user", "first", context=ClientContext(meta=meta))
        for kind, value in steps:
            if kind == "message":
                writer.add_message(ALICE, key, "assistant", value)
            elif kind == "item":
                writer.add_items(ALICE, key, [value])
            elif kind == "state" and value:
                writer.update_state(ALICE, key, value)
            elif kind == "task":
                writer.set_task(ALICE, key, {"objective": value, "constraints": [value]})
            elif kind == "commit":
                writer.commit(ALICE, key)
        warm = writer.session(ALICE, key)
        assert reader.session(ALICE, key) == warm
        writer.erase(ALICE, key)
        erased = writer.session(ALICE, key)
        assert reader.session(ALICE, key) == erased
        counters = ("message_count", "pending_tokens", "turn_count", "commit_count")
        assert [getattr(erased, c) for c in counters] == [getattr(warm, c) for c in counters]
        assert [(m.id, m.role, m.tokens) for m in erased.buffer] == [
            (m.id, m.role, m.tokens) for m in warm.buffer
        ]
        assert all(m.erased for m in erased.buffer)
        assert writer.verify(ALICE, key).ok

    run()
