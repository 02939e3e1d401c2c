"""The erasure part of ``SessionLedger``: erase a session, a user's sessions, an account.

``ErasureOperations`` is mixed into ``SessionLedger``; each method checks its
arguments, applies the tenant rule and makes one call into
``chatledger.service.erasing`` (what is erased and what stays:
docs/erasure.md).
"""

from __future__ import annotations

from chatledger.boundary import public
from chatledger.domain.access import check_principal, query_scope
from chatledger.domain.failures import AccessDenied, InvalidInput
from chatledger.domain.identity import validate_key
from chatledger.domain.values import Principal
from chatledger.ledger_base import LedgerBase
from chatledger.results import ErasureResult
from chatledger.service import erasing


class ErasureOperations(LedgerBase):
    """erase, erase_user, erase_tenant, pseudonym (mixed into ``SessionLedger``)."""

    @public
    def pseudonym(
        self,
        principal: Principal,
        user_id: str,
        value: str | None = None,
        *,
        account_id: str | None = None,
    ) -> str:
        """A stable pseudonym of ``user_id`` in the account (``value`` None), or of ``value``
        (a session id, a name) among that user's: ``p`` and 32 hex digits, a keyed HMAC under
        a key of the user in the key store. Record an agent framework's user as the user id
        of its principal, and its identifiers in keys, under pseudonyms: ``erase_user(...,
        user_id)`` erases the pseudonym's sessions with the user's and destroys the key,
        after which nothing links a pseudonym back to the user (docs/erasure.md)."""
        check_principal(principal)
        self.core.check_open()
        _check_user_id(user_id)
        if value is not None and (not isinstance(value, str) or not 0 < len(value) <= 4096):
            raise InvalidInput("value must be None or a str of 1 to 4096 characters.")
        tenant = query_scope(principal, account_id) or principal.account_id
        return self.core.store.keyring.pseudonym(tenant, user_id, value, self.core.now())

    @public
    def erase(
        self,
        principal: Principal,
        key: str,
        *,
        account_id: str | None = None,
        allow_unencrypted: bool = False,
    ) -> ErasureResult:
        """Erase the session's content: destroy its data key and record ``Erased``.

        Afterwards its content reads as erased everywhere (now, at every earlier
        version, in exports and read models) while event types, actors, times,
        counters and the hash chain stay, so ``verify`` still passes. The session
        takes no more writes (``SessionErased``). Erasing it again records nothing
        (it is listed under ``already_erased``). With ``key_scope = "user"`` a
        session shares its user's key and is erased with ``erase_user`` instead.
        Content stored unencrypted (setting ``encryption`` off, or written before it
        existed) cannot be erased this way: such a session is refused
        (``InvalidInput``) unless ``allow_unencrypted`` accepts that it stays in the
        history.
        """
        found = self._target(principal, key, account_id)
        return erasing.erase_session(
            self.core, principal, found, allow_unencrypted=bool(allow_unencrypted)
        )

    @public
    def erase_user(
        self,
        principal: Principal,
        user_id: str,
        *,
        account_id: str | None = None,
        allow_unencrypted: bool = False,
    ) -> ErasureResult:
        """Erase every session ``user_id`` started in the account (the principal's own, or
        ``account_id`` for an admin): their keys -- the user's key too -- destroyed, an
        ``Erased`` in each; with them every session of the user's ``pseudonym`` and its
        ``user:`` state scopes, and then the pseudonym's key. Other shared state scopes
        belong to the account and stay. ``UnknownSession`` if the user started nothing in
        the account. ``allow_unencrypted`` as for ``erase``."""
        check_principal(principal)
        self.core.check_open()
        _check_user_id(user_id)
        tenant = query_scope(principal, account_id) or principal.account_id
        return erasing.erase_user(
            self.core, principal, tenant, user_id, allow_unencrypted=bool(allow_unencrypted)
        )

    @public
    def erase_tenant(
        self, principal: Principal, account_id: str, *, allow_unencrypted: bool = False
    ) -> ErasureResult:
        """Erase every session of an account, its shared state scopes too (admins only;
        ``allow_unencrypted`` as for ``erase``)."""
        check_principal(principal)
        self.core.check_open()
        validate_key(account_id, what="account id")
        if not principal.is_admin:
            raise AccessDenied("Only admins may erase a whole account; nothing was erased.")
        return erasing.erase_tenant(
            self.core, principal, account_id, allow_unencrypted=bool(allow_unencrypted)
        )


def _check_user_id(user_id: object) -> None:
    if not isinstance(user_id, str) or not user_id or len(user_id) > 256:
        raise InvalidInput(
            "user_id must be a str of 1 to 256 characters (sessions started without a "
            "user id belong to no user: erase them one by one, or the whole account)."
        )
