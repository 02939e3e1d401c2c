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
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, NoReturn, ParamSpec

import rich.progress
import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.markup import escape

from chatledger.demo import DEMO_KEY, DEMO_PRINCIPAL, run_demo
from chatledger.domain.identity import session_id
from chatledger.domain.values import Principal
from chatledger.errors import ChatLedgerError, InvalidInput
from chatledger.ledger import SessionLedger
from chatledger.read_models_cli import register as register_read_models
from chatledger.render import (
    archives_table,
    buffer_table,
    context_table,
    diff_table,
    history_table,
    meta_table,
    verify_table,
)
from chatledger.results import ChainHead, LedgerEvent
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
    str,
    typer.Option(
        "--account",
        envvar="CHATLEDGER_ACCOUNT",
        help="Tenant account id of the acting principal (env CHATLEDGER_ACCOUNT).",
    ),
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
            demo_sessions = {
                session_id(DEMO_PRINCIPAL.account_id, k) for k in (key, f"{key}-retry")
            }
            _remove_demo_database(path, demo_sessions)
            console.print(f"[dim]Fresh demo database: {escape(str(path))}[/]")
    else:
        key = f"{DEMO_KEY}-{uuid.uuid4().hex[:8]}"
    with SessionLedger(settings=settings) as ledger:
        run_demo(ledger, console, key)


# ------------------------------------------------------------- inspection
KeyArgument = Annotated[str, typer.Argument(help="Session key.")]
AtVersionOption = Annotated[
    int | None, typer.Option("--at-version", help="Show the session as of this version.")
]
AtTimeOption = Annotated[
    str | None,
    typer.Option("--at-time", help="Show the session as of this ISO-8601 time (UTC if no offset)."),
]


def _open(url: str | None) -> SessionLedger:
    return SessionLedger(settings=load_settings(url=url))


def _moment(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"--at-time {text!r} is not an ISO-8601 time.") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@app.command()
@reports_errors
def show(
    key: KeyArgument,
    at_version: AtVersionOption = None,
    at_time: AtTimeOption = None,
    url: UrlOption = None,
    account: AccountOption = "default",
    user: UserOption = "",
    agent: AgentOption = "chatledger-cli",
    admin: AdminOption = False,
    as_json: JsonOption = False,
) -> None:
    """Show a session (meta, live buffer, live archives), now or as it was."""
    p = principal(account, user, agent, admin=admin)
    with _open(url) as ledger:
        view = ledger.session(p, key, at_version=at_version, at_time=_moment(at_time))
    if as_json:
        print_json(view)
        return
    console = Console()
    for table in (meta_table(view), buffer_table(view), archives_table(view)):
        console.print(table)


@app.command()
@reports_errors
def context(
    key: KeyArgument,
    budget: Annotated[int, typer.Option("--budget", help="Token budget.")] = 128_000,
    at_version: AtVersionOption = None,
    at_time: AtTimeOption = None,
    url: UrlOption = None,
    account: AccountOption = "default",
    user: UserOption = "",
    agent: AgentOption = "chatledger-cli",
    admin: AdminOption = False,
    as_json: JsonOption = False,
) -> None:
    """Show the prompt context (latest archive summary + live messages that fit)."""
    p = principal(account, user, agent, admin=admin)
    with _open(url) as ledger:
        view = ledger.context(p, key, budget, at_version=at_version, at_time=_moment(at_time))
    if as_json:
        print_json(view)
    else:
        Console().print(context_table(view))


