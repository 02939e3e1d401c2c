"""The ``chatledger`` command line: ``app`` (a typer app) and ``main``, the console script.

The commands live in group modules, which this module imports and merges into
``app``; they import ``chatledger.cli.common`` and never this module:

- ``inspection``: show, context, log, diff, fork, sessions, usage
- ``integrity``: verify, export, import
- ``operations``: project, rebuild, migrate
- ``erasure``: erase
- ``demo``: demo
- ``web``: serve (the viewer, from the ``web`` extra)

Help is plain text (no rich markup, which ate bracketed text), and every failure
ends as one ``error:`` line with a documented exit code (``common.ExitCode``).
Nothing heavier than typer is imported until a command runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer

from chatledger.cli import (
    demo_command,
    erase_command,
    inspection,
    integrity_commands,
    operations,
    serve_command,
)
from chatledger.cli.common import Command, ExitCode, Group

__all__ = ["ExitCode", "app", "main", "projector_main"]

app = typer.Typer(
    name="chatledger",
    cls=Group,
    epilog="\b\nExamples:\n  chatledger demo\n  chatledger log support-42 --account acme\n"
    "  chatledger show --help\n\nExit codes, JSON output and logging: docs/cli.md "
    "(https://github.com/chatledger/chatledger/blob/main/docs/cli.md).",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)
for _group in (
    inspection.group, integrity_commands.group, erase_command.group, operations.group,
    demo_command.group, serve_command.group,
):  # fmt: skip
    app.add_typer(_group)


def _print_version(value: bool) -> None:
    if value:
        from chatledger import __version__

        typer.echo(f"chatledger {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """chatledger: an embeddable, event-sourced ledger for LLM agent sessions.

    Every command takes --url (default: CHATLEDGER_URL or sqlite:///chatledger.db),
    --json and -v; those that act on sessions also take --account (default:
    CHATLEDGER_ACCOUNT or 'default'), --user, --agent and --admin.
    """


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line (``argv`` defaults to ``sys.argv[1:]``); returns the exit code."""
    command = typer.main.get_command(app)
    return int(command.main(args=argv, prog_name="chatledger", standalone_mode=False))


# `python -m chatledger.projector`: the same `project` command, with the line protocol.
projector_app = typer.Typer(
    add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False
)
projector_app.command(
    cls=Command,
    context_settings={"default_map": {"protocol": True}},
    help=operations.project.__doc__,
)(operations.project)


def projector_main(argv: Sequence[str] | None = None) -> int:
    """``python -m chatledger.projector``: ``chatledger project --protocol``; the exit code."""
    command = typer.main.get_command(projector_app)
    return int(
        command.main(args=argv, prog_name="python -m chatledger.projector", standalone_mode=False)
    )
