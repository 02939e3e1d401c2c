"""The viewer's ASGI application: read-only pages over one ledger, as one fixed principal.

``create_app`` wires Starlette routes -- GET only: there is no write endpoint,
so any other method is refused with 405 -- to server-rendered Jinja2 templates
(autoescaping on: message content is always text) and the package's static
files. One guard runs before every request:

* the **Host** header must name the address served (on a loopback server only
  loopback names pass, so a web page cannot reach the viewer by DNS rebinding);
* the **token**, when one is set, must come as ``?token=`` (exchanged for an
  HttpOnly, SameSite=Strict cookie), that cookie, or ``Authorization: Bearer``;
* the **tenant rule**: the principal is fixed here. A member naming another
  account in any ``account``/``account_id``/``tenant`` query parameter gets 403;
  every session is read in the account its path names, so another account in
  the path is refused by the ledger (403), and another account's key inside
  the member's own account simply does not exist (404).

Responses carry a strict Content-Security-Policy (scripts and styles from this
server only, no inline script), so even markup that slipped through could not run.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from chatledger.domain.values import Principal
from chatledger.errors import (
    AccessDenied,
    ChatLedgerError,
    InvalidInput,
    StoreUnavailable,
    UnknownSession,
)
from chatledger.ledger import SessionLedger
from chatledger.read_models import ReadModels
from chatledger.web import pages, verdicts
from chatledger.web.guard import (
    LOOPBACK_NAMES,
    Guard,
    session_url,
    unsegment,
)

HERE = Path(__file__).resolve().parent
MAX_PAGE_SIZE = 500
MAX_BUDGET = 10_000_000


def _int(request: Request, name: str, default: int | None = None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidInput(f"The query parameter {name} must be a whole number.") from None


def _stamp(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def _templates() -> Jinja2Templates:
    environment = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["n"] = lambda value: f"{value:,}"
    environment.filters["stamp"] = _stamp
    environment.filters["clock"] = lambda m: m.strftime("%H:%M:%S")
    environment.globals["session_url"] = session_url
    return Jinja2Templates(env=environment)


class _Pages:
    """The route handlers (sync: Starlette runs them in its thread pool)."""

    def __init__(
        self,
        ledger: SessionLedger,
        models: ReadModels,
        principal: Principal,
        *,
        page_size: int,
        list_size: int,
        poll_interval: float,
    ) -> None:
        self.ledger = ledger
        self.models = models
        self.principal = principal
        self.page_size = page_size
        self.list_size = list_size
        self.poll_ms = int(poll_interval * 1000)
        self.cache = verdicts.VerdictCache()
        self.templates = _templates()

    # ------------------------------------------------------------- helpers
    def _target(self, request: Request) -> tuple[str, str]:
        """(account, key) named by the path; refuses an account the principal may not read."""
        account = unsegment(request.path_params["account"])
        key = unsegment(request.path_params["key"])
        if account != self.principal.account_id and not self.principal.is_admin:
            raise AccessDenied(
                f"This viewer shows account {self.principal.account_id!r} only; "
                f"account {account!r} is not yours."
            )
        return account, key

    def _page(
        self, request: Request, name: str, status_code: int = 200, **context: Any
    ) -> Response:
        return self.templates.TemplateResponse(
            request,
            name,
            {"principal": self.principal, **context},
            status_code=status_code,
        )

    def _size(self, request: Request, default: int) -> int:
        size = _int(request, "limit", default)
        assert size is not None
        if not 1 <= size <= MAX_PAGE_SIZE:
            raise InvalidInput(f"limit must be from 1 to {MAX_PAGE_SIZE}.")
        return size

    # ------------------------------------------------------------- pages
    def sessions(self, request: Request) -> Response:
        params = request.query_params
        account = params.get("account") or None
        page = pages.sessions_page(
            self.models,
            self.ledger,
            self.principal,
            self.cache,
            order=params.get("order", "last_activity"),
            status=params.get("status", "live"),
            search=params.get("q", "").strip(),
            account=account,
            page=_int(request, "page", 1) or 0,
            page_size=self._size(request, self.list_size),
            verify=params.get("verify") == "1",
        )
        return self._page(request, "sessions.html", page=page, params=dict(params))

    def timeline(self, request: Request) -> Response:
        account, key = self._target(request)
        base = session_url(account, key)
        page = pages.timeline_page(
            self.models,
            self.ledger,
            self.principal,
            self.cache,
            account,
            key,
            before=_int(request, "before"),
            after=_int(request, "after"),
            around=_int(request, "around"),
            page_size=self._size(request, self.page_size),
            version_url=base + "/versions/{v}",
            around_url=base + "?around={v}",
        )
        return self._page(request, "timeline.html", page=page, base=base, poll_ms=self.poll_ms)

    def events(self, request: Request) -> Response:
        """New events after ``after`` as rendered rows, for the live timeline."""
        account, key = self._target(request)
        after = _int(request, "after", 0) or 0
        if after < 0:
            raise InvalidInput("after must be 0 or more.")
        facts = self.models.timeline(
            self.principal, key, after_version=after, limit=self.page_size, account_id=account
        )
        rows = pages.event_rows(self.ledger, self.principal, account, key, facts)
        html = ""
        if rows:
            template = self.templates.get_template("rows.html")
            html = template.render(rows=rows, base=session_url(account, key), account=account)
        counters = {}
        if facts:
            last = facts[-1]
            counters = {
                "version": f"{last.version:,}",
                "status": last.status,
                "message_count": f"{last.message_count:,}",
                "pending_tokens": f"{last.pending_tokens:,}",
                "turn_count": f"{last.turn_count:,}",
                "commit_count": f"{last.commit_count:,}",
                "archive_count": f"{last.archive_count:,}",
                "last_activity": _stamp(last.timestamp),
            }
        return JSONResponse(
            {
                "after": facts[-1].version if facts else after,
                "html": html,
                "counters": counters,
                "more": len(facts) == self.page_size,
            }
        )

    def version(self, request: Request) -> Response:
        account, key = self._target(request)
        budget = _int(request, "budget", 128_000)
        assert budget is not None
        if not 0 <= budget <= MAX_BUDGET:
            raise InvalidInput(f"budget must be from 0 to {MAX_BUDGET:,} tokens.")
        page = pages.version_page(
            self.models,
            self.ledger,
            self.principal,
            account,
            key,
            int(request.path_params["version"]),
            budget,
        )
        return self._page(request, "version.html", page=page, base=session_url(account, key))

    def diff(self, request: Request) -> Response:
        account, key = self._target(request)
        start, end = _int(request, "from"), _int(request, "to")
        if start is None or end is None:
            raise InvalidInput("Pick two versions to compare (from and to).")
        page = pages.diff_page(self.ledger, self.principal, account, key, start, end)
        return self._page(request, "diff.html", page=page, base=session_url(account, key))

    def forks(self, request: Request) -> Response:
        account, key = self._target(request)
        found = self.models.forks(self.principal, key, account_id=account)
        return self._page(
            request, "forks.html", forks=found, account=account, key=key,
            base=session_url(account, key),
        )  # fmt: skip

    def verify(self, request: Request) -> Response:
        account, key = self._target(request)
        verdict = verdicts.verify_session(self.ledger, self.principal, account, key, self.cache)
        return self._page(
            request,
            "verify.html",
            status_code=200,
            verdict=verdict,
            account=account,
            key=key,
            base=session_url(account, key),
        )

    # ------------------------------------------------------------- errors
    def error(self, request: Request, error: Exception) -> Response:
        status = 500
        if isinstance(error, AccessDenied):
            status = 403
        elif isinstance(error, UnknownSession):
            status = 404
        elif isinstance(error, InvalidInput):
            status = 400
        elif isinstance(error, StoreUnavailable):
            status = 503
        if request.url.path.endswith("/events"):
            return JSONResponse({"error": str(error)}, status_code=status)
        return self._page(request, "error.html", status_code=status, error=str(error), code=status)


def create_app(
    ledger: SessionLedger,
    principal: Principal,
    *,
    token: str | None = None,
    allowed_hosts: set[str] | frozenset[str] | None = frozenset(LOOPBACK_NAMES),
    follow: bool = True,
    page_size: int = 100,
    list_size: int = 50,
    poll_interval: float = 1.0,
) -> Starlette:
    """The viewer of ``ledger`` as ``principal`` (fixed for the app's life).

    ``token``: required from every request when given. ``allowed_hosts``: the
    names the Host header may carry (``None``: any, for a server behind a token).
    ``follow``: bring the read models up to date when the app starts and keep
    them so with a follower thread while it runs (the sessions page reads them).
    ``page_size``: events per timeline page; ``list_size``: sessions per page;
    ``poll_interval``: seconds between the live timeline's checks for new events.
    """
    if not isinstance(principal, Principal):
        raise InvalidInput("principal must be a chatledger Principal.")
    if token is not None and not token:
        raise InvalidInput("token must be a non-empty string or None.")
    models = ledger.read_models
    handlers = _Pages(
        ledger,
        models,
        principal,
        page_size=page_size,
        list_size=list_size,
        poll_interval=poll_interval,
    )
    get = ["GET"]
    session = "/sessions/{account}/{key}"
    routes = [
        Route("/", handlers.sessions, methods=get, name="sessions"),
        Route(session, handlers.timeline, methods=get, name="timeline"),
        Route(session + "/events", handlers.events, methods=get, name="events"),
        Route(session + "/versions/{version:int}", handlers.version, methods=get, name="version"),
        Route(session + "/diff", handlers.diff, methods=get, name="diff"),
        Route(session + "/verify", handlers.verify, methods=get, name="verify"),
        Route(session + "/forks", handlers.forks, methods=get, name="forks"),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if follow:
            # Serve current read models from the first request on, then keep them so.
            await run_in_threadpool(models.catch_up)
            models.start()
        try:
            yield
        finally:
            if follow:
                models.stop()

    handler: Callable[[Request, Exception], Response] = handlers.error
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={ChatLedgerError: handler},
    )
    app.add_middleware(
        Guard,
        principal=principal,
        token=token,
        allowed_hosts=None if allowed_hosts is None else frozenset(allowed_hosts),
    )
    return app
