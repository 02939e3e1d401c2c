"""Erasure on the other faces: the ``chatledger erase`` command, the CLI's reads afterwards,
the viewer, and the async ledger -- on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from chatledger import (
    AsyncSessionLedger,
    Principal,
    SessionErased,
    SessionLedger,
    UnknownSession,
)
from chatledger.cli import app
from chatledger.web import create_app
from erasure_support import SECRET, fill, holds_secret
from support import ALICE

runner = CliRunner()


@pytest.fixture
def make_ledger(make_ledger: Callable[..., SessionLedger]) -> Callable[..., SessionLedger]:
    """Ledgers on the test database with encryption on (the default is off)."""
    return functools.partial(make_ledger, encryption=True)


def _cli(url: str, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, [*args, "--url", url, "--account", "acme"])
    return result.exit_code, result.output


def test_the_cli_erases_only_with_yes_and_reports_as_json(
    database_url: str, make_ledger: Callable[..., SessionLedger]
) -> None:
    """`erase KEY` without --yes changes nothing (exit 2); with it the JSON result names the
    session and its destroyed key; `show` and `log` then print no content."""
    fill(make_ledger())
    code, output = _cli(database_url, "erase", "s1")
    assert code == 2 and "--yes" in output
    assert holds_secret(make_ledger().session(ALICE, "s1"))
    code, output = _cli(database_url, "erase", "s1", "--yes", "--json")
    assert code == 0, output
    result = json.loads(output)
    assert result["erased"] == ["s1"] and len(result["key_ids"]) == 1
    for command in (["show", "s1", "--json"], ["log", "s1", "--json"], ["context", "s1"]):
        code, output = _cli(database_url, *command)
        assert code == 0, output
        assert SECRET not in output and "[erased]" in output
    code, output = _cli(database_url, "verify", "--json")
    assert code == 0 and json.loads(output)["ok"] is True


def test_the_cli_erases_a_user_or_an_account_and_names_one_target(
    database_url: str, make_ledger: Callable[..., SessionLedger]
) -> None:
    """--user-id erases the user's sessions; --tenant needs --admin (exit 5 without); naming
    two targets is a usage error."""
    ledger = make_ledger()
    fill(ledger, "a1")
    fill(ledger, "a2", ALICE.model_copy(update={"user_id": "carol"}))
    code, output = _cli(database_url, "erase", "a1", "--user-id", "alice", "--yes")
    assert code == 2 and "exactly one" in output
    code, output = _cli(database_url, "erase", "--user-id", "alice", "--yes")
    assert code == 0 and "Erased 1 session" in output and "a1" in output
    code, output = _cli(database_url, "erase", "--tenant", "acme", "--yes")
    assert code == 5, output
    code, output = _cli(database_url, "erase", "--tenant", "acme", "--admin", "--yes")
    assert code == 0 and "erased before (nothing recorded): a1" in output
    assert not holds_secret(make_ledger(cache_size=0).session(ALICE, "a2"))


def test_erasing_a_user_who_started_nothing_is_not_found(
    database_url: str, make_ledger: Callable[..., SessionLedger]
) -> None:
    """A misspelt user id erases nothing and says so: UnknownSession from the API, exit 3
    from the CLI, and the ledger is untouched; the real user still erases."""
    ledger = make_ledger()
    fill(ledger, "a1")
    version = ledger.session(ALICE, "a1").version
    with pytest.raises(UnknownSession, match="alcie"):
        ledger.erase_user(ALICE, "alcie")
    code, output = _cli(database_url, "erase", "--user-id", "alcie", "--yes")
    assert code == 3 and "alcie" in output and "Erased" not in output
    assert make_ledger(cache_size=0).session(ALICE, "a1").version == version
    code, output = _cli(database_url, "erase", "--user-id", "alice", "--yes")
    assert code == 0 and "Erased 1 session" in output


def test_a_write_to_an_erased_session_is_exit_code_6(
    database_url: str, make_ledger: Callable[..., SessionLedger]
) -> None:
    """The CLI's one write to a session, fork, fails with CONFLICT (6) once it is erased."""
    fill(make_ledger())
    assert _cli(database_url, "erase", "s1", "--yes")[0] == 0
    code, output = _cli(database_url, "fork", "s1", "--at-version", "2", "--as", "s1-copy")
    assert code == 6 and "erased" in output


def test_the_viewer_marks_an_erased_session_and_shows_no_content(
    make_ledger: Callable[..., SessionLedger],
) -> None:
    """The session list, the timeline and every version page show the erasure, not the text."""
    ledger = make_ledger()
    fill(ledger)
    ledger.erase(ALICE, "s1")
    ledger.read_models.catch_up()
    with TestClient(
        create_app(ledger, ALICE, follow=False), base_url="http://127.0.0.1:8765"
    ) as viewer:
        listing = viewer.get("/?status=erased").text
        assert "s1" in listing and "status-erased" in listing
        timeline = viewer.get("/sessions/acme/s1").text
        assert "was erased" in timeline and SECRET not in timeline
        head = ledger.session(ALICE, "s1").version
        for version in range(1, head + 1):
            page = viewer.get(f"/sessions/acme/s1/versions/{version}")
            assert page.status_code == 200 and SECRET not in page.text
        assert "[erased]" in viewer.get("/sessions/acme/s1/versions/3").text


def test_the_async_ledger_erases_too(make_ledger: Callable[..., SessionLedger]) -> None:
    """AsyncSessionLedger.erase, erase_user and erase_tenant are the sync ones, off the loop."""
    ledger = make_ledger()
    fill(ledger, "s1")
    fill(ledger, "s2")
    admin = Principal(account_id="ops", role="admin")

    async def run() -> None:
        face = AsyncSessionLedger(ledger)
        assert (await face.erase(ALICE, "s1")).erased == ("s1",)
        assert (await face.erase_user(ALICE, "alice")).erased == ("s2",)
        assert (await face.erase_tenant(admin, "acme")).already_erased == ("s1", "s2")
        try:
            await face.add_message(ALICE, "s1", "user", "again")
        except SessionErased:
            return
        raise AssertionError("an erased session took a write")

    asyncio.run(run())
