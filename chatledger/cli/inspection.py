"""Commands that read sessions: ``show``, ``context``, ``log``, ``diff``, ``sessions``,
``usage``, and ``fork``, which starts a new session from a past version of another.

None of them creates a database: a mistyped ``--url`` is an error (exit code 3),
never a new empty ledger. Each imports the ledger inside its body (see common.py).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from chatledger.cli.common import Invocation, KeyArgument, ProjectionsUrlOption, shared_options
from chatledger.cli.output import event_record, print_json_line

if TYPE_CHECKING:
    from rich.console import Console

    from chatledger.results import LedgerEvent

group = typer.Typer()

AtVersionOption = Annotated[
    int | None, typer.Option("--at-version", help="As of this version (1 = the first event).")
]
AtTimeOption = Annotated[
    str | None,
    typer.Option("--at-time", help="As of this ISO-8601 time (UTC if it has no offset)."),
]
CatchUpOption = Annotated[
    bool,
    typer.Option("--catch-up/--no-catch-up", help="Apply pending events to the read models first."),
]


def _moment(text: str | None) -> datetime | None:
    from chatledger.errors import InvalidInput

    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(f"--at-time {text!r} is not an ISO-8601 time.") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@group.command()
@shared_options()
def show(
    key: KeyArgument,
    at_version: AtVersionOption = None,
    at_time: AtTimeOption = None,
    *,
    call: Invocation,
) -> None:
    """Show a session, now or as of a version or time.

    Prints its meta data, live buffer and live archives.

    \b
    Examples:
      chatledger show support-42 --account acme
      chatledger show support-42 --account acme --at-version 5 --json
    """
    from chatledger.render import archives_table, buffer_table, meta_table

    with call.ledger() as ledger:
        view = ledger.session(call.principal, key, at_version=at_version, at_time=_moment(at_time))
    call.show(view, meta_table(view), buffer_table(view), archives_table(view))


@group.command()
@shared_options()
def context(
    key: KeyArgument,
    budget: Annotated[int, typer.Option("--budget", help="Token budget.")] = 128_000,
    at_version: AtVersionOption = None,
    at_time: AtTimeOption = None,
    *,
    call: Invocation,
) -> None:
    """Show the prompt context a session gives an agent.

    The latest archive summary and the newest live messages that fit the budget.

    \b
    Example:
      chatledger context support-42 --account acme --at-version 5 --budget 2000
    """
    from chatledger.render import context_table

    with call.ledger() as ledger:
        view = ledger.context(
            call.principal, key, budget, at_version=at_version, at_time=_moment(at_time)
        )
    call.show(view, context_table(view))


@group.command()
@shared_options()
def log(
    key: KeyArgument,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new events as they arrive.")
    ] = False,
    interval: Annotated[float, typer.Option("--interval", help="Seconds between polls.")] = 0.5,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout", help="Stop following after this many seconds.", show_default="none"
        ),
    ] = None,
    *,
    call: Invocation,
) -> None:
    """Print a session's events (--follow: and new ones as they come).

    Each with its version, time, type, actor and summary.

    With --json: one JSON object per line (JSON lines), each with the summary and
    the whole event (message text, commit errors, archives).

    \b
    Examples:
      chatledger log support-42 --account acme
      chatledger log support-42 --account acme --json
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    console = None if call.as_json else call.console()
    with call.ledger() as ledger:
        events = ledger.history(call.principal, key)
        _print_events(console, events, title=True)
        last = events[-1].version
        while follow and (deadline is None or time.monotonic() < deadline):
            try:
                time.sleep(interval)
            except KeyboardInterrupt:
                break
            new = ledger.history(call.principal, key, after_version=last)
            if new:
                _print_events(console, new, title=False)
                last = new[-1].version


def _print_events(console: Console | None, events: list[LedgerEvent], *, title: bool) -> None:
    if console is None:
        for item in events:
            print_json_line(event_record(item))
        return
    from chatledger.render import history_table

    table = history_table(events)
    if not title:
        table.title = None
        table.show_header = False
    console.print(table)


