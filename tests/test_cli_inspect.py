"""The inspection commands end to end: show, context, log, diff, fork, verify, export, import."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from chatledger import SessionLedger
from chatledger.cli import app
from support import ALICE

runner = CliRunner()
AS_ALICE = ["--account", ALICE.account_id]


@pytest.fixture
def url(database_url: str, make_ledger: Callable[..., SessionLedger]) -> str:
    """A database holding one session 's1' of ALICE with a commit (versions 1..6)."""
    ledger = make_ledger()
    ledger.add_message(ALICE, "s1", "user", "Where is order 7?")
    ledger.add_message(ALICE, "s1", "assistant", "Checking the Shipping API.")
    ledger.commit(ALICE, "s1")
    ledger.add_message(ALICE, "s1", "user", "Any news?")
    ledger.add_message(ALICE, "s1", "assistant", "It ships today.")
    return database_url


def invoke(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_show_prints_tables_and_json_as_of_a_version(url: str) -> None:
    """`show` renders the session; --at-version time-travels; --json is machine-readable."""
    code, output = invoke("show", "s1", "--url", url, *AS_ALICE)
    assert code == 0 and "Live buffer" in output and "It ships today." in output
    code, output = invoke("show", "s1", "--url", url, "--at-version", "3", "--json", *AS_ALICE)
    assert code == 0
    view = json.loads(output)
    assert view["version"] == 3 and [m["content"] for m in view["buffer"]] == [
        "Where is order 7?",
        "Checking the Shipping API.",
    ]


def test_context_shows_summary_and_messages(url: str) -> None:
    """`context --json` returns the archive summary and the live messages within the budget."""
    code, output = invoke("context", "s1", "--url", url, "--budget", "500", "--json", *AS_ALICE)
    assert code == 0
    context = json.loads(output)
    assert "order 7" in context["overview"]
    assert [m["content"] for m in context["messages"]] == ["Any news?", "It ships today."]


def test_log_lists_events_with_actor_and_follows_new_ones(
    url: str, make_ledger: Callable[..., SessionLedger]
) -> None:
    """`log --json` prints one event per line; --follow picks up events recorded meanwhile."""
    code, output = invoke("log", "s1", "--url", url, "--json", *AS_ALICE)
    assert code == 0
    lines = [json.loads(line) for line in output.splitlines()]
    assert [e["type"] for e in lines][:2] == ["Started", "MessageAdded"]
    assert lines[0]["actor"]["agent_id"] == ALICE.agent_id

    writer = make_ledger()
    timer = threading.Timer(0.3, writer.add_message, (ALICE, "s1", "user", "late arrival"))
    timer.start()
    try:
        code, output = invoke(
            "log", "s1", "--url", url, "--json", "--follow", "--interval", "0.05",
            "--timeout", "2", *AS_ALICE,
        )  # fmt: skip
    finally:
        timer.join()
    assert code == 0
    assert json.loads(output.splitlines()[-1])["version"] == 7


def test_diff_and_fork(url: str) -> None:
    """`diff` reports what changed; `fork --at-version --as` starts a new session from then."""
    code, output = invoke("diff", "s1", "1", "6", "--url", url, "--json", *AS_ALICE)
    assert code == 0
    change = json.loads(output)
    assert len(change["messages_added"]) == 4 and len(change["commits"]) == 1
    code, output = invoke(
        "fork", "s1", "--at-version", "3", "--as", "s1-b", "--url", url, "--json", *AS_ALICE
    )
    assert code == 0 and len(json.loads(output)["buffer"]) == 2
    code, output = invoke("log", "s1-b", "--url", url, "--json", *AS_ALICE)
    assert [json.loads(line)["type"] for line in output.splitlines()] == ["Forked"]


def test_verify_passes_then_fails_on_a_tampered_database(url: str, tmp_path: Path) -> None:
    """`verify` exits 0 on intact chains and 1 once a stored row was changed in SQL."""
    anchors = tmp_path / "anchors.json"
    code, output = invoke("verify", "--url", url, "--save-anchors", str(anchors), *AS_ALICE)
    assert code == 0 and "intact" in output
    assert len(json.loads(anchors.read_text())) == 1
    ledger = SessionLedger(url)
    try:
        with ledger._app.event_recorder.engine.begin() as connection:
            connection.execute(
                text("UPDATE chatledger_events SET timestamp_us = timestamp_us + 1 WHERE id = 3")
            )
    finally:
        ledger.close()
    code, output = invoke("verify", "--url", url, "--json", *AS_ALICE)
    assert code == 1
    (issue,) = json.loads(output)["issues"]
    assert (issue["key"], issue["version"], issue["reason"]) == ("s1", 3, "hash mismatch")


def test_export_then_import_into_an_empty_ledger(url: str, tmp_path: Path) -> None:
    """`export` writes JSON lines; `import` loads them into an empty ledger that verifies."""
    dump = tmp_path / "dump.jsonl"
    code, _ = invoke("export", "--url", url, "--output", str(dump), *AS_ALICE)
    assert code == 0 and len(dump.read_text().splitlines()) == 7
    target = f"sqlite:///{tmp_path / 'copy.db'}"
    code, output = invoke("import", str(dump), "--url", target)
    assert code == 0 and "Imported 6 events of 1 sessions" in output
    code, _ = invoke("verify", "--url", target, *AS_ALICE)
    assert code == 0
    code, output = invoke("import", str(dump), "--url", target)
    assert code == 1 and "empty" in output and "Traceback" not in output


@pytest.mark.parametrize(
    "args",
    [
        ["show", "nope"],
        ["show", "s1", "--at-version", "99"],
        ["show", "s1", "--at-time", "yesterday"],
        ["diff", "s1", "5", "2"],
        ["fork", "s1", "--at-version", "2", "--as", "s1"],
    ],
    ids=lambda a: " ".join(a),
)
def test_bad_requests_exit_1_with_one_line(url: str, args: list[str]) -> None:
    """Unknown sessions and invalid arguments print one error line and exit with code 1."""
    code, output = invoke(*args, "--url", url, *AS_ALICE)
    assert code == 1
    assert output.strip().startswith("error:") and "Traceback" not in output
