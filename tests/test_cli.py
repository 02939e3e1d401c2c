"""The ``chatledger`` command line: the demo, the principal options, help and version."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from typer.testing import CliRunner

import chatledger
from chatledger import InvalidInput, Principal, SessionLedger
from chatledger.cli import app
from chatledger.cli.common import DEFAULT_URL, principal

runner = CliRunner()
ACME = Principal(account_id="acme")


def test_demo_tells_the_whole_story(tmp_path: Path) -> None:
    """`demo` exits 0 and shows a failed commit and an archive merge in the history."""
    result = runner.invoke(app, ["demo", "--url", f"sqlite:///{tmp_path / 'demo.db'}"])

    assert result.exit_code == 0, result.output
    assert "CommitFailed" in result.output
    assert "ArchiveMerged" in result.output
    assert "buffer unchanged: True" in result.output


def test_a_second_demo_adds_a_new_session_and_says_so(tmp_path: Path) -> None:
    """Run twice on one file, the demo keeps the first session as it was and names the new key."""
    url = f"sqlite:///{tmp_path / 'demo.db'}"

    first = runner.invoke(app, ["demo", "--url", url])
    second = runner.invoke(app, ["demo", "--url", url])

    assert first.exit_code == 0, first.output
    assert second.exit_code == 0, second.output
    assert "already exists" in second.output and "'support-42-2'" in second.output
    assert "chatledger log support-42-2 --account acme" in second.output
    with SessionLedger(url) as ledger:
        for key in ("support-42", "support-42-2"):
            history = ledger.history(ACME, key)
            assert [e.type for e in history].count("Started") == 1
            assert history[-1].version == 17


def test_demo_no_fresh_goes_on_with_the_demo_session(tmp_path: Path) -> None:
    """`demo --no-fresh` a second time continues 'support-42' instead of adding a session."""
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    runner.invoke(app, ["demo", "--url", url])

    again = runner.invoke(app, ["demo", "--url", url, "--no-fresh"])

    assert again.exit_code == 0, again.output
    with SessionLedger(url) as ledger:
        assert ledger.history(ACME, "support-42")[-1].version == 33
        assert ledger.session(ACME, "support-42-retry-2").version == 1  # a fork key of its own


def test_demo_defaults_to_chatledger_db_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --url (and without CHATLEDGER_URL) the demo writes ./chatledger.db."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CHATLEDGER_URL", raising=False)

    result = runner.invoke(app, ["demo"])

    assert result.exit_code == 0, result.output
    assert (tmp_path / "chatledger.db").is_file()
    assert "chatledger log support-42 --account acme\n" in result.output  # no --url needed


def test_demo_never_deletes_or_changes_an_applications_database(tmp_path: Path) -> None:
    """On a SQLite file holding an app's own table the demo adds its tables, touching no row."""
    path = tmp_path / "app.db"
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
        db.execute("INSERT INTO orders (item) VALUES ('parcel')")

    result = runner.invoke(app, ["demo", "--url", f"sqlite:///{path}"])

    assert result.exit_code == 0, result.output
    assert "creating chatledger's tables there" in result.output
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT id, item FROM orders").fetchall() == [(1, "parcel")]


def test_demo_never_deletes_a_ledger_with_other_sessions(tmp_path: Path) -> None:
    """A ledger holding other sessions keeps them: the demo only adds its own."""
    url = f"sqlite:///{tmp_path / 'real.db'}"
    owner = Principal(account_id="acme", user_id="ops")
    with SessionLedger(url) as ledger:
        ledger.add_message(owner, "production-session", "user", "keep me")

    result = runner.invoke(app, ["demo", "--url", url, "--fresh"])

    assert result.exit_code == 0, result.output
    with SessionLedger(url) as ledger:
        assert ledger.session(owner, "production-session").message_count == 1


def test_demo_json_carries_what_the_tables_show(tmp_path: Path) -> None:
    """`demo --json` prints one JSON document: the session, its history with content, verify."""
    url = f"sqlite:///{tmp_path / 'demo.db'}"

    result = runner.invoke(app, ["demo", "--url", url, "--json"])

    assert result.exit_code == 0, result.output
    story = json.loads(result.stdout)
    assert story["key"] == "support-42" and story["account"] == "acme"
    assert story["verify"]["ok"] is True
    types = [e["type"] for e in story["history"]]
    assert "CommitFailed" in types and "ArchiveMerged" in types
    failed = next(e for e in story["history"] if e["type"] == "CommitFailed")
    assert "summarizer timed out" in failed["event"]["error"]
    assert story["try"][0] == f"chatledger log support-42 --account acme --url {url}"


