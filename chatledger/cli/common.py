"""What every ``chatledger`` command shares: options, the principal, output and exit codes.

``@shared_options()`` gives a command the shared options (``--url``, ``--json``,
``-v``, and with ``principal=True`` also ``--account/--user/--agent/--admin``) and
hands them over as one ``Invocation``, which builds the principal, opens the ledger
and prints results. ``ReportsErrors`` (the click classes behind ``app``) turns every
failure into one ``error:`` line on stderr and an ``ExitCode``; the same table holds
for every command, ``python -m chatledger.projector`` included.

Command modules import this module, never ``chatledger.cli`` itself. It must stay
cheap to import: ``chatledger --help`` loads no SQLAlchemy, eventsourcing or rich, so
every chatledger module is imported inside the function that needs it.
"""

from __future__ import annotations

import enum
import functools
import inspect
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from chatledger.domain.values import Principal
    from chatledger.ledger import SessionLedger

from chatledger.cli.output import print_json

log = logging.getLogger("chatledger.cli")

DEFAULT_URL = "sqlite:///chatledger.db"  # LedgerSettings.url's default (a test pins it)
DEFAULT_ACCOUNT = "default"
DEFAULT_AGENT = "chatledger-cli"


class ExitCode(enum.IntEnum):
    """The exit status of every command (docs/cli.md lists them)."""

    OK = 0
    CHECK_FAILED = 1  # verify found a broken chain, snapshot or stored facts
    USAGE = 2  # a bad command line, invalid input or settings
    NOT_FOUND = 3  # no such session, ledger database or input file
    UNAVAILABLE = 4  # the database cannot be reached or used (or read models lag)
    DENIED = 5  # the principal may not touch that account
    CONFLICT = 6  # another writer made the change impossible (retry), or the session is erased
    INTERNAL = 70  # a bug: an error chatledger does not expect (-v shows the traceback)
    INTERRUPTED = 130  # Ctrl-C


class CommandFailed(Exception):
    """Ends a command with one ``error:`` line and ``code`` (raised by ``fail``)."""

    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code


def fail(message: str, code: ExitCode = ExitCode.USAGE) -> NoReturn:
    """Stop the command: print ``message`` as one line on stderr, exit with ``code``."""
    raise CommandFailed(message, code)


def exit_code_for(error: BaseException) -> ExitCode:
    """The exit code of a chatledger error (by its class in ``chatledger.errors``)."""
    from chatledger import errors

    table: tuple[tuple[type[BaseException], ExitCode], ...] = (
        (errors.InvalidInput, ExitCode.USAGE),  # InvalidSettings too
        (errors.UnknownSession, ExitCode.NOT_FOUND),
        (errors.LedgerNotFound, ExitCode.NOT_FOUND),
        (errors.AccessDenied, ExitCode.DENIED),
        (errors.ConcurrencyConflict, ExitCode.CONFLICT),
        (errors.SessionErased, ExitCode.CONFLICT),
        (errors.StoreUnavailable, ExitCode.UNAVAILABLE),  # ProjectionTimeout too
    )
    return next((code for kind, code in table if isinstance(error, kind)), ExitCode.INTERNAL)


def one_line(text: str) -> str:
    return " ".join(text.split())


