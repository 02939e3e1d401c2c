"""``LedgerSaver``: LangGraph's checkpointer contract on SQLite and PostgreSQL.

The ``langgraph-checkpoint-conformance`` suite (every base capability and the
extended ones: ``copy_thread``, ``delete_for_runs``, ``prune``) runs here
unedited through its ``validate()``. Pinned besides: a real graph's state
history and time travel, values found on a checkpoint's own chain when two
forks chose the same channel versions, pruning kept in the ledger's history,
erasure, and bad input.
"""

from __future__ import annotations

import asyncio
import operator
import os
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

import pytest

from chatledger import InvalidInput, Principal, SessionLedger
from support import ALICE, BOB

if os.environ.get("CHATLEDGER_REQUIRE_INTEGRATIONS", "") in ("", "0"):
    pytest.importorskip("langgraph.checkpoint.conformance", reason="pip install 'chatledger[dev]'")

from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.graph import END, START, StateGraph

from chatledger.integrations.langgraph import LedgerSaver


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


@pytest.fixture
def saver(ledger: SessionLedger) -> LedgerSaver:
    return LedgerSaver(ledger, principal=ALICE)


def test_the_conformance_suite_passes_every_capability(ledger: SessionLedger) -> None:
    """validate() of langgraph-checkpoint-conformance: all 8 capabilities (5 base, and
    copy_thread, delete_for_runs, prune) detected and passed, no test failed."""

    @checkpointer_test(name="LedgerSaver")
    async def fresh() -> AsyncIterator[BaseCheckpointSaver[str]]:
        # Each capability suite gets an empty store: a tenant of its own on the test database.
        yield LedgerSaver(ledger, principal=Principal(account_id=f"lg-{uuid.uuid4().hex[:12]}"))

    report = run(validate(fresh))
    failures = [f for result in report.results.values() for f in result.failures]
    assert failures == []
    assert {name: result.passed for name, result in report.results.items()} == {
        name: True
        for name in (
            "put", "put_writes", "get_tuple", "list", "delete_thread",
            "delete_for_runs", "copy_thread", "prune",
        )
    }  # fmt: skip
    assert sum(r.tests_passed for r in report.results.values()) == 81


class Counter(TypedDict):
    steps: Annotated[list[str], operator.add]


def counting_graph(saver: LedgerSaver) -> Any:
    builder = StateGraph(Counter)
    builder.add_node("a", lambda state: {"steps": ["a"]})
    builder.add_node("b", lambda state: {"steps": ["b"]})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    return builder.compile(checkpointer=saver)


def test_a_graph_runs_with_state_history_and_time_travel(
    saver: LedgerSaver, ledger: SessionLedger
) -> None:
    """A compiled graph on the saver: invoke, get_state_history, a replay from an earlier
    checkpoint; every put and put_writes is an event of the thread's session."""
    graph = counting_graph(saver)
    config: Any = {"configurable": {"thread_id": "t-1"}}
    assert graph.invoke({"steps": []}, config) == {"steps": ["a", "b"]}
    history = list(graph.get_state_history(config))
    assert [h.values.get("steps") for h in history] == [
        ["a", "b"],
        ["a"],
        [],
        [],
    ]  # as InMemorySaver
    after_a = history[1]
    assert graph.invoke(None, after_a.config) == {"steps": ["a", "b"]}  # replayed from "a"
    events = ledger.history(ALICE, "t-1")
    assert events[0].type == "Started" and {e.type for e in events[1:]} == {"MessageAdded"}
    texts = [m.content for m in ledger.items(ALICE, "t-1")]
    assert any(t.startswith("checkpoint ") and "steps: [1] a" in t for t in texts)
    assert ledger.verify(ALICE, "t-1").ok


def test_the_async_methods_run_a_graph(saver: LedgerSaver) -> None:
    """ainvoke and aget_state_history go through the saver's async methods."""
    graph = counting_graph(saver)
    config: Any = {"configurable": {"thread_id": "t-async"}}

    async def go() -> tuple[Any, int]:
        result = await graph.ainvoke({"steps": []}, config)
        return result, len([s async for s in graph.aget_state_history(config)])

    assert run(go()) == ({"steps": ["a", "b"]}, 4)


