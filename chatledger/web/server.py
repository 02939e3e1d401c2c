"""Running the viewer: binding rules, and uvicorn on a socket of the viewer's own.

``serve`` is what ``chatledger serve`` runs: it refuses a host other machines
can reach unless a token is set, opens the ledger without ever creating one
(``create_tables=False``: a mistyped URL is an error, not a new database),
prints the address and serves until Ctrl-C. ``ViewerServer`` binds its socket
before serving, so the address (with a free port for ``port=0``) is known at
once; tests and benchmarks run it in a background thread.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import time
import webbrowser
from collections.abc import Callable
from types import TracebackType

import uvicorn
from starlette.applications import Starlette

from chatledger.domain.values import Principal
from chatledger.errors import InvalidSettings, StoreUnavailable
from chatledger.ledger import SessionLedger
from chatledger.settings import load_settings
from chatledger.web.app import create_app
from chatledger.web.guard import LOOPBACK_NAMES

MIN_TOKEN_LENGTH = 16


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_binding(host: str, token: str | None) -> None:
    """Refuse to serve other machines without a token, or with a guessable one."""
    if token is not None and len(token) < MIN_TOKEN_LENGTH:
        raise InvalidSettings(
            f"The viewer token is {len(token)} characters long; use at least "
            f"{MIN_TOKEN_LENGTH} (e.g. python -c 'import secrets; print(secrets.token_urlsafe())')."
        )
    if not is_loopback(host) and token is None:
        raise InvalidSettings(
            f"--host {host} lets other machines reach the viewer; it then needs a token: "
            "pass --token or set CHATLEDGER_WEB_TOKEN (at least "
            f"{MIN_TOKEN_LENGTH} characters), or serve on 127.0.0.1."
        )


class ViewerServer:
    """uvicorn serving ``app`` on ``host:port`` (0: a free port), bound at construction."""

    def __init__(self, app: Starlette, host: str = "127.0.0.1", port: int = 8765) -> None:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM
        )[0]
        self._socket = socket.socket(family, kind, proto)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.bind(address)
            # Listening now, not when uvicorn starts: a client that read the printed
            # address queues in the backlog instead of being refused.
            self._socket.listen(128)
        except OSError as error:
            self._socket.close()
            raise StoreUnavailable(f"Cannot listen on {host}:{port}: {error}") from error
        self.host = host
        self.port = int(self._socket.getsockname()[1])
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=3,
            access_log=False,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host.strip('[]')}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def serve_forever(self) -> None:
        """Serve in this thread until Ctrl-C (or ``stop()`` from another thread)."""
        try:
            self._server.run(sockets=[self._socket])
        finally:
            self._socket.close()

    def start(self, timeout: float = 60.0) -> ViewerServer:
        """Serve in a daemon thread; returns once the server accepts requests."""
        self._thread = threading.Thread(
            target=self.serve_forever, name="chatledger-viewer", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise StoreUnavailable(f"The viewer did not start on {self.url}.")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> ViewerServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


def _say(line: str) -> None:
    print(line, flush=True)  # at once, even into a pipe: whoever started us waits for it


def serve(
    principal: Principal,
    *,
    url: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    open_browser: bool = False,
    echo: Callable[[str], None] | None = None,
) -> None:
    """Serve the viewer of the ledger at ``url`` as ``principal`` until Ctrl-C."""
    say = echo or _say
    check_binding(host, token)
    settings = load_settings(url=url, create_tables=False)
    with SessionLedger(settings=settings) as ledger:
        app = create_app(
            ledger,
            principal,
            token=token,
            allowed_hosts=LOOPBACK_NAMES if is_loopback(host) else None,
        )
        server = ViewerServer(app, host, port)
        address = server.url + (f"?token={token}" if token else "")
        who = f"{principal.account_id}/{principal.user_id or '-'}"
        scope = "all accounts (admin)" if principal.is_admin else f"account {principal.account_id}"
        say(f"chatledger viewer (read-only, as {who}: {scope}) on {address}")
        say("Press Ctrl-C to stop.")
        if open_browser:
            webbrowser.open(address)
        # uvicorn shuts down gracefully on Ctrl-C, then re-raises it: a requested stop.
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()
        say("Stopped.")