def redacted(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``, for messages and logs."""
    return re.sub(r"(://[^/:@]*):[^/@]*@", r"\1:***@", url)


# ------------------------------------------------------------------ options
UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="CHATLEDGER_URL",
        show_envvar=True,
        show_default=DEFAULT_URL,
        help="SQLAlchemy URL of the ledger (a SQLite file or postgresql+psycopg://...).",
    ),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="Print JSON on stdout instead of tables (docs/cli.md).")
]
VerboseOption = Annotated[
    int,
    typer.Option(
        "--verbose",
        "-v",
        count=True,
        show_default=False,
        help="Log to stderr: -v what happens (INFO), -vv details (DEBUG).",
    ),
]
AccountOption = Annotated[
    str,
    typer.Option(
        "--account",
        envvar="CHATLEDGER_ACCOUNT",
        show_envvar=True,
        help="Account (tenant) of the acting principal; sessions belong to an account.",
    ),
]
UserOption = Annotated[
    str,
    typer.Option(
        "--user", envvar="CHATLEDGER_USER", show_envvar=True, help="User id of the principal."
    ),
]
AgentOption = Annotated[
    str,
    typer.Option(
        "--agent", envvar="CHATLEDGER_AGENT", show_envvar=True, help="Agent id of the principal."
    ),
]
AdminOption = Annotated[
    bool, typer.Option("--admin", help="Act as an admin (sees and may name every account).")
]
ProjectionsUrlOption = Annotated[
    str | None,
    typer.Option(
        "--projections-url",
        envvar="CHATLEDGER_PROJECTIONS_URL",
        show_envvar=True,
        show_default="the ledger's database",
        help="Database of the read models.",
    ),
]
KeyArgument = Annotated[str, typer.Argument(metavar="KEY", help="Session key.")]


def _parameter(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default
    )


_SHARED = (
    _parameter("url", UrlOption, None),
    _parameter("as_json", JsonOption, False),
    _parameter("verbose", VerboseOption, 0),
)
_PRINCIPAL = (
    _parameter("account", AccountOption, DEFAULT_ACCOUNT),
    _parameter("user", UserOption, ""),
    _parameter("agent", AgentOption, DEFAULT_AGENT),
    _parameter("admin", AdminOption, False),
)


# --------------------------------------------------------------- invocation
@dataclass(frozen=True)
class Invocation:
    """The shared options of one command run, and what commands do with them."""

    url: str | None
    as_json: bool
    verbose: int
    account: str | None = None  # None: the command acts without a principal
    user: str = ""
    agent: str = DEFAULT_AGENT
    admin: bool = False

    @property
    def database(self) -> str:
        """The ledger's URL as the ledger will resolve it, password hidden."""
        return redacted(self.url or os.environ.get("CHATLEDGER_URL") or DEFAULT_URL)

    def where(self) -> str:
        """ "account 'x', database y": what errors name so the reader can tell where."""
        place = f"database {self.database}"
        return place if self.account is None else f"account {self.account!r}, {place}"

    @property
    def principal(self) -> Principal:
        """The ``Principal`` named by ``--account/--user/--agent/--admin``."""
        return principal(self.account or DEFAULT_ACCOUNT, self.user, self.agent, admin=self.admin)

    @contextmanager
    def ledger(self, *, create: bool = False) -> Iterator[SessionLedger]:
        """The ledger at ``--url``; ``create=False`` never creates a database.

        Without ``create`` a missing SQLite file or a database without chatledger's
        tables raises ``LedgerNotFound`` (exit code 3): read-only commands and writes
        to existing sessions must not leave an empty ledger behind after a typo.
        """
        from chatledger.ledger import SessionLedger
        from chatledger.settings import load_settings

        settings = load_settings(url=self.url, create_tables=create)
        log.info("opening the ledger at %s (create=%s)", redacted(settings.url), create)
        with SessionLedger(settings=settings) as ledger:
            yield ledger

    def console(self, *, stderr: bool = False) -> Console:
        from rich.console import Console

        return Console(stderr=stderr)

    def show(self, data: object, *renderables: RenderableType) -> None:
        """Print ``data`` as one JSON document with ``--json``, else ``renderables``."""
        if self.as_json:
            print_json(data)
            return
        console = self.console()
        for renderable in renderables:
            console.print(renderable)

    def note(self, text: str) -> None:
        """A line for people (rich markup) on stderr, so stdout stays data; quiet with --json."""
        if not self.as_json:
            self.console(stderr=True).print(text)


def principal(
    account: str, user: str = "", agent: str = DEFAULT_AGENT, *, admin: bool = False
) -> Principal:
    """The ``Principal`` named by the ``--account/--user/--agent/--admin`` options."""
    from pydantic import ValidationError

    from chatledger.domain.values import Principal
    from chatledger.errors import InvalidInput

    try:
        return Principal(
            account_id=account, user_id=user, agent_id=agent, role="admin" if admin else "member"
        )
    except ValidationError as error:
        problems = "; ".join(
            f"--{e['loc'][0]}: {e['msg']}".replace("_id", "") for e in error.errors()
        )
        raise InvalidInput(f"Invalid principal options ({problems}).") from None


# ------------------------------------------------------------------- output
def shared_options(
    *, principal: bool = True
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Add the shared options to a command that takes ``call: Invocation`` (keyword-only).

    The command declares only its own parameters; typer sees them followed by the
    shared ones, and the command receives the latter as one ``Invocation``. A
    ``ChatLedgerError`` it raises becomes ``CommandFailed`` with the error's exit code
    and the account and database it concerned.
    """
    shared = _SHARED + (_PRINCIPAL if principal else ())

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(command, eval_str=True)
        own = [p for name, p in signature.parameters.items() if name != "call"]

        @functools.wraps(command)
        def run(**options: Any) -> None:
            call = Invocation(**{p.name: options.pop(p.name) for p in shared})
            with logging_to_stderr(call.verbose):
                try:
                    command(**options, call=call)
                except CommandFailed:
                    raise
                except BrokenPipeError:
                    _stop_writing_stdout()  # the reader left (`| head`): not a failure
                except Exception as error:
                    raise _failure(error, call) from error

        del run.__wrapped__  # typer must read the signature below, not the command's
        parameters = [*own, *shared]
        run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": None}
        return run

    return decorate


def _stop_writing_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor (e.g. under a test runner)
        pass


def _failure(error: Exception, call: Invocation) -> CommandFailed:
    from chatledger.errors import ChatLedgerError, UnknownSession

    if not isinstance(error, ChatLedgerError):
        if call.verbose:
            traceback.print_exception(error, file=sys.stderr)
        hint = "" if call.verbose else "; run with -v for the traceback"
        return CommandFailed(
            f"unexpected {type(error).__name__}: {error} (a bug in chatledger{hint})",
            ExitCode.INTERNAL,
        )
    code = exit_code_for(error)
    if code == ExitCode.USAGE:
        return CommandFailed(str(error), code)
    context = call.where()
    if isinstance(error, UnknownSession):
        context += (
            "; a session belongs to the account that wrote it: "
            "pass --account or set CHATLEDGER_ACCOUNT"
        )
    return CommandFailed(f"{error} ({context})", code)


# ------------------------------------------------------------------ logging
@contextmanager
def logging_to_stderr(verbose: int) -> Iterator[None]:
    """While a command runs: the ``chatledger`` loggers to stderr at INFO (-v) or DEBUG (-vv)."""
    if verbose <= 0:
        yield
        return
    root = logging.getLogger("chatledger")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO if verbose == 1 else logging.DEBUG)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)


# --------------------------------------------------------- error reporting
def report(message: str, code: ExitCode) -> ExitCode:
    """Print ``message`` as one ``error:`` line on stderr; returns ``code``."""
    typer.secho("error:", fg="red", bold=True, err=True, nl=False)
    typer.echo(" " + one_line(message), err=True)
    return code


def _click_exception(name: str) -> type[Exception]:
    """One of click's exception classes; typer may bundle its own click, so ask typer."""
    return next(k for k in typer.BadParameter.__mro__ if k.__name__ == name)


_UsageError = _click_exception("UsageError")
_ClickException = _click_exception("ClickException")


class ReportsErrors:
    """Mixed into the click command classes: every way out becomes an ``ExitCode``.

    Click would print usage errors as a block and typer as a box; here every failure
    is one ``error:`` line on stderr. ``main`` exits with the code (or returns it with
    ``standalone_mode=False``, which ``chatledger.cli.main`` uses).
    """

    def main(self, *args: Any, **kwargs: Any) -> Any:
        # click's signature: (args, prog_name, complete_var, standalone_mode, **extra)
        names = ("args", "prog_name", "complete_var", "standalone_mode")
        options = dict(zip(names, args, strict=False))
        options.update(kwargs)
        standalone_mode = options.pop("standalone_mode", True)
        run = super().main  # type: ignore[misc]
        code = _exit_code_of(lambda: run(**options, standalone_mode=False))
        if standalone_mode:
            sys.exit(code)
        return code


def _exit_code_of(main: Callable[[], Any]) -> int:
    """Run click's ``main`` (not standalone); report whatever ends it; the exit code."""
    try:
        result = main()
    except CommandFailed as failure:
        return report(str(failure), failure.code)
    except _UsageError as error:
        if type(error).__name__ == "NoArgsIsHelpError":  # bare `chatledger`: the help
            typer.echo(error.format_message())  # type: ignore[attr-defined]
            return ExitCode.USAGE
        context = getattr(error, "ctx", None)
        where = f" (see '{context.command_path} --help')" if context is not None else ""
        return report(error.format_message() + where, ExitCode.USAGE)  # type: ignore[attr-defined]
    except _ClickException as error:
        return report(error.format_message(), ExitCode.USAGE)  # type: ignore[attr-defined]
    except (typer.Abort, KeyboardInterrupt):
        return report("interrupted", ExitCode.INTERRUPTED)
    return int(result) if isinstance(result, int) else ExitCode.OK


class Group(ReportsErrors, TyperGroup):
    """The ``chatledger`` command group."""


class Command(ReportsErrors, TyperCommand):
    """A stand-alone command (``python -m chatledger.projector``)."""
