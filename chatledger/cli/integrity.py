"""Commands that prove and move a ledger's history: ``verify``, ``export``, ``import``.

``verify`` exits with ``ExitCode.CHECK_FAILED`` (1) when a chain is broken, so a
cron job can tell tampering from an outage (4) or a wrong URL (3). ``export``
writes what ``SessionLedger.export`` yields, line by line; ``import`` fills an
empty ledger (the only command here that may create a database).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from chatledger.cli.common import ExitCode, Invocation, fail, print_json, shared_options

group = typer.Typer()

OneSessionArgument = Annotated[
    str | None, typer.Argument(metavar="[KEY]", help="One session (default: every one).")
]


@group.command()
@shared_options()
def verify(
    key: OneSessionArgument = None,
    anchors: Annotated[
        Path | None,
        typer.Option("--anchors", help="JSON file of heads saved earlier with --save-anchors."),
    ] = None,
    save_anchors: Annotated[
        Path | None, typer.Option("--save-anchors", help="Write the verified heads here.")
    ] = None,
    *,
    call: Invocation,
) -> None:
    """Check the hash chains; exit 1 if the stored history was altered.

    Recomputes every chain, snapshot and stored fact. Members verify their
    account, admins (--admin) every account.

    \b
    Examples:
      chatledger verify --account acme
      chatledger verify --account acme --save-anchors heads.json
      chatledger verify --account acme --anchors heads.json --json
    """
    from chatledger.errors import InvalidInput
    from chatledger.render import verify_table
    from chatledger.results import ChainHead

    known: list[ChainHead] = []
    if anchors is not None:
        try:
            known = [ChainHead.model_validate(h) for h in json.loads(anchors.read_text())]
        except FileNotFoundError:
            fail(f"No anchors file {anchors}.", ExitCode.NOT_FOUND)
        except (OSError, ValueError) as error:
            raise InvalidInput(f"Cannot read anchors from {anchors}: {error}") from None
    with call.ledger() as ledger:
        report = ledger.verify(call.principal, key, anchors=known)
    if save_anchors is not None and report.ok:
        save_anchors.write_text(
            json.dumps([h.model_dump(mode="json") for h in report.heads], indent=2) + "\n"
        )
    call.show(report, verify_table(report))
    if not report.ok:
        sessions = len({issue.session_id for issue in report.issues})
        fail(
            f"verify found {len(report.issues)} issue(s) in {sessions} session(s): "
            f"the stored history was altered ({call.where()})",
            ExitCode.CHECK_FAILED,
        )


@group.command()
@shared_options()
def export(
    key: OneSessionArgument = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
    *,
    call: Invocation,
) -> None:
    """Write the events as JSON lines, with their hashes.

    A header line, then one line per event. The output is JSON lines with or
    without --json; with --output and --json a summary ({"output", "lines"})
    goes to stdout.

    \b
    Examples:
      chatledger export --account acme --output acme.jsonl
      chatledger export support-42 --account acme > support-42.jsonl
    """
    with call.ledger() as ledger:
        lines = ledger.export(call.principal, key)
        if output is None:
            for line in lines:
                typer.echo(line)
            return
        count = 0
        with output.open("w", encoding="utf-8") as sink:
            for line in lines:
                sink.write(line + "\n")
                count += 1
    if call.as_json:
        print_json({"output": str(output), "lines": count})
    else:
        call.console().print(f"Exported {max(count - 1, 0)} events to {output}.")


@group.command(name="import")
@shared_options(principal=False)
def import_(
    file: Annotated[
        Path, typer.Argument(metavar="FILE", help="A file written by `chatledger export`.")
    ],
    *,
    call: Invocation,
) -> None:
    """Load an export into an empty ledger.

    Every chain is verified first; nothing is imported from a broken file. The
    ledger at --url is created if it does not exist; one that already holds
    events is refused (exit code 6).

    \b
    Example:
      chatledger import acme.jsonl --url sqlite:///copy.db
    """
    from chatledger.read_models import ReadModels

    if not file.is_file():
        fail(f"No such file: {file}", ExitCode.NOT_FOUND)
    with call.ledger(create=True) as ledger:
        # Refuse before reading a possibly large file (the core checks again, atomically).
        with ReadModels(ledger) as models:
            head = models.head()
        if head:
            fail(
                f"The ledger at {call.database} already holds events (up to position {head}); "
                "import needs an empty one. Pass --url of a new database.",
                ExitCode.CONFLICT,
            )
        lines = _read_with_progress(file, call)
        if call.as_json:
            result = ledger.import_(lines)
        else:
            with call.console(stderr=True).status(
                f"Verifying {len(lines):,} lines and writing them in one transaction..."
            ):
                result = ledger.import_(lines)
    if call.as_json:
        print_json(result)
    else:
        call.console().print(
            f"Imported {result.events} events of {result.sessions} sessions into {call.database}."
        )


def _read_with_progress(file: Path, call: Invocation) -> list[str]:
    """The file's lines, with a progress bar on stderr for people (not with --json)."""
    if call.as_json:
        return file.read_text(encoding="utf-8").splitlines()
    import rich.progress

    console = call.console(stderr=True)
    with rich.progress.open(
        file, "r", encoding="utf-8", description="reading", console=console
    ) as source:
        return source.read().splitlines()