def test_bad_url_is_a_one_line_error_without_traceback() -> None:
    """An unsupported database URL exits 2 (invalid settings) with one line and no traceback."""
    result = runner.invoke(app, ["demo", "--url", "nosuchdb://x"])

    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error:")
    assert "nosuchdb" in lines[0]
    assert "Traceback" not in result.output


def test_demo_runs_on_every_backend(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo works on each test database and touches no file it did not create."""
    monkeypatch.chdir(tmp_path)
    bystander = tmp_path / "chatledger.db"
    bystander.write_bytes(b"not yours to delete")

    result = runner.invoke(app, ["demo", "--url", database_url])

    assert result.exit_code == 0, result.output
    assert "CommitFailed" in result.output
    assert "ArchiveMerged" in result.output
    assert bystander.read_bytes() == b"not yours to delete"


def test_principal_options_build_a_principal() -> None:
    """--account/--user/--agent/--admin map onto a Principal; --admin makes an admin."""
    built = principal("acme", "alice", "bot", admin=True)

    assert built == Principal(account_id="acme", user_id="alice", agent_id="bot", role="admin")
    assert principal("acme").role == "member"


def test_invalid_principal_options_are_a_chatledger_error() -> None:
    """An empty --account raises InvalidInput naming the option."""
    with pytest.raises(InvalidInput, match="--account"):
        principal("")


def test_the_default_url_is_the_ledgers_default() -> None:
    """The URL the CLI names in help and errors is the one LedgerSettings falls back to."""
    from chatledger import LedgerSettings

    assert LedgerSettings.model_fields["url"].default == DEFAULT_URL


def test_version_prints_the_package_version() -> None:
    """`chatledger --version` prints the single-sourced version and exits 0."""
    result = runner.invoke(app, ["--version"])

    assert result.exit_code == 0
    assert result.stdout == f"chatledger {chatledger.__version__}\n"


COMMANDS = [
    "show", "context", "log", "diff", "fork", "sessions", "usage",
    "verify", "export", "import", "rebuild", "project", "demo",
]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_json_verbose_an_example_and_visible_defaults(command: str) -> None:
    """Each command's help lists --json, -v, --url with its default and env var, and an example."""
    result = runner.invoke(app, [command, "--help"], terminal_width=200)

    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "--json" in text and "-v, --verbose" in text
    assert "env var: CHATLEDGER_URL" in text and "sqlite:///chatledger.db" in text
    assert f"\n    chatledger {command}" in text, "an example line"


@pytest.mark.parametrize("command", ["show", "log", "sessions", "usage", "verify", "export"])
def test_commands_on_sessions_share_one_principal_rule(command: str) -> None:
    """Every command that reads sessions defaults --account the same way, from one env var."""
    result = runner.invoke(app, [command, "--help"], terminal_width=200)

    assert "env var: CHATLEDGER_ACCOUNT; default: default" in result.stdout
    assert "--admin" in result.stdout and "--user" in result.stdout


def test_no_command_requires_the_account_option(tmp_path: Path) -> None:
    """`sessions` without --account lists the 'default' account instead of failing."""
    url = f"sqlite:///{tmp_path / 'l.db'}"
    with SessionLedger(url) as ledger:
        ledger.add_message(Principal(account_id="default"), "mine", "user", "hello")

    result = runner.invoke(app, ["sessions", "--url", url, "--json"])

    assert result.exit_code == 0, result.output
    assert [row["session_key"] for row in json.loads(result.stdout)] == ["mine"]


def test_verbose_logs_the_chatledger_loggers_to_stderr(tmp_path: Path) -> None:
    """-v shows INFO lines of the chatledger loggers on stderr; without it stderr is empty."""
    import logging

    url = f"sqlite:///{tmp_path / 'l.db'}"
    with SessionLedger(url) as ledger:
        ledger.add_message(ACME, "s1", "user", "hello")

    quiet = runner.invoke(app, ["show", "s1", "--url", url, "--account", "acme"])
    loud = runner.invoke(app, ["show", "s1", "--url", url, "--account", "acme", "-v"])

    assert quiet.exit_code == loud.exit_code == 0
    assert quiet.stderr == ""
    assert f"INFO chatledger.cli: opening the ledger at {url}" in loud.stderr
    assert logging.getLogger("chatledger").handlers == []  # removed after the command
