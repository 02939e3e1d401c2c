"""Commands that keep the persisted read models: ``project`` and ``rebuild``.

``project`` is also ``python -m chatledger.projector`` (chatledger/projector.py
runs this same function with ``--protocol`` on by default), so both entry points
have one set of options, one output and one exit-code table. With ``--protocol``
it prints one flushed line per step, which the crash tests and supervisors read:

- ``READY <head>``    the ledger opened; ``<head>`` is the newest log position
- ``BATCH <events>``  with ``--progress``: a batch committed (running total)
- ``DONE <events>``   caught up (without ``--follow``) or stopped

``migrate`` upgrades the ledger's schema in place (see chatledger.adapters.migrations).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from chatledger.cli.common import Invocation, ProjectionsUrlOption, shared_options
from chatledger.cli.output import print_json, print_json_line

if TYPE_CHECKING:
    from types import FrameType

    from chatledger.read_models import ReadModels

group = typer.Typer()


@group.command()
@shared_options(principal=False)
def rebuild(
    name: Annotated[
        str | None,
        typer.Argument(metavar="[NAME]", help="Read model: working_set, archives or usage."),
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Rebuild every read model.")] = False,
    projections_url: ProjectionsUrlOption = None,
    *,
    call: Invocation,
) -> None:
    """Drop read models and replay the whole ledger into them.

    \b
    Examples:
      chatledger rebuild --all
      chatledger rebuild usage --json
    """
    from chatledger.adapters.sql_read_models import READ_MODEL_NAMES
    from chatledger.errors import InvalidInput
    from chatledger.read_models import ReadModels

    if all_ == (name is not None):
        raise InvalidInput(f"Name one read model ({', '.join(READ_MODEL_NAMES)}) or pass --all.")
    with call.ledger() as ledger, ReadModels(ledger, url=projections_url) as models:
        names = list(models.names) if name is None else [models.check_name(name)]
        head = models.head()
        if call.as_json:
            count = models.rebuild(name)
        else:
            count = _rebuild_with_progress(models, name, head, call)
        positions = models.positions()
    if call.as_json:
        print_json({"rebuilt": names, "events": count, "head": head, "positions": positions})
    else:
        call.console().print(f"Rebuilt {', '.join(names)} from {count} events.")


def _rebuild_with_progress(
    models: ReadModels, name: str | None, head: int, call: Invocation
) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("[bold]rebuild {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=call.console(stderr=True)) as bar:
        task = bar.add_task(name or "all", total=max(head, 1))

        def advance(done: int, _head: int) -> None:
            bar.update(task, completed=min(done, head))

        count = models.rebuild(name, progress=advance)
        bar.update(task, completed=max(head, 1))
    return count


class _Steps:
    """How ``project`` reports its steps: the line protocol, JSON lines, or text."""

    def __init__(self, call: Invocation, *, protocol: bool) -> None:
        self.call = call
        self.protocol = protocol

    def say(self, step: str, text: str, line: int | None = None, **fields: object) -> None:
        """Report ``step``: ``text`` for people, ``fields`` as JSON, ``line`` in the protocol."""
        if self.protocol:
            if line is not None:
                typer.echo(f"{step.upper()} {line}")
                sys.stdout.flush()  # a killed process must have said how far it got
        elif self.call.as_json:
            print_json_line({"step": step, **fields})
        else:
            self.call.console().print(text)


@group.command()
@shared_options(principal=False)
def project(
    follow: Annotated[
        bool, typer.Option("--follow", help="Keep following the ledger until SIGINT/SIGTERM.")
    ] = False,
    rebuild: Annotated[
        str | None,
        typer.Option("--rebuild", metavar="NAME", help="Rebuild NAME (or 'all') first."),
    ] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Events per transaction.")] = 5000,
    poll: Annotated[
        float | None,
        typer.Option(
            "--poll",
            help="Longest idle wait between polls, in seconds.",
            show_default="CHATLEDGER_PROJECTIONS_POLL_INTERVAL or 0.05",
        ),
    ] = None,
    progress: Annotated[
        bool, typer.Option("--progress", help="Report every committed batch.")
    ] = False,
    protocol: Annotated[
        bool,
        typer.Option(
            "--protocol",
            help="Print only the READY/BATCH/DONE lines (python -m chatledger.projector does).",
        ),
    ] = False,
    projections_url: ProjectionsUrlOption = None,
    *,
    call: Invocation,
) -> None:
    """Bring the read models up to date (--follow: and keep them so).

    Read models whose version changed are rebuilt first. Several projectors may
    run at once; each event is applied exactly once. With --json: one JSON object
    per step (JSON lines): ready, batch (with --progress), done.

    \b
    Examples:
      chatledger project
      chatledger project --follow --progress
    """
    from chatledger.read_models import ReadModels

    steps = _Steps(call, protocol=protocol)
    with (
        call.ledger() as ledger,
        ReadModels(
            ledger, url=projections_url, batch_size=batch_size, poll_interval=poll
        ) as models,
        _stopped_by_signals(models, enabled=follow),
    ):
        reset = list(models.reset_on_start)
        head = models.head()
        note = f"[dim]Version changed, rebuilt: {', '.join(reset)}[/]\n" if reset else ""
        steps.say("ready", f"{note}Ledger head: position {head}.", head, head=head, reset=reset)

        def batch(done: int, _head: int) -> None:
            steps.say("batch", f"  {done} events applied", done, events=done)

        report = batch if progress else None
        total = 0
        if rebuild:
            total += models.rebuild(None if rebuild == "all" else rebuild, progress=report)
        total += models.catch_up(progress=report)
        if follow:
            _follow(models, steps)
        positions = models.positions()
    steps.say(
        "done",
        f"Applied {total} events; positions {positions}.",
        total,
        events=total,
        positions=positions,
    )


def _follow(models: ReadModels, steps: _Steps) -> None:
    """Follow the log in this thread until SIGINT or SIGTERM (the batch in progress ends)."""
    steps.say("follow", "[dim]Following the ledger; Ctrl-C to stop.[/]")
    models.run()  # returns at once if a signal came during the catch-up


@contextmanager
def _stopped_by_signals(models: ReadModels, *, enabled: bool) -> Iterator[None]:
    """While in the block, SIGINT and SIGTERM stop the follower (from the start: a signal
    during the first catch-up must not be lost, nor kill the process mid-batch)."""
    if not enabled:
        yield
        return

    def stop(_signum: int, _frame: FrameType | None) -> None:
        models.stop()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@group.command()
@shared_options(principal=False)
def migrate(*, call: Invocation) -> None:
    """Upgrade the ledger's schema in place to this version's revision.

    Opening a ledger upgrades it too; this command does it on purpose (e.g. from a
    deploy step with DDL rights, before workers run with create_tables off) and says
    what it did. A database this version does not know (newer) is left untouched.

    \b
    Examples:
      chatledger migrate
      chatledger migrate --url postgresql+psycopg://admin@db/ledger --json
    """
    from chatledger.adapters.database import create_store_engine
    from chatledger.adapters.migrations import SCHEMA_HEAD, schema_revision
    from chatledger.adapters.schema import create_tables
    from chatledger.errors import StoreUnavailable
    from chatledger.settings import load_settings

    before: str | None = SCHEMA_HEAD
    try:  # never creates a ledger: a missing one is LedgerNotFound (exit code 3)
        with call.ledger():
            pass
    except StoreUnavailable as error:  # an older schema (or a newer one) is why we are here
        if "revision" not in str(error):
            raise
        before = None
    settings = load_settings(url=call.url)
    engine = create_store_engine(settings.url, busy_timeout=settings.busy_timeout)
    try:
        if before is None:
            with engine.connect() as connection:
                before = schema_revision(connection) or "0001 (0.1.0)"
        # A newer schema raises here, untouched. A current one is left as it is, except that
        # on PostgreSQL new events are numbered after restored ones (schema.align_log_order).
        done = create_tables(engine)
    finally:
        engine.dispose()
    if call.as_json:
        print_json({"from": before, "to": SCHEMA_HEAD, "changed": done == "upgraded"})
    elif done == "upgraded":
        call.console().print(f"Upgraded the schema from revision {before} to {SCHEMA_HEAD}.")
    else:
        call.console().print(f"The schema is at revision {SCHEMA_HEAD} already; nothing to do.")