@app.command()
@reports_errors
def log(
    key: KeyArgument,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new events as they arrive.")
    ] = False,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between polls.")] = 0.5,
    timeout: Annotated[
        float | None, typer.Option("--timeout", help="Stop following after this many seconds.")
    ] = None,
    url: UrlOption = None,
    account: AccountOption = "default",
    user: UserOption = "",
    agent: AgentOption = "chatledger-cli",
    admin: AdminOption = False,
    as_json: JsonOption = False,
) -> None:
    """Print a session's event history (version, time, type, actor, summary)."""
    p = principal(account, user, agent, admin=admin)
    console = Console()
    deadline = None if timeout is None else time.monotonic() + timeout
    with _open(url) as ledger:
        events = ledger.history(p, key)
        _print_events(console, events, as_json=as_json, title=True)
        last = events[-1].version
        while follow and (deadline is None or time.monotonic() < deadline):
            try:
                time.sleep(interval)
            except KeyboardInterrupt:
                break
            new = ledger.history(p, key, after_version=last)
            if new:
                _print_events(console, new, as_json=as_json, title=False)
                last = new[-1].version


def _print_events(
    console: Console, events: Sequence[LedgerEvent], *, as_json: bool, title: bool
) -> None:
    if as_json:
        for item in events:
            typer.echo(item.model_dump_json(exclude={"event"}))
    else:
        table = history_table(events)
        if not title:
            table.title = None
            table.show_header = False
        console.print(table)


@app.command()
@reports_errors
def diff(
    key: KeyArgument,
    from_version: Annotated[int, typer.Argument(help="Older version (excluded).")],
    to_version: Annotated[int, typer.Argument(help="Newer version (included).")],
    url: UrlOption = None,
    account: AccountOption = "default",
    user: UserOption = "",
    agent: AgentOption = "chatledger-cli",
    admin: AdminOption = False,
    as_json: JsonOption = False,
) -> None:
    """What changed between two versions: messages, commits, merges, counters."""
    p = principal(account, user, agent, admin=admin)
    with _open(url) as ledger:
        change = ledger.diff(p, key, from_version, to_version)
    if as_json:
        print_json(change)
    else:
        Console().print(diff_table(change))


@app.command()
@reports_errors
def fork(
    key: KeyArgument,
    at_version: Annotated[int, typer.Option("--at-version", help="Version to fork at.")],
    new_key: Annotated[str, typer.Option("--as", help="Key of the new session.")],
    url: UrlOption = None,
    account: AccountOption = "default",
    user: UserOption = "",
    agent: AgentOption = "chatledger-cli",
    admin: AdminOption = False,
    as_json: JsonOption = False,
) -> None:
    """Start a new session from another's state at a version (the origin is untouched)."""
    p = principal(account, user, agent, admin=admin)
    with _open(url) as ledger:
        view = ledger.fork(p, key, at_version, new_key)
    if as_json:
        print_json(view)
    else:
        Console().print(f"Forked {key!r}@{at_version} as {new_key!r}")
        Console().print(meta_table(view))


@app.command()
@reports_errors
def verify(
    key: Annotated[str | None, typer.Argument(help="One session (default: all).")] = None,
    anchors: Annotated[
        Path | None,
        typer.Option("--anchors", help="JSON file of heads saved earlier with --save-anchors."),
    ] = None,
    save_anchors: Annotated[
        Path | None, typer.Option("--save-anchors", help="Write the verified heads here.")
    ] = None,
    url: UrlOption = None,
    account: AccountOption = "default",
    user: UserOption = "",
    agent: AgentOption = "chatledger-cli",
    admin: AdminOption = False,
    as_json: JsonOption = False,
) -> None:
    """Recompute the hash chains; exit 1 if any chain (or snapshot) is broken."""
    p = principal(account, user, agent, admin=admin)
    known: list[ChainHead] = []
    if anchors is not None:
        try:
            known = [ChainHead.model_validate(h) for h in json.loads(anchors.read_text())]
        except (OSError, ValueError) as error:
            raise InvalidInput(f"Cannot read anchors from {anchors}: {error}") from None
    with _open(url) as ledger:
        report = ledger.verify(p, key, anchors=known)
    if save_anchors is not None and report.ok:
        save_anchors.write_text(
            json.dumps([h.model_dump(mode="json") for h in report.heads], indent=2)
        )
    if as_json:
        print_json(report)
    else:
        Console().print(verify_table(report))
    if not report.ok:
        raise typer.Exit(code=1)


