"""The commands end to end: show, context, log, diff, fork, sessions, usage, verify, export,
import."""

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


def test_log_json_carries_what_the_table_shows_and_more(url: str) -> None:
    """Each `log --json` line has the table's summary and the whole event: text, archive, error."""
    ledger = SessionLedger(url)
    try:
        ledger.summarizer = _Broken()
        ledger.commit(ALICE, "s1")  # version 7: CommitFailed
    finally:
        ledger.close()

    code, output = invoke("log", "s1", "--url", url, "--json", *AS_ALICE)

    assert code == 0
    lines = [json.loads(line) for line in output.splitlines()]
    added = lines[1]
    assert added["summary"] == "user: Where is order 7?"
    assert added["event"]["message"]["content"] == "Where is order 7?"
    committed = lines[3]
    assert (
        committed["type"] == "Committed" and "order 7" in committed["event"]["archive"]["overview"]
    )
    failed = lines[6]
    assert failed["type"] == "CommitFailed" and "model down" in failed["event"]["error"]
    assert failed["summary"].startswith("commit failed")


class _Broken:
    def summarize(self, messages: object) -> object:
        raise RuntimeError("model down")

    def merge(self, archives: object) -> object:
        raise RuntimeError("model down")


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
        with ledger.core.store.event_recorder.engine.begin() as connection:
            connection.execute(
                text("UPDATE chatledger_events SET timestamp_us = timestamp_us + 1 WHERE id = 3")
            )
    finally:
        ledger.close()
    result = runner.invoke(app, ["verify", "--url", url, "--json", *AS_ALICE])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: verify found 1 issue(s) in 1 session(s)")
    (issue,) = json.loads(result.stdout)["issues"]
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
    assert code == 2 and "empty" in output and "Traceback" not in output


def test_export_and_import_report_as_json(url: str, tmp_path: Path) -> None:
    """`export -o F --json` and `import --json` print JSON documents saying what they did."""
    dump = tmp_path / "dump.jsonl"
    result = runner.invoke(app, ["export", "--url", url, "-o", str(dump), "--json", *AS_ALICE])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"output": str(dump), "lines": 7}

    target = f"sqlite:///{tmp_path / 'copy.db'}"
    result = runner.invoke(app, ["import", str(dump), "--url", target, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "sessions": 1, "events": 6, "erased_sessions": 0, "unreadable_sessions": 0,
    }  # fmt: skip


def test_export_to_stdout_is_json_lines(url: str) -> None:
    """Without --output, export writes its JSON lines on stdout: a header, then the events."""
    result = runner.invoke(app, ["export", "s1", "--url", url, *AS_ALICE])

    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(records) == 7 and records[0]["format"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["show", "nope"], 3),
        (["show", "s1", "--at-version", "99"], 2),
        (["show", "s1", "--at-time", "yesterday"], 2),
        (["diff", "s1", "5", "2"], 2),
        (["fork", "s1", "--at-version", "2", "--as", "s1"], 2),
    ],
    ids=lambda a: " ".join(a) if isinstance(a, list) else str(a),
)
def test_bad_requests_exit_with_their_code_and_one_line(
    url: str, args: list[str], expected: int
) -> None:
    """Unknown sessions (3) and invalid arguments (2) print one error line each."""
    code, output = invoke(*args, "--url", url, *AS_ALICE)
    assert code == expected, output
    assert output.strip().startswith("error:") and len(output.strip().splitlines()) == 1
    assert "Traceback" not in output


def test_import_refuses_a_ledger_with_events_before_reading_the_file(
    url: str, tmp_path: Path
) -> None:
    """`import` into a non-empty ledger exits 2 saying so, without parsing the file first."""
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json at all\n")

    code, output = invoke("import", str(junk), "--url", url)

    assert code == 2 and "empty" in output and "not JSON" not in output
