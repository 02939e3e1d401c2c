"""The read-model commands: ``project`` (and ``python -m chatledger.projector``), ``rebuild``,
``sessions`` and ``usage``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from chatledger import SessionLedger
from chatledger.cli import app
from support import ALICE

runner = CliRunner()
TOOL = {"tool_name": "search", "prompt_tokens": 7, "completion_tokens": 3}


def test_project_rebuild_and_sessions(ledger: SessionLedger, database_url: str) -> None:
    """`project`, `rebuild --all|NAME` and `sessions --json` work; bad names exit 2, one line."""
    ledger.add_message(ALICE, "s", "user", "hi")

    result = runner.invoke(app, ["project", "--url", database_url])
    assert result.exit_code == 0, result.output
    assert "Applied 2 events" in result.output
    result = runner.invoke(app, ["rebuild", "--all", "--url", database_url])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["rebuild", "usage", "--url", database_url])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["sessions", "--account", "acme", "--url", database_url, "--json"])
    assert result.exit_code == 0, result.output
    assert [row["session_key"] for row in json.loads(result.stdout)] == ["s"]
    for name, says in (("audit", "needs no rebuild"), ("bogus", "Unknown read model")):
        result = runner.invoke(app, ["rebuild", name, "--url", database_url])
        assert result.exit_code == 2 and says in result.stderr
        assert len(result.stderr.splitlines()) == 1


def test_rebuild_offers_only_read_models_it_can_rebuild(database_url: str) -> None:
    """Without a name, rebuild lists the real read models (no 'audit') and exits 2."""
    from chatledger.adapters.sql_read_models import READ_MODEL_NAMES

    result = runner.invoke(app, ["rebuild", "--url", database_url])

    assert result.exit_code == 2
    assert "audit" not in result.stderr
    assert all(name in result.stderr for name in READ_MODEL_NAMES)


def test_project_and_rebuild_report_as_json(ledger: SessionLedger, database_url: str) -> None:
    """`project --json` prints one JSON line per step; `rebuild --json` one document."""
    ledger.add_messages(ALICE, "s", [{"role": "user", "content": f"m{i}"} for i in range(5)])

    result = runner.invoke(
        app, ["project", "--url", database_url, "--json", "--progress", "--batch-size", "2"]
    )
    assert result.exit_code == 0, result.output
    steps = [json.loads(line) for line in result.stdout.splitlines()]
    assert (steps[0]["step"], steps[0]["head"]) == ("ready", 6)
    assert sorted(steps[0]["reset"]) == ["archives", "usage", "working_set"]  # new tables
    assert {s["step"] for s in steps[1:-1]} == {"batch"}
    assert steps[-1]["step"] == "done" and steps[-1]["events"] == 6
    assert set(steps[-1]["positions"].values()) == {6}

    result = runner.invoke(app, ["rebuild", "--all", "--url", database_url, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["events"], report["head"], report["rebuilt"]) == (
        6,
        6,
        list(report["positions"]),
    )


def test_usage_lists_tool_calls_as_a_table_and_as_json(
    ledger: SessionLedger, database_url: str
) -> None:
    """`usage [KEY]` shows calls and tokens per session and tool, from the usage read model."""
    ledger.add_message(ALICE, "s", "tool", "found it", tool_call=TOOL)
    ledger.add_message(ALICE, "s", "tool", "again", tool_call=TOOL)
    ledger.add_message(ALICE, "other", "user", "no tools here")
    where = ["--url", database_url, "--account", ALICE.account_id]

    table = runner.invoke(app, ["usage", *where], terminal_width=150)
    as_json = runner.invoke(app, ["usage", "s", *where, "--json"])

    assert table.exit_code == as_json.exit_code == 0, table.output + as_json.output
    assert "search" in table.stdout and "Tool usage" in table.stdout
    (row,) = json.loads(as_json.stdout)
    assert (row["session_key"], row["tool_name"], row["call_count"]) == ("s", "search", 2)
    assert (row["prompt_tokens"], row["completion_tokens"], row["total_tokens"]) == (14, 6, 20)


def test_the_projector_module_speaks_the_line_protocol(
    ledger: SessionLedger, database_url: str, tmp_path: Path
) -> None:
    """`python -m chatledger.projector` prints READY/BATCH/DONE lines and nothing else."""
    ledger.add_messages(ALICE, "s", [{"role": "user", "content": f"m{i}"} for i in range(5)])

    completed = subprocess.run(
        [sys.executable, "-m", "chatledger.projector", "--url", database_url, "--progress",
         "--batch-size", "2"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip

    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0] == "READY 6" and lines[-1] == "DONE 6"
    assert all(line.startswith("BATCH ") for line in lines[1:-1]) and len(lines) > 2


def test_a_following_projector_stops_on_sigterm(
    ledger: SessionLedger, database_url: str, tmp_path: Path
) -> None:
    """`project --follow` applies new events as they come and ends cleanly (exit 0) on SIGTERM."""
    ledger.add_message(ALICE, "s", "user", "first")
    process = subprocess.Popen(
        [sys.executable, "-m", "chatledger.projector", "--url", database_url, "--follow",
         "--poll", "0.05"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "READY 2"
        ledger.add_message(ALICE, "s", "user", "second")
        deadline = time.monotonic() + 30
        while min(ledger.read_models.positions().values()) < 3:  # only the follower moves them
            assert time.monotonic() < deadline, "the follower did not apply the new event"
            time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert out.strip().splitlines()[-1].startswith("DONE ")
