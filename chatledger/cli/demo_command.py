"""The ``demo`` command: the scripted support session of ``chatledger.demo``, on a real ledger.

The demo never deletes or changes anything it did not create. It writes to the
ledger at ``--url`` (the same default as every other command, so the commands it
suggests afterwards find its data); when that database already holds the demo's
session it plays under the next free key and says so. It ends by printing commands
to try, which run as printed (a test runs them).
"""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING, Annotated

import typer

from chatledger.cli.common import DEFAULT_URL, Invocation, shared_options
from chatledger.cli.output import event_record, print_json

if TYPE_CHECKING:
    from chatledger.demo import DemoResult

group = typer.Typer()


@group.command()
@shared_options(principal=False)
def demo(
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh/--no-fresh",
            help="Play under a key no session has yet (support-42, else support-42-2, ...); "
            "--no-fresh goes on with support-42 if it exists. Nothing is ever deleted.",
        ),
    ] = True,
    *,
    call: Invocation,
) -> None:
    """Play a scripted support session and show what was recorded.

    Writes to the ledger at --url and never deletes anything there.

    \b
    Examples:
      chatledger demo
      chatledger demo --url sqlite:///demo.db --json
    """
    from chatledger.demo import DEMO_KEY, DEMO_PRINCIPAL, run_demo, unused_key
    from chatledger.errors import LedgerNotFound

    console = call.console()
    if call.as_json:
        console.quiet = True
    account = DEMO_PRINCIPAL.account_id
    try:
        with call.ledger():
            created = False
    except LedgerNotFound:
        created = True
        console.print(
            f"[dim]No ledger at {call.database} yet: creating chatledger's tables there "
            "(nothing else in the database is touched).[/]"
        )
    with call.ledger(create=True) as ledger:
        key = unused_key(ledger, DEMO_KEY, also="-retry") if fresh else DEMO_KEY
        if key != DEMO_KEY:
            console.print(
                f"[yellow]Session {DEMO_KEY!r} of account {account!r} already exists in "
                f"{call.database}; this run adds session {key!r} (nothing is deleted; "
                "pass a --url of its own for a clean demo).[/]"
            )
        result = run_demo(ledger, console, key)
    commands = try_commands(result, call)
    if call.as_json:
        print_json(_as_json(result, call, created=created, commands=commands))
        return
    console.print("\nTry it yourself:")
    for command in commands:
        console.print(f"  [cyan]{command}[/]", highlight=False, soft_wrap=True)


def try_commands(result: DemoResult, call: Invocation) -> list[str]:
    """The commands the demo suggests, with the URL and account they need to find its data."""
    from chatledger.demo import DEMO_PRINCIPAL

    where = f"--account {DEMO_PRINCIPAL.account_id}"
    from_environment = call.url is not None and call.url == os.environ.get("CHATLEDGER_URL")
    if call.url is not None and call.url != DEFAULT_URL and not from_environment:
        where += f" --url {shlex.quote(call.database)}"
    key = shlex.quote(result.key)
    return [
        f"chatledger log {key} {where}",
        f"chatledger show {key} --at-version {result.then} {where}",
        f"chatledger diff {key} {result.then} {result.session.version} {where}",
        f"chatledger usage {key} {where}",
        f"chatledger verify {where}",
    ]


def _as_json(
    result: DemoResult, call: Invocation, *, created: bool, commands: list[str]
) -> dict[str, object]:
    from chatledger.demo import DEMO_PRINCIPAL

    return {
        "database": call.database,
        "created_ledger": created,
        "account": DEMO_PRINCIPAL.account_id,
        "key": result.key,
        "fork_key": result.fork_key,
        "failed_commit": result.failed_commit,
        "merge": result.merge,
        "session": result.session,
        "history": [event_record(item) for item in result.history],
        "then": result.then,
        "context_then": result.context_then,
        "diff": result.diff,
        "fork": result.fork,
        "verify": result.verify,
        "try": commands,
    }
