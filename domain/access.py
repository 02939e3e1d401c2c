"""The tenant rule: which sessions a principal may touch, written once.

A member acts in its own account only; an admin may name any account. A
session is addressed by (account, key), so resolving a principal's request to
a stream id and checking the rule are one step (``target``). Queries over many
sessions are limited to one account, or to none for an admin who names none
(``query_scope``); a row of some tenant may be shown only if ``visible``. Every
face (the ledger, its read models, verify/export, the viewer) goes through
these three functions. Pure: no I/O.
"""

from __future__ import annotations

from typing import NamedTuple
from uuid import UUID

from chatledger.domain.failures import AccessDenied, InvalidInput
from chatledger.domain.identity import session_id, validate_key
from chatledger.domain.values import Principal

SCOPE_PREFIX = "~state:"
"""Keys of shared state scopes start with this; session keys may not."""


class Target(NamedTuple):
    """One session as a request names it: its tenant, key and stream id; ``audit``: the
    requester is an admin, who reads every incarnation of it (a member reads the events
    since its last deletion only)."""

    tenant: str
    key: str
    session_id: UUID
    audit: bool = False


def check_principal(principal: object) -> Principal:
    """``principal`` if it is a chatledger ``Principal``, else ``InvalidInput``."""
    if not isinstance(principal, Principal):
        raise InvalidInput("principal must be a chatledger Principal.")
    return principal


def target(principal: Principal, key: str, account_id: str | None = None) -> Target:
    """The session ``key`` in ``account_id`` (default: the principal's own account).

    Raises ``InvalidInput`` for a bad principal, key or account id and
    ``AccessDenied`` when a member names another account.
    """
    check_principal(principal)
    tenant = principal.account_id if account_id is None else account_id
    try:
        sid = session_id(tenant, key)  # validates both (the results are cached)
    except TypeError:  # unhashable, so not a str: say so in chatledger's words
        validate_key(tenant, what="account id")
        validate_key(key)
        raise
    _allow(principal, tenant)
    if key.startswith(SCOPE_PREFIX):
        raise InvalidInput(
            f"Session keys starting with {SCOPE_PREFIX!r} are reserved for shared state "
            "scopes; pick another key (shared_state= writes a scope)."
        )
    return Target(tenant, key, sid, principal.is_admin)


def scope_target(principal: Principal, scope: str, account_id: str | None = None) -> Target:
    """The stream of the shared state scope ``scope`` (e.g. ``app:shop``), under the same
    tenant rule as a session."""
    check_principal(principal)
    if not isinstance(scope, str) or not scope or len(scope) > 200:
        raise InvalidInput("A state scope is a name of 1 to 200 printable characters.")
    tenant = principal.account_id if account_id is None else account_id
    key = SCOPE_PREFIX + scope
    sid = session_id(tenant, key)  # validates the account id and the scope's characters
    _allow(principal, tenant)
    return Target(tenant, key, sid, principal.is_admin)


def query_scope(principal: Principal, account_id: str | None = None) -> str | None:
    """The account a query over many sessions is limited to; ``None``: every account.

    A member is limited to its own account (naming another is ``AccessDenied``);
    an admin to the account it names, or to none.
    """
    check_principal(principal)
    if account_id is not None:
        validate_key(account_id, what="account id")
        _allow(principal, account_id)
        return account_id
    return None if principal.is_admin else principal.account_id


def visible(principal: Principal, tenant: str | None) -> bool:
    """Whether rows of ``tenant`` may be shown to ``principal``."""
    return principal.is_admin or tenant == principal.account_id


def _allow(principal: Principal, tenant: str) -> None:
    if tenant != principal.account_id and not principal.is_admin:
        raise AccessDenied(
            f"Principal of account {principal.account_id!r} may not touch sessions of "
            f"account {tenant!r}; only admins may name another account."
        )