@group.command()
@shared_options()
def diff(
    key: KeyArgument,
    from_version: Annotated[int, typer.Argument(metavar="V1", help="Older version (excluded).")],
    to_version: Annotated[int, typer.Argument(metavar="V2", help="Newer version (included).")],
    *,
    call: Invocation,
) -> None:
    """Show what changed between two versions of a session.

    Messages added, commits, merges, failed commits and the counters at both ends.

    \b
    Example:
      chatledger diff support-42 5 17 --account acme
    """
    from chatledger.render import diff_table

    with call.ledger() as ledger:
        change = ledger.diff(call.principal, key, from_version, to_version)
    call.show(change, diff_table(change))


@group.command()
@shared_options()
def fork(
    key: KeyArgument,
    at_version: Annotated[int, typer.Option("--at-version", help="Version to fork at.")],
    new_key: Annotated[
        str, typer.Option("--as", metavar="NEW_KEY", help="Key of the new session.")
    ],
    *,
    call: Invocation,
) -> None:
    """Start a new session from another's state at a version.

    The origin is untouched; the new session's first event names it.

    \b
    Example:
      chatledger fork support-42 --at-version 5 --as support-42-b --account acme
    """
    from chatledger.render import meta_table

    with call.ledger() as ledger:
        view = ledger.fork(call.principal, key, at_version, new_key)
    if not call.as_json:
        call.console().print(f"Forked {key!r} at version {at_version} as {new_key!r}")
    call.show(view, meta_table(view))


@group.command()
@shared_options()
def sessions(
    order: Annotated[
        str, typer.Option("--order", help="last_activity, created or key.")
    ] = "last_activity",
    limit: Annotated[int, typer.Option("--limit", help="At most this many rows.")] = 50,
    offset: Annotated[int, typer.Option("--offset", help="Skip this many rows.")] = 0,
    include_evicted: Annotated[
        bool, typer.Option("--evicted", help="Include evicted and closed sessions.")
    ] = False,
    catch_up: CatchUpOption = True,
    projections_url: ProjectionsUrlOption = None,
    *,
    call: Invocation,
) -> None:
    """List the working set: sessions by most recent activity.

    Admins (--admin) see every account.

    \b
    Examples:
      chatledger sessions --account acme
      chatledger sessions --admin --evicted --json
    """
    from chatledger.errors import InvalidInput
    from chatledger.read_models import ReadModels
    from chatledger.render import working_set_table

    orders: dict[str, Literal["last_activity", "created", "key"]] = {
        "last_activity": "last_activity",
        "created": "created",
        "key": "key",
    }
    if order not in orders:
        raise InvalidInput("--order must be last_activity, created or key.")
    with call.ledger() as ledger, ReadModels(ledger, url=projections_url) as models:
        if catch_up:
            models.catch_up()
        rows = models.working_set(
            call.principal,
            order=orders[order],
            limit=limit,
            offset=offset,
            include_evicted=include_evicted,
        )
    call.show(rows, working_set_table(rows))


@group.command()
@shared_options()
def usage(
    key: Annotated[
        str | None, typer.Argument(metavar="[KEY]", help="One session (default: every one).")
    ] = None,
    catch_up: CatchUpOption = True,
    projections_url: ProjectionsUrlOption = None,
    *,
    call: Invocation,
) -> None:
    """Show tool calls and their tokens, per session and tool.

    \b
    Examples:
      chatledger usage --account acme
      chatledger usage support-42 --account acme --json
    """
    from chatledger.read_models import ReadModels
    from chatledger.render import usage_table

    with call.ledger() as ledger, ReadModels(ledger, url=projections_url) as models:
        if catch_up:
            models.catch_up()
        rows = models.usage(call.principal, key)
    call.show(rows, usage_table(rows))
