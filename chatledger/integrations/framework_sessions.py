"""What the AG2 and LangGraph integrations share: opening a ledger, dropping a session,
listing a tenant's sessions.

Both take ``ledger_or_url`` (a ``SessionLedger``, an ``AsyncSessionLedger`` or a URL
they open and own), act as one principal, and forget a session the same way:
``Deleted`` (history kept), or an erasure when the ledger encrypts content. Public
``SessionLedger`` API only; no framework is imported here.
"""

from __future__ import annotations

from chatledger import (
    AsyncSessionLedger,
    InvalidInput,
    Principal,
    SessionErased,
    SessionLedger,
    UnknownSession,
)

_PAGE = 1000


def open_ledger(
    ledger_or_url: SessionLedger | AsyncSessionLedger | str, principal: Principal
) -> tuple[SessionLedger, bool]:
    """The sync ledger to use, and whether the caller opened it (and must close it)."""
    if not isinstance(principal, Principal):
        raise InvalidInput("principal must be a chatledger Principal.")
    if isinstance(ledger_or_url, str):
        return SessionLedger(ledger_or_url), True
    if isinstance(ledger_or_url, AsyncSessionLedger):
        return ledger_or_url.ledger, False
    if isinstance(ledger_or_url, SessionLedger):
        return ledger_or_url, False
    raise InvalidInput(
        "ledger_or_url must be a SessionLedger, an AsyncSessionLedger or a database URL."
    )


def drop_session(
    ledger: SessionLedger, principal: Principal, key: str, account_id: str | None
) -> None:
    """Record ``Deleted`` -- or erase the session, on a ledger with encryption (its
    content is then gone for good and the key takes no more writes); nothing happens
    for a session that is not there."""
    try:
        if ledger.settings.encryption:
            ledger.erase(principal, key, account_id=account_id)
        else:
            ledger.delete_session(principal, key, account_id=account_id)
    except (UnknownSession, SessionErased):
        pass


def session_keys(ledger: SessionLedger, principal: Principal, account_id: str | None) -> list[str]:
    """Every session key of the tenant (the read models caught up first)."""
    models = ledger.read_models
    models.catch_up()
    keys: list[str] = []
    offset = 0
    while True:
        rows = models.working_set(
            principal, account_id=account_id, include_evicted=True, limit=_PAGE, offset=offset
        )
        keys += [r.session_key for r in rows]
        if len(rows) < _PAGE:
            return keys
        offset += _PAGE