def test_forks_with_the_same_channel_version_read_their_own_values(saver: LedgerSaver) -> None:
    """Two children of one checkpoint that both wrote channel version 2 each read the
    value on their own chain, never the other's."""
    root = saver.put(
        {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
        {**empty_checkpoint(), "channel_values": {"x": "root"}, "channel_versions": {"x": 1}},
        {"source": "input", "step": -1},
        {"x": 1},
    )
    children = []
    for value in ("left", "right"):
        checkpoint = {**empty_checkpoint(), "channel_values": {"x": value}}
        checkpoint["channel_versions"] = {"x": 2}
        children.append(saver.put(root, checkpoint, {"source": "loop", "step": 0}, {"x": 2}))
    for child, value in zip(children, ("left", "right"), strict=True):
        found = saver.get_tuple(child)
        assert found is not None and found.checkpoint["channel_values"] == {"x": value}


def test_pruning_is_kept_in_the_history(saver: LedgerSaver, ledger: SessionLedger) -> None:
    """prune(keep_latest) leaves one checkpoint, which still reads every value; the pruned
    ones stay readable at the version before, in one TailReplaced."""
    graph = counting_graph(saver)
    config: Any = {"configurable": {"thread_id": "t-p"}}
    graph.invoke({"steps": []}, config)
    before = ledger.session(ALICE, "t-p").version
    saver.prune(["t-p"])
    kept = list(saver.list(config))
    assert len(kept) == 1 and kept[0].checkpoint["channel_values"] == {"steps": ["a", "b"]}
    assert ledger.history(ALICE, "t-p")[-1].type == "TailReplaced"
    assert len(ledger.session(ALICE, "t-p", at_version=before).buffer) > 1
    with pytest.raises(InvalidInput, match="prune strategy"):
        saver.prune(["t-p"], strategy="sometimes")


def test_copy_thread_is_a_fork(saver: LedgerSaver, ledger: SessionLedger) -> None:
    """copy_thread records a fork: the target starts with a Forked event and the same state."""
    graph = counting_graph(saver)
    graph.invoke({"steps": []}, {"configurable": {"thread_id": "src"}})
    saver.copy_thread("src", "dst")
    assert ledger.history(ALICE, "dst")[0].type == "Forked"
    state = graph.get_state({"configurable": {"thread_id": "dst"}})
    assert state.values == {"steps": ["a", "b"]}


def test_delete_thread_deletes_and_erases_with_encryption(make_ledger: Any) -> None:
    """delete_thread on a ledger with encryption erases the thread: nothing readable is
    left, the chain still verifies."""
    ledger = make_ledger(encryption=True)
    saver = LedgerSaver(ledger, principal=ALICE)
    config: Any = {"configurable": {"thread_id": "secret"}}
    counting_graph(saver).invoke({"steps": []}, config)
    saver.delete_thread("secret")
    assert saver.get_tuple(config) is None
    assert ledger.history(ALICE, "secret")[-1].type == "Erased"
    assert ledger.verify(ALICE, "secret").ok


def test_threads_are_kept_per_tenant(ledger: SessionLedger) -> None:
    """The same thread id in two accounts names two threads."""
    mine, theirs = LedgerSaver(ledger, principal=ALICE), LedgerSaver(ledger, principal=BOB)
    counting_graph(mine).invoke({"steps": []}, {"configurable": {"thread_id": "t"}})
    assert theirs.get_tuple({"configurable": {"thread_id": "t"}}) is None
    assert list(theirs.list(None)) == []


def test_bad_input_is_invalid_input(ledger: SessionLedger) -> None:
    """A config without a thread id, a non-str thread id, a wrong ledger type or principal,
    and writes without a checkpoint id are InvalidInput, with nothing recorded."""
    saver = LedgerSaver(ledger, principal=ALICE)
    with pytest.raises(InvalidInput, match="thread_id"):
        saver.get_tuple({"configurable": {}})
    with pytest.raises(InvalidInput, match="thread_id"):
        saver.delete_thread(7)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="checkpoint_id"):
        saver.put_writes({"configurable": {"thread_id": "t"}}, [("x", 1)], "task")
    with pytest.raises(InvalidInput, match="ledger_or_url"):
        LedgerSaver(None, principal=ALICE)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="principal"):
        LedgerSaver(ledger, principal=None)  # type: ignore[arg-type]
    assert ledger.working_set(ALICE) == []


def test_a_url_opens_a_ledger_that_close_closes(database_url: str) -> None:
    """LedgerSaver(url) opens its own ledger; leaving the with block closes it."""
    with LedgerSaver(database_url, principal=ALICE) as saver:
        counting_graph(saver).invoke({"steps": []}, {"configurable": {"thread_id": "t"}})
    with LedgerSaver(database_url, principal=ALICE) as again:
        found = again.get_tuple({"configurable": {"thread_id": "t"}})
        assert found is not None and found.checkpoint["channel_values"] == {"steps": ["a", "b"]}
