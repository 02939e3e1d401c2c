"""Commands that prove and move a ledger's history: ``verify``, ``export``, ``import``.

``verify`` exits with ``ExitCode.CHECK_FAILED`` (1) when a chain is broken, so a
cron job can tell tampering from an outage (4) or a wrong URL (3). ``export``
writes what ``SessionLedger.export`` yields, line by line; ``import`` fills an
empty ledger (the only command here that may create a database).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from chatledger.cli.common import ExitCode, Invocation, fail, shared_options
from chatledger.cli.output import print_json

if TYPE_CHECKING:
    from chatledger.ledger import SessionLedger
    from chatledger.results import ImportResult

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
    deep: Annotated[
        bool,
        typer.Option(
            "--deep", help="Also replay every session: every stored fact and snapshot checked."
        ),
    ] = False,
    *,
    call: Invocation,
) -> None:
    """Check the hash chains; exit 1 if the stored history was altered.

    Recomputes every chain and checks each session's identity, the facts
    naming each event and the snapshots' versions; --deep also replays every
    session, recomputing every stored fact and comparing every snapshot
    (slower). Members verify their account, admins (--admin) every account.

    \b
    Examples:
      chatledger verify --account acme
      chatledger verify --account acme --deep
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
        report = ledger.verify(call.principal, key, anchors=known, deep=deep)
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
    allow_missing_keys: Annotated[
        bool,
        typer.Option(
            "--allow-missing-keys",
            help="Import content whose data keys the file lacks; it reads as erased.",
        ),
    ] = False,
    *,
    call: Invocation,
) -> None:
    """Load an export into an empty ledger.

    Every line and chain is checked first; nothing is imported from a broken
    file (exit code 2, naming the line). The ledger at --url is created if it
    does not exist; one that already holds events is refused before the file
    is read (exit code 2). Encrypted content whose data key the file does not
    bring is refused too, unless --allow-missing-keys (it then reads as
    erased). An import interrupted at any step imports when run again.
    Progress (reading, verifying, writing) goes to stderr.

    \b
    Example:
      chatledger import acme.jsonl --url sqlite:///copy.db
    """
    if not file.is_file():
        fail(f"No such file: {file}", ExitCode.NOT_FOUND)
    with call.ledger(create=True) as ledger:
        if call.as_json:
            result = ledger.import_(_lines(file), allow_missing_keys=allow_missing_keys)
        else:
            result = _import_with_progress(ledger, file, call, allow_missing_keys)
    if call.as_json:
        print_json(result)
        return
    console = call.console()
    console.print(
        f"Imported {result.events} events of {result.sessions} sessions into {call.database}."
    )
    if result.erased_sessions:
        console.print(
            f"{result.erased_sessions} of them were erased before the export: their content "
            "reads as \\[erased]."
        )
    if result.unreadable_sessions:
        console.print(
            f"[bold]{result.unreadable_sessions} of them read as \\[erased]: the file lacks their "
            "data keys (--allow-missing-keys).[/]"
        )


def _lines(file: Path, seen: Callable[[str], None] | None = None) -> Iterator[str]:
    """The lines of ``file``; one that is not UTF-8 is ``InvalidInput`` naming it."""
    from chatledger.errors import InvalidInput

    with file.open("rb") as source:
        for number, raw in enumerate(source, start=1):
            try:
                line = raw.decode()
            except UnicodeDecodeError:
                raise InvalidInput(
                    f"Line {number} of {file} is not UTF-8 text; nothing was imported."
                ) from None
            if seen is not None:
                seen(line)
            yield line


def _import_with_progress(
    ledger: SessionLedger, file: Path, call: Invocation, allow_missing_keys: bool
) -> ImportResult:
    """``ledger.import_`` with a bar per phase on stderr: read (bytes), verify, write."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    columns = (TextColumn("[bold]{task.description:>9}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=call.console(stderr=True)) as bar:
        tasks = {
            "read": bar.add_task("reading", total=file.stat().st_size, visible=False),
            "verify": bar.add_task("verifying", total=None, visible=False),
            "write": bar.add_task("writing", total=None, visible=False),
        }

        def seen(line: str) -> None:  # the first is read once the ledger was found empty
            bar.update(tasks["read"], advance=len(line.encode()), visible=True)

        def progress(phase: str, done: int, total: int) -> None:
            task = tasks.get(phase)
            if task is None:
                return
            if phase == "read":
                total = done = file.stat().st_size  # the bar counts bytes
            bar.update(task, completed=done, total=total, visible=True)
            if phase == "verify" and done == total:  # writing reports only when done
                bar.update(tasks["write"], visible=True)

        return ledger.import_(
            _lines(file, seen), progress=progress, allow_missing_keys=allow_missing_keys
        )
