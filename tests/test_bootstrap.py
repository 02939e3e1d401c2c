"""Opening a ledger (chatledger/service/bootstrap.py): nothing is written to a database before
it is known to be a ledger, and a command that only reads writes nothing at all.

A SQLite file that is not a ledger -- another application's database, an empty file, a
file that is not SQLite -- is refused (``LedgerNotFound``, CLI exit code 3) by every
command that does not create ledgers, with its bytes and modification time as they were
and no file beside it (no WAL switch, no journal). On PostgreSQL a schema holding other
tables is left with the same tables and rows. A ledger read by ``show``, ``context``,
``log``, ``diff``, ``verify`` (deep too) and ``export`` -- and by ``sessions`` and
``usage`` while its read models are current -- is not written either.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, text
from test_cli_exit_codes import READ_ONLY
from typer.testing import CliRunner

from chatledger import LedgerNotFound, ReadModels, SessionLedger
from chatledger.cli import app
from chatledger.cli.common import ExitCode
from support import ALICE

runner = CliRunner()
AS_ALICE = ["--account", ALICE.account_id]

# Every command that does not create a ledger (``import`` and ``demo`` do): those that take
# a principal, and the read-model and schema commands, which take none.
NO_PRINCIPAL = [["rebuild", "--all"], ["project"], ["migrate"]]
NOT_CREATING = [
    *(a for a in READ_ONLY if a not in NO_PRINCIPAL),
    ["sessions", "--no-catch-up"],
    ["verify", "--deep"],
    ["erase", "s1", "--yes"],
]
# The commands that only read (``sessions`` and ``usage`` catch their read models up first:
# a write of read-model rows, none while those are current).
READING = [
    ["show", "s1"],
    ["context", "s1"],
    ["log", "s1"],
    ["diff", "s1", "1", "3"],
    ["verify"],
    ["verify", "--deep"],
    ["export"],
    ["sessions"],
    ["usage"],
]


def _sqlite_file(kind: str, path: Path) -> None:
    if kind == "another application's database":
        with sqlite3.connect(path) as connection:  # (rollback journal, as SQLite's default)
            connection.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
            connection.execute("INSERT INTO users VALUES (1, 'ann')")
        connection.close()
    elif kind == "an empty file":
        path.write_bytes(b"")
    else:
        path.write_text("name,email\nann,ann@example.com\n", encoding="utf-8")


def _files(path: Path) -> dict[str, tuple[bytes, int]]:
    """Every file in ``path``'s directory with its bytes and modification time (ns)."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(path.parent.iterdir())}


@pytest.mark.parametrize("kind", ["another application's database", "an empty file", "a CSV file"])
@pytest.mark.parametrize("args", [a + AS_ALICE for a in NOT_CREATING] + NO_PRINCIPAL, ids=" ".join)
def test_a_sqlite_file_that_is_no_ledger_is_refused_untouched(
    tmp_path: Path, kind: str, args: list[str]
) -> None:
    """Exit code 3, one error line, and the file (and its directory) as it was: bytes,
    modification time, no WAL or journal file beside it."""
    path = tmp_path / "app.db"
    _sqlite_file(kind, path)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))  # a time no write could keep
    before = _files(path)
    result = runner.invoke(app, [*args, "--url", f"sqlite:///{path}"])
    assert result.exit_code == ExitCode.NOT_FOUND, result.output
    assert "no chatledger ledger" in result.stderr, result.stderr
    assert _files(path) == before


@pytest.mark.parametrize("kind", ["another application's database", "an empty file", "a CSV file"])
def test_the_api_refuses_a_file_that_is_no_ledger_untouched(tmp_path: Path, kind: str) -> None:
    """``SessionLedger(url, create_tables=False)``: LedgerNotFound, the file untouched."""
    path = tmp_path / "app.db"
    _sqlite_file(kind, path)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    before = _files(path)
    with pytest.raises(LedgerNotFound, match="no chatledger ledger"):
        SessionLedger(f"sqlite:///{path}", create_tables=False)
    assert _files(path) == before


@pytest.fixture
def postgres_other_schema(database_url: str) -> Iterator[str]:
    """A PostgreSQL schema holding another application's table (no ledger)."""
    engine = create_engine(database_url)
    try:
        with engine.begin() as connection:
            connection.execute(text("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)"))
            connection.execute(text("INSERT INTO users VALUES (1, 'ann')"))
    finally:
        engine.dispose()
    yield database_url


def _schema(url: str) -> dict[str, list[Any]]:
    """Every table of the schema ``url`` points at, with its rows."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return {
                name: sorted(map(tuple, connection.execute(text(f"SELECT * FROM {name}"))))
                for name in sorted(inspect(connection).get_table_names())
            }
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("args", [a + AS_ALICE for a in NOT_CREATING] + NO_PRINCIPAL, ids=" ".join)
def test_a_postgres_schema_that_is_no_ledger_is_refused_untouched(
    postgres_other_schema: str, args: list[str]
) -> None:
    """Exit code 3 and the schema as it was: its one table, its one row, nothing added."""
    before = _schema(postgres_other_schema)
    result = runner.invoke(app, [*args, "--url", postgres_other_schema])
    assert result.exit_code == ExitCode.NOT_FOUND, result.output
    assert _schema(postgres_other_schema) == before == {"users": [(1, "ann")]}


@pytest.fixture
def ledger_url(make_ledger: Callable[..., SessionLedger], database_url: str) -> str:
    """A ledger with one session (committed, with a tool call) and current read models."""
    ledger = make_ledger()
    ledger.add_message(ALICE, "s1", "user", "Where is order 1042?")
    ledger.add_message(ALICE, "s1", "tool", "shipped", tool_call={"tool_name": "orders"})
    ledger.commit(ALICE, "s1")
    with ReadModels(ledger) as models:
        models.catch_up()
    ledger.close()
    return database_url


@pytest.mark.parametrize("args", READING, ids=" ".join)
def test_reading_a_ledger_writes_nothing(ledger_url: str, args: list[str]) -> None:
    """A command that reads a ledger leaves it as it was: on SQLite every file's bytes and
    modification time, on PostgreSQL every table's rows."""
    if ledger_url.startswith("sqlite"):
        path = Path(ledger_url.removeprefix("sqlite:///"))
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))
        before: Any = _files(path)
    else:
        before = _schema(ledger_url)
    result = runner.invoke(app, [*args, "--url", ledger_url, *AS_ALICE])
    assert result.exit_code == 0, result.output
    if ledger_url.startswith("sqlite"):
        assert _files(path) == before
    else:
        assert _schema(ledger_url) == before
