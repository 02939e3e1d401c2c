"""Two writer processes on one framework session, for every integration, SQLite and PostgreSQL.

Each process (``tests/integrations/two_writers.py``) opens the framework's
chatledger class on the same database, waits for one release, and writes
through the framework's own API. Pinned: every entry lands exactly once,
intact, each writer's in its own order; ADK's stale reads surface as ADK's
``StaleSessionError`` (the loser of the first append must see one); LangGraph
checkpoints of two writers that chose the same channel versions each keep
their own values and writes.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from chatledger import Principal, SessionLedger

WRITER = Path(__file__).parent / "integrations" / "two_writers.py"
PRINCIPAL = Principal(account_id="race", user_id="writers", agent_id="two-writers")
EACH = 20
TIMEOUT = 120.0
FRAMEWORKS = {
    "openai-agents": "agents",
    "adk": "google.adk",
    "ag2": "ag2.acp",
    "langgraph": "langgraph.checkpoint.base",
}


@pytest.fixture(params=list(FRAMEWORKS))
def framework(request: pytest.FixtureRequest) -> str:
    if os.environ.get("CHATLEDGER_REQUIRE_INTEGRATIONS", "") in ("", "0"):
        pytest.importorskip(FRAMEWORKS[request.param])
    return str(request.param)


def _line(process: subprocess.Popen[str]) -> str:
    box: list[str] = []
    stream = process.stdout
    assert stream is not None
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(TIMEOUT)
    assert box and box[0], f"no line from the writer (rc={process.poll()})"
    return box[0]


@pytest.fixture(params=["sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    """One test per framework: ``database_url`` is SQLite, ``other_database_url`` PostgreSQL
    (the writer processes serve both, so each framework is imported once per writer)."""
    return str(request.param)


def race(framework: str, targets: list[tuple[str, str]]) -> list[list[dict[str, Any]]]:
    """Two writers ``a`` and ``b``, released together, on each (url, key) in turn; what
    each reported, per database."""
    env = dict(os.environ)
    places = [part for target in targets for part in target]
    procs = [
        subprocess.Popen(
            [sys.executable, str(WRITER), framework, prefix, str(EACH), *places],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for prefix in ("a", "b")
    ]
    try:
        for proc in procs:
            assert _line(proc).strip() == "READY"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        reports = []
        for proc in procs:
            out, err = proc.communicate(timeout=TIMEOUT)
            assert proc.returncode == 0, err
            reports.append(json.loads(out.strip().splitlines()[-1]))
        return reports
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(TIMEOUT)


def assert_each_once_in_order(texts: list[str]) -> None:
    """Every ``a n`` and ``b n`` exactly once; each writer's in its own order."""
    assert sorted(texts) == sorted(f"{p} {n}" for p in "ab" for n in range(EACH))
    for prefix in "ab":
        mine = [t for t in texts if t.startswith(prefix + " ")]
        assert mine == [f"{prefix} {n}" for n in range(EACH)]


def test_two_writer_processes_on_one_session(
    framework: str, database_url: str, other_database_url: str
) -> None:
    """Two processes writing one session through the framework's own API, on SQLite and on
    PostgreSQL, lose, duplicate and interleave nothing; conflicts surface as the framework's
    own error type."""
    ledgers = [SessionLedger(database_url), SessionLedger(other_database_url)]
    try:
        prepare, check = CHECKS[framework]
        keys = [prepare(ledger) for ledger in ledgers]
        reports = race(framework, list(zip([database_url, other_database_url], keys, strict=True)))
        for n, (ledger, key) in enumerate(zip(ledgers, keys, strict=True)):
            check(ledger, key, [report[n] for report in reports])
            assert ledger.verify(PRINCIPAL).ok
    finally:
        for ledger in ledgers:
            ledger.close()


def prepare_openai_agents(ledger: SessionLedger) -> str:
    return "chat"


def check_openai_agents(ledger: SessionLedger, key: str, reports: list[Any]) -> None:
    assert_each_once_in_order([m.content for m in ledger.items(PRINCIPAL, key)])


def prepare_adk(ledger: SessionLedger) -> str:
    from chatledger.integrations.adk import ChatLedgerSessionService

    service = ChatLedgerSessionService(ledger, PRINCIPAL)
    asyncio.run(service.create_session(app_name="race", user_id="u", session_id="s"))
    return "s"


def check_adk(ledger: SessionLedger, key: str, reports: list[Any]) -> None:
    from chatledger.integrations.adk import ChatLedgerSessionService

    # Both loaded the session before the release: the loser of the first append was stale.
    assert sum(r["stale"] for r in reports) >= 1
    service = ChatLedgerSessionService(ledger, PRINCIPAL)
    found = asyncio.run(service.get_session(app_name="race", user_id="u", session_id=key))
    assert found is not None
    assert_each_once_in_order([e.content.parts[0].text for e in found.events])  # type: ignore[union-attr,index]


def prepare_ag2(ledger: SessionLedger) -> str:
    return uuid.uuid4().hex


def check_ag2(ledger: SessionLedger, key: str, reports: list[Any]) -> None:
    from chatledger.integrations.ag2 import LedgerStorage

    storage = LedgerStorage(ledger, principal=PRINCIPAL)
    events = asyncio.run(storage.get_history(uuid.UUID(hex=key)))
    assert_each_once_in_order([e.content for e in events])  # type: ignore[attr-defined]


def prepare_langgraph(ledger: SessionLedger) -> str:
    from langgraph.checkpoint.base import empty_checkpoint

    from chatledger.integrations.langgraph import LedgerSaver

    saver = LedgerSaver(ledger, principal=PRINCIPAL)
    root = {**empty_checkpoint(), "channel_values": {"x": "root"}, "channel_versions": {"x": 1}}
    thread: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    saver.put(thread, root, {"source": "input", "step": -1}, {"x": 1})  # type: ignore[arg-type]
    return "t"


def check_langgraph(ledger: SessionLedger, key: str, reports: list[Any]) -> None:
    from chatledger.integrations.langgraph import LedgerSaver

    saver = LedgerSaver(ledger, principal=PRINCIPAL)
    found = list(saver.list({"configurable": {"thread_id": key}}))
    assert len(found) == 1 + 2 * EACH
    chains: dict[str, list[str]] = {"a": [], "b": []}
    by_id = {c.config["configurable"]["checkpoint_id"]: c for c in found}
    for prefix in "ab":
        # Walk each writer's chain from its newest checkpoint back to the shared root.
        newest = max(
            (c for c in found if c.metadata.get("writer") == prefix),
            key=lambda c: c.metadata["step"],
        )
        current: Any = newest
        while current.parent_config is not None:
            value = current.checkpoint["channel_values"]["x"]
            chains[prefix].append(value)
            assert current.metadata["writer"] == prefix
            assert [w[2] for w in current.pending_writes] == [value.replace(" ", " write ")]
            current = by_id[current.parent_config["configurable"]["checkpoint_id"]]
        assert current.metadata["source"] == "input"  # back at the shared root
    assert_each_once_in_order([*reversed(chains["a"]), *reversed(chains["b"])])


CHECKS: dict[str, tuple[Any, Any]] = {
    "openai-agents": (prepare_openai_agents, check_openai_agents),
    "adk": (prepare_adk, check_adk),
    "ag2": (prepare_ag2, check_ag2),
    "langgraph": (prepare_langgraph, check_langgraph),
}
