"""``chatledger serve``: the read-only web viewer (``chatledger.web``, the ``web`` extra).

The command only parses its options and hands over; everything else lives in
``chatledger.web``, imported when the command runs (so ``--help`` stays fast and
a missing extra is one clear error line).
"""

from __future__ import annotations

from typing import Annotated

import typer

from chatledger.cli.common import ExitCode, Invocation, fail, shared_options

group = typer.Typer()


@group.command()
@shared_options()
def serve(
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
    *,
    call: Invocation,
) -> None:
    """Serve a read-only web viewer of the ledger (timelines, time travel, verify).

    \b
    Examples:
      chatledger serve --account acme
      chatledger serve --admin --host 0.0.0.0 --token "$(openssl rand -hex 16)"
    """
    try:
        from chatledger.web import serve as serve_viewer
    except ModuleNotFoundError as error:
        fail(
            f"chatledger serve needs the web extra ({error}): pip install 'chatledger[web]'",
            ExitCode.USAGE,
        )
    serve_viewer(
        call.principal,
        url=call.url,
        host=host,
        port=port,
        token=token,
        open_browser=open_browser,
    )
