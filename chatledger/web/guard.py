"""The viewer's guard and addresses: Host, token and tenant checks; path segments.

``Guard`` runs before every request (see ``chatledger.web.app``); ``segment`` and
``session_url`` spell an account or key (any printable text) as a path segment.
"""

from __future__ import annotations

import base64
import hmac
import re

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from chatledger.domain.values import Principal
from chatledger.errors import InvalidInput

TOKEN_COOKIE = "chatledger_viewer"
ACCOUNT_PARAMETERS = ("account", "account_id", "tenant")
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


_PLAIN_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def segment(value: str) -> str:
    """A path segment naming ``value`` (an account or key, which may hold any printable text).

    Plain names stay readable (``ticket-42``); others become ``~`` and their
    UTF-8 in unpadded URL-safe base64, which no server or client rewrites
    (percent-escapes of ``/`` are decoded before routing by some and not others).
    """
    if _PLAIN_SEGMENT.fullmatch(value):
        return value
    return "~" + base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")


def unsegment(text: str) -> str:
    """The account or key a path segment names (the inverse of ``segment``)."""
    if not text.startswith("~"):
        return text
    try:
        return base64.urlsafe_b64decode(text[1:] + "=" * (-len(text[1:]) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        raise InvalidInput(f"{text!r} is not a valid session address.") from None


def session_url(account: str, key: str, suffix: str = "") -> str:
    return f"/sessions/{segment(account)}/{segment(key)}{suffix}"


class Guard:
    """Host check, token check, tenant query check and security headers (see module doc)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        principal: Principal,
        token: str | None,
        allowed_hosts: frozenset[str] | None,
    ) -> None:
        self.app = app
        self.principal = principal
        self.token = token
        self.allowed_hosts = allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        refusal = self._refusal(Request(scope))
        if refusal is not None:
            await refusal(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def _refusal(self, request: Request) -> Response | None:
        if self.allowed_hosts is not None:
            host = host_name(request.headers.get("host", ""))
            if host not in self.allowed_hosts:
                return PlainTextResponse("Unknown Host header for this viewer.", status_code=400)
        if self.token is not None:
            supplied = request.query_params.get("token")
            if supplied is not None:
                if not self._matches(supplied):
                    return unauthorized()
                query = request.url.remove_query_params("token").query
                response = RedirectResponse(
                    request.url.path + (f"?{query}" if query else ""), status_code=303
                )
                response.set_cookie(
                    TOKEN_COOKIE, self.token, httponly=True, samesite="strict", path="/"
                )
                return response
            header = request.headers.get("authorization", "")
            bearer = header[7:] if header.lower().startswith("bearer ") else None
            if not (self._matches(request.cookies.get(TOKEN_COOKIE)) or self._matches(bearer)):
                return unauthorized()
        if not self.principal.is_admin:
            for name in ACCOUNT_PARAMETERS:
                for value in request.query_params.getlist(name):
                    if value != self.principal.account_id:
                        return PlainTextResponse(
                            f"Forbidden: this viewer shows account "
                            f"{self.principal.account_id!r} only.",
                            status_code=403,
                        )
        return None

    def _matches(self, supplied: str | None) -> bool:
        assert self.token is not None
        return supplied is not None and hmac.compare_digest(supplied.encode(), self.token.encode())


def unauthorized() -> Response:
    return PlainTextResponse(
        "This viewer needs its token: open the address `chatledger serve` printed "
        "(it ends in ?token=...), or send Authorization: Bearer <token>.",
        status_code=401,
    )


def host_name(host: str) -> str:
    """The name part of a Host header (``[::1]:8000`` -> ``::1``)."""
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host
