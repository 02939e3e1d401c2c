"""CLI commands for the persisted read models: ``rebuild``, ``project`` and ``sessions``.

``register(app)`` adds them to the ``chatledger`` typer app; they share the
option vocabulary and error handling of ``chatledger.cli`` (imported when
``register`` runs, so that ``chatledger.cli`` can call it at its end without
an import cycle at load time).
"""

# No ``from __future__ import annotations`` here: typer reads the commands'
# annotations at runtime, and they name options imported inside ``register``.
import signal
from types import FrameType
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from chatledger.errors import InvalidInput
from chatledger.ledger import SessionLedger
from chatledger.read_models import ReadModels, WorkingSetOrder
from chatledger.settings import load_settings

ProjectionsUrlOption = Annotated[
    str | None,
    typer.Option(
        "--projections-url",
        help="Database of the read models [default: the ledger's own database].",
        show_default=False,
    ),
]


def register(app: typer.Typer) -> None:
    """Add the ``rebuild``, ``project`` and ``sessions`` commands to ``app``."""
    from chatledger.cli import (
        AccountOption,
        AdminOption,
        AgentOption,
        JsonOption,
        UrlOption,
        UserOption,
        principal,
        print_json,
        reports_errors,
    )

    @app.command()
    @reports_errors
    def rebuild(
        name: Annotated[
            str | None, typer.Argument(help="Read model to rebuild (see --all).")
        ] = None,
        all_: Annotated[bool, typer.Option("--all", help="Rebuild every read model.")] = False,
        url: UrlOption = None,
        projections_url: ProjectionsUrlOption = None,
    ) -> None:
        """Drop read models and replay the whole ledger into them, with a progress bar."""
        if all_ == (name is not None):
            raise InvalidInput(
                "Name one read model (working_set, archives, audit, usage) or pass --all."
            )
        settings = load_settings(url=url)
        with (
            SessionLedger(settings=settings) as ledger,
            ReadModels(ledger, url=projections_url) as models,
        ):
            if name is not None:
                models.check_name(name)
            head = models.head()
            columns = (
                TextColumn("[bold]rebuild {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
            )
            with Progress(*columns, console=Console(stderr=True)) as bar:
                task = bar.add_task(name or "all", total=max(head, 1))

                def advance(done: int, _head: int) -> None:
                    bar.update(task, completed=min(done, head))

                count = models.rebuild(name, progress=advance)
                bar.update(task, completed=max(head, 1))
        Console().print(f"Rebuilt {escape(name or 'all read models')} from {count} events.")

    @app.command()
    @reports_errors
    def project(
        url: UrlOption = None,
        projections_url: ProjectionsUrlOption = None,
        follow: Annotated[
            bool, typer.Option("--follow", help="Keep following the ledger until interrupted.")
        ] = False,
        poll: Annotated[
            float | None,
            typer.Option("--poll", help="Longest idle wait between polls, in seconds."),
        ] = None,
    ) -> None:
        """Bring the read models up to date (once, or continuously with --follow)."""
        settings = load_settings(url=url)
        console = Console()
        with (
            SessionLedger(settings=settings) as ledger,
            ReadModels(ledger, url=projections_url, poll_interval=poll) as models,
        ):
            if models.reset_on_start:
                console.print(f"[dim]Version changed, rebuilding: {models.reset_on_start}[/]")
            count = models.catch_up()
            console.print(f"Applied {count} events; positions {models.positions()}.")
            if follow:

                def stop(_signum: int, _frame: FrameType | None) -> None:
                    models._projector.stop()

                signal.signal(signal.SIGTERM, stop)
                signal.signal(signal.SIGINT, stop)
                console.print("[dim]Following the ledger; Ctrl-C to stop.[/]")
                models.run()

    @app.command()
    @reports_errors
    def sessions(
        account: AccountOption,
        url: UrlOption = None,
        projections_url: ProjectionsUrlOption = None,
        user: UserOption = "",
        agent: AgentOption = "chatledger-cli",
        admin: AdminOption = False,
        order: Annotated[
            str, typer.Option("--order", help="last_activity (default), created or key.")
        ] = "last_activity",
        limit: Annotated[int, typer.Option("--limit", help="At most this many rows.")] = 50,
        offset: Annotated[int, typer.Option("--offset", help="Skip this many rows.")] = 0,
        include_evicted: Annotated[
            bool, typer.Option("--evicted", help="Include evicted and closed sessions.")
        ] = False,
        catch_up: Annotated[
            bool,
            typer.Option("--catch-up/--no-catch-up", help="Apply pending events before listing."),
        ] = True,
        as_json: JsonOption = False,
    ) -> None:
        """List the working set: sessions by most recent activity."""
        if order not in ("last_activity", "created", "key"):
            raise InvalidInput("--order must be last_activity, created or key.")
        chosen: WorkingSetOrder = order  # type: ignore[assignment]
        who = principal(account, user, agent, admin=admin)
        settings = load_settings(url=url)
        with (
            SessionLedger(settings=settings) as ledger,
            ReadModels(ledger, url=projections_url) as models,
        ):
            if catch_up:
                models.catch_up()
            rows = models.working_set(
                who, order=chosen, limit=limit, offset=offset, include_evicted=include_evicted
            )
        if as_json:
            print_json(rows)
            return
        table = Table(title="Working set")
        for column in ("account", "key", "status", "messages", "pending", "commits", "last"):
            table.add_column(column)
        for row in rows:
            table.add_row(
                escape(row.account_id),
                escape(row.session_key),
                row.status,
                str(row.message_count),
                str(row.pending_tokens),
                str(row.commit_count),
                row.last_activity_at.isoformat(timespec="seconds"),
            )
        Console().print(table)