@app.command()
@reports_errors
def export(
    key: Annotated[str | None, typer.Argument(help="One session (default: all).")] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
    url: UrlOption = None,
    account: AccountOption = "default",
    user: UserOption = "",
    agent: AgentOption = "chatledger-cli",
    admin: AdminOption = False,
) -> None:
    """Write events as JSON lines (with their hashes) for replay or archiving."""
    p = principal(account, user, agent, admin=admin)
    with _open(url) as ledger:
        lines = ledger.export(p, key)
        if output is None:
            for line in lines:
                typer.echo(line)
        else:
            with output.open("w", encoding="utf-8") as sink:
                for line in lines:
                    sink.write(line + "\n")


@app.command(name="import")
@reports_errors
def import_(
    file: Annotated[Path, typer.Argument(help="A file written by `chatledger export`.")],
    url: UrlOption = None,
) -> None:
    """Import an export into an empty ledger, verifying every chain first."""
    if not file.is_file():
        raise InvalidInput(f"No such file: {file}")
    console = Console(stderr=True)
    with (
        _open(url) as ledger,
        rich.progress.open(
            file, "r", encoding="utf-8", description="importing", console=console
        ) as source,
    ):
        result = ledger.import_(source)
    Console().print(f"Imported {result.events} events of {result.sessions} sessions.")


def _is_sqlite(url: str) -> bool:
    return url.split(":", 1)[0].split("+", 1)[0] == "sqlite"


def _sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite:///path`` URL; ``None`` for an in-memory database."""
    database = url.split(":///", 1)[1].split("?", 1)[0] if ":///" in url else ""
    return None if database in ("", ":memory:") else Path(database)


def _remove_demo_database(path: Path, demo_sessions: set[uuid.UUID]) -> None:
    """Delete ``path`` (and its WAL files) if it holds nothing but the demo's sessions."""
    if not path.exists():
        return
    if path.stat().st_size > 0 and not _holds_only(path, demo_sessions):
        raise InvalidInput(
            f"Refusing to delete {path}: it is not a demo ledger (it holds other data). "
            "Pass --no-fresh, or a --url of its own for the demo."
        )
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _holds_only(path: Path, demo_sessions: set[uuid.UUID]) -> bool:
    try:
        with closing(sqlite3.connect(path)) as db:
            rows = db.execute("SELECT DISTINCT originator_id FROM chatledger_events").fetchall()
        return {uuid.UUID(str(row[0])) for row in rows} <= demo_sessions
    except (sqlite3.Error, ValueError):
        return False  # not a chatledger database: never delete it


register_read_models(app)


@app.command()
@reports_errors
def serve(
    url: UrlOption = None,
    account: AccountOption = "default",
    user: UserOption = "",
    agent: AgentOption = "chatledger-viewer",
    admin: AdminOption = False,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on; not loopback needs --token.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on (0: any free).")] = 8765,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="CHATLEDGER_WEB_TOKEN",
            help="Secret every request must carry (env CHATLEDGER_WEB_TOKEN).",
            show_default=False,
        ),
    ] = None,
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open the viewer in a web browser.")
    ] = False,
) -> None:
    """Serve a read-only web viewer of the ledger (timelines, time travel, verify)."""
    try:
        from chatledger.web import serve as serve_viewer
    except ModuleNotFoundError as error:
        fail(f"chatledger serve needs the web extra ({error}): pip install 'chatledger[web]'")
    viewer = principal(account, user, agent, admin=admin)
    serve_viewer(viewer, url=url, host=host, port=port, token=token, open_browser=open_browser)


def main() -> None:
    """Entry point of the ``chatledger`` console script."""
    app()


if __name__ == "__main__":
    main()
