"""The ``chatledger`` command line (a typer app; ``main`` is the console script).

Commands share the option vocabulary defined here — ``--url`` for the store,
``--account/--user/--agent/--admin`` for the acting ``Principal``, ``--json``
for machine-readable output — and the ``reports_errors`` decorator, which turns
a ``ChatLedgerError`` into a one-line red message and exit code 1 (no
traceback). Output goes through rich. Nothing imports this module.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from contextlib import closing
from pathlib import Path
from typing import Annotated, NoReturn, ParamSpec

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.markup import escape

from chatledger.demo import DEMO_KEY, DEMO_PRINCIPAL, run_demo
from chatledger.domain.identity import session_id
from chatledger.domain.values import Principal
from chatledger.errors import ChatLedgerError, InvalidInput
from chatledger.ledger import SessionLedger
from chatledger.settings import load_settings

P = ParamSpec("P")

app = typer.Typer(
    name="chatledger",
    help="An event-sourced ledger for LLM agent sessions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold message contents
)

# ------------------------------------------------------------ shared options
UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="SQLAlchemy URL of the ledger [default: CHATLEDGER_URL or sqlite:///chatledger.db].",
        show_default=False,
    ),
]
AccountOption = Annotated[
    str, typer.Option("--account", help="Tenant account id of the acting principal.")
]
UserOption = Annotated[str, typer.Option("--user", help="User id of the acting principal.")]
AgentOption = Annotated[str, typer.Option("--agent", help="Agent id of the acting principal.")]
AdminOption = Annotated[
    bool, typer.Option("--admin", help="Act as an admin (may name other accounts).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def principal(
    account: str, user: str = "", agent: str = "chatledger-cli", *, admin: bool = False
) -> Principal:
    """The ``Principal`` named by the ``--account/--user/--agent/--admin`` options."""
    try:
        return Principal(
            account_id=account, user_id=user, agent_id=agent, role="admin" if admin else "member"
        )
    except ValidationError as error:
        problems = "; ".join(f"{e['loc'][0]}: {e['msg']}" for e in error.errors())
        raise InvalidInput(f"Invalid principal options ({problems}).") from None


def print_json(data: BaseModel | Sequence[BaseModel]) -> None:
    """Write results as JSON on stdout (plain text: no rich markup or wrapping)."""
    if isinstance(data, BaseModel):
        payload: object = data.model_dump(mode="json")
    else:
        payload = [item.model_dump(mode="json") for item in data]
    typer.echo(json.dumps(payload, indent=2, ensure_ascii=False))


def fail(message: str) -> NoReturn:
    """Print ``message`` as one red line on stderr and exit with code 1."""
    line = " ".join(message.split())
    Console(stderr=True).print(f"[bold red]error:[/] {escape(line)}", soft_wrap=True)
    raise typer.Exit(code=1)


def reports_errors(command: Callable[P, None]) -> Callable[P, None]:
    """Let a command's ``ChatLedgerError`` end the program as a one-line message."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            command(*args, **kwargs)
        except ChatLedgerError as error:
            fail(str(error))

    return wrapper


@app.callback()
def _root() -> None:
    """chatledger: an embeddable, event-sourced ledger for LLM agent sessions."""


# ------------------------------------------------------------------- demo
@app.command()
@reports_errors
def demo(
    url: UrlOption = None,
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh/--no-fresh",
            help="Delete the demo's SQLite file first so the demo is repeatable "
            "(other databases are never touched: the demo uses a new session key).",
        ),
    ] = True,
) -> None:
    """Play a scripted support session and show what the ledger recorded."""
    settings = load_settings(url=url)
    console = Console()
    key = DEMO_KEY
    if _is_sqlite(settings.url):
        path = _sqlite_file(settings.url)
        if fresh and path is not None:
            _remove_demo_database(path, session_id(DEMO_PRINCIPAL.account_id, key))
            console.print(f"[dim]Fresh demo database: {escape(str(path))}[/]")
    else:
        key = f"{DEMO_KEY}-{uuid.uuid4().hex[:8]}"
    with SessionLedger(settings=settings) as ledger:
        run_demo(ledger, console, key)


def _is_sqlite(url: str) -> bool:
    return url.split(":", 1)[0].split("+", 1)[0] == "sqlite"


def _sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///path`` URL; ``None`` for an in-memory database."""
    database = url.split(":///", 1)[1].split("?", 1)[0] if ":///" in url else ""
    return None if database in ("", ":memory:") else Path(database)


def _remove_demo_database(path: Path, demo_session: uuid.UUID) -> None:
    """Delete ``path`` (and its WAL files) if it holds nothing but the demo session."""
    if not path.exists():
        return
    if path.stat().st_size > 0 and not _holds_only(path, demo_session):
        raise InvalidInput(
            f"Refusing to delete {path}: it is not a demo ledger (it holds other data). "
            "Pass --no-fresh, or a --url of its own for the demo."
        )
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _holds_only(path: Path, demo_session: uuid.UUID) -> bool:
    try:
        with closing(sqlite3.connect(path)) as db:
            rows = db.execute("SELECT DISTINCT originator_id FROM chatledger_events").fetchall()
        return {uuid.UUID(str(row[0])) for row in rows} <= {demo_session}
    except (sqlite3.Error, ValueError):
        return False  # not a chatledger database: never delete it


def main() -> None:
    """Entry point of the ``chatledger`` console script."""
    app()


if __name__ == "__main__":
    main()
