"""Exit codes and error lines: one documented table, the same in every command.

A cron job must tell tampering (1) from a bad command line (2), a wrong URL or
key (3) and an outage (4); every failure is one ``error:`` line on stderr, and no
read-only command leaves a database behind.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect
from typer.testing import CliRunner

from chatledger import SessionLedger, errors
from chatledger.cli import app
from chatledger.cli.common import ExitCode, exit_code_for
from support import ALICE

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
AS_ALICE = ["--account", ALICE.account_id]


def test_the_documented_table_is_the_code_table() -> None:
    """docs/cli.md lists exactly the codes of ExitCode, with their numbers."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    documented = {int(n): name for n, name in re.findall(r"^\| (\d+) \| `(\w+)` \|", text, re.M)}

    assert documented == {code.value: code.name for code in ExitCode}


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.InvalidInput, ExitCode.USAGE),
        (errors.InvalidSettings, ExitCode.USAGE),
        (errors.UnknownSession, ExitCode.NOT_FOUND),
        (errors.LedgerNotFound, ExitCode.NOT_FOUND),
        (errors.StoreUnavailable, ExitCode.UNAVAILABLE),
        (errors.WriteOutcomeUnknown, ExitCode.UNAVAILABLE),
        (errors.AccessDenied, ExitCode.DENIED),
        (errors.ConcurrencyConflict, ExitCode.CONFLICT),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_each_public_error_has_its_exit_code(error: type[Exception], code: ExitCode) -> None:
    """Every class of chatledger.errors maps to its code (none falls through to INTERNAL)."""
    assert exit_code_for(error("x")) == code


def test_every_public_error_class_is_in_the_table() -> None:
    """No public error class is left out of the mapping (a new one must be classified)."""
    public = [getattr(errors, name) for name in errors.__all__]

    assert [e.__name__ for e in public if exit_code_for(e("x")) == ExitCode.INTERNAL] == [
        "ChatLedgerError"
    ]


READ_ONLY = [
    ["show", "s1"],
    ["context", "s1"],
    ["log", "s1"],
    ["diff", "s1", "1", "2"],
    ["fork", "s1", "--at-version", "1", "--as", "s2"],
    ["sessions"],
    ["usage"],
    ["verify"],
    ["export"],
    ["rebuild", "--all"],
    ["project"],
]


@pytest.mark.parametrize("args", READ_ONLY, ids=lambda a: a[0])
def test_commands_never_create_a_database(
    args: list[str], database_url: str, tmp_path: Path
) -> None:
    """On a missing SQLite file or an empty PostgreSQL schema: exit 3, nothing created."""
    result = runner.invoke(app, [*args, "--url", database_url])

    assert result.exit_code == ExitCode.NOT_FOUND, result.output
    assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1
    assert "database " in result.stderr  # the error names where it looked
    if database_url.startswith("sqlite"):
        assert not (tmp_path / "ledger.db").exists()
    else:
        engine = create_engine(database_url)
        try:
            assert inspect(engine).get_table_names() == []
        finally:
            engine.dispose()


def test_unknown_session_names_the_account_and_the_database(tmp_path: Path) -> None:
    """ "No session" errors say which account and database were searched, and how to switch."""
    url = f"sqlite:///{tmp_path / 'l.db'}"
    with SessionLedger(url) as ledger:
        ledger.add_message(ALICE, "t-9", "user", "hello")

    result = runner.invoke(app, ["show", "t-9", "--url", url])

    assert result.exit_code == ExitCode.NOT_FOUND
    assert "account 'default'" in result.stderr and url in result.stderr
    assert "--account" in result.stderr


@pytest.mark.parametrize(
    "args",
    [["show"], ["show", "s1", "--nope"], ["diff", "s1", "one", "2"], ["nosuchcommand"]],
    ids=" ".join,
)
def test_usage_errors_are_one_line_with_code_2(args: list[str]) -> None:
    """Click's usage errors print one line pointing at --help (no box, no usage block)."""
    result = runner.invoke(app, args)

    assert result.exit_code == ExitCode.USAGE
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and "--help" in line


def test_a_missing_input_file_is_not_found(tmp_path: Path) -> None:
    """`import` of a file that does not exist exits 3 before touching any database."""
    url = f"sqlite:///{tmp_path / 'copy.db'}"

    result = runner.invoke(app, ["import", str(tmp_path / "nope.jsonl"), "--url", url])

    assert result.exit_code == ExitCode.NOT_FOUND
    assert not (tmp_path / "copy.db").exists()


def test_an_unreachable_database_is_store_unavailable() -> None:
    """A PostgreSQL server that refuses connections exits 4 (an outage, not tampering)."""
    result = runner.invoke(
        app, ["verify", "--url", "postgresql+psycopg://nobody@127.0.0.1:9/none", *AS_ALICE]
    )

    assert result.exit_code == ExitCode.UNAVAILABLE, result.output
    assert len(result.stderr.splitlines()) == 1


def test_an_unexpected_error_is_internal_and_v_shows_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug exits 70 with one line suggesting -v; with -v the traceback is on stderr."""
    url = f"sqlite:///{tmp_path / 'l.db'}"
    with SessionLedger(url) as ledger:
        ledger.add_message(ALICE, "s1", "user", "hello")

    def broken(*_args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("chatledger.render.meta_table", broken)

    quiet = runner.invoke(app, ["show", "s1", "--url", url, *AS_ALICE])
    loud = runner.invoke(app, ["show", "s1", "--url", url, "-v", *AS_ALICE])

    assert quiet.exit_code == loud.exit_code == ExitCode.INTERNAL
    assert quiet.stderr.splitlines() == [
        "error: unexpected RuntimeError: boom (a bug in chatledger; run with -v for the traceback)"
    ]
    assert "Traceback (most recent call last)" in loud.stderr


def test_the_projector_module_uses_the_same_codes(tmp_path: Path) -> None:
    """`python -m chatledger.projector` exits 3 on a missing database and 2 on a bad option."""
    missing = subprocess.run(
        [sys.executable, "-m", "chatledger.projector", "--url", f"sqlite:///{tmp_path / 'x.db'}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    bad = subprocess.run(
        [sys.executable, "-m", "chatledger.projector", "--bogus"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )

    assert (missing.returncode, bad.returncode) == (ExitCode.NOT_FOUND, ExitCode.USAGE)
    assert missing.stderr.startswith("error: No chatledger database")
    assert len(bad.stderr.splitlines()) == 1
    assert not (tmp_path / "x.db").exists()
