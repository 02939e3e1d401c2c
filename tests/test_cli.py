"""The ``chatledger`` command line, driven through typer's ``CliRunner``."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from chatledger import InvalidInput, Principal, SessionLedger
from chatledger.cli import app, principal

runner = CliRunner()


def test_demo_tells_the_whole_story(tmp_path: Path) -> None:
    """`demo` exits 0 and shows a failed commit and an archive merge in the history."""
    result = runner.invoke(app, ["demo", "--url", f"sqlite:///{tmp_path / 'demo.db'}"])

    assert result.exit_code == 0, result.output
    assert "CommitFailed" in result.output
    assert "ArchiveMerged" in result.output
    assert "buffer unchanged: True" in result.output


def test_demo_with_fresh_is_repeatable(tmp_path: Path) -> None:
    """Running `demo --fresh` twice on one file starts over: the same history both times."""
    url = f"sqlite:///{tmp_path / 'demo.db'}"

    first = runner.invoke(app, ["demo", "--url", url, "--fresh"])
    second = runner.invoke(app, ["demo", "--url", url, "--fresh"])

    assert first.exit_code == 0, first.output
    assert second.exit_code == 0, second.output
    with SessionLedger(url) as ledger:
        history = ledger.history(Principal(account_id="acme"), "support-42")
    assert [e.type for e in history].count("Started") == 1
    assert history[-1].version == 17


def test_demo_defaults_to_chatledger_db_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --url (and without CHATLEDGER_URL) the demo writes ./chatledger.db."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CHATLEDGER_URL", raising=False)

    result = runner.invoke(app, ["demo"])

    assert result.exit_code == 0, result.output
    assert (tmp_path / "chatledger.db").is_file()


def test_fresh_never_deletes_a_file_that_is_not_a_demo_ledger(tmp_path: Path) -> None:
    """`demo --fresh` refuses (exit 1) to delete a SQLite file holding other sessions."""
    url = f"sqlite:///{tmp_path / 'real.db'}"
    owner = Principal(account_id="acme", user_id="ops")
    with SessionLedger(url) as ledger:
        ledger.add_message(owner, "production-session", "user", "keep me")

    result = runner.invoke(app, ["demo", "--url", url, "--fresh"])

    assert result.exit_code == 1
    assert "Refusing to delete" in result.output
    with SessionLedger(url) as ledger:
        assert ledger.session(owner, "production-session").message_count == 1


def test_bad_url_is_a_one_line_error_without_traceback() -> None:
    """An unsupported database URL exits 1 with one red line and no traceback."""
    result = runner.invoke(app, ["demo", "--url", "nosuchdb://x"])

    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error:")
    assert "nosuchdb" in lines[0]
    assert "Traceback" not in result.output


def test_demo_runs_on_every_backend(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo works on each test database and deletes no file but its own SQLite one."""
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
    """An empty --account raises InvalidInput (so commands report it as a one-line error)."""
    with pytest.raises(InvalidInput, match="account_id"):
        principal("")
