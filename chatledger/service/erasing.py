"""Erasure: destroy the data keys of sessions' content, and record ``Erased`` in each session.

Content is encrypted at rest with data keys (``chatledger.adapters.sealing``,
``KeyRing``); destroying them erases it everywhere at once -- events,
snapshots, archive bodies, exports made later -- while the events
themselves, their facts and the hash chain stay untouched, so ``verify``
still passes. The steps, in an order a crash cannot make unsafe:

1. survey the sessions: the key ids their stored rows name, and how many
   events hold content stored unencrypted (written before encryption, or
   with it off), which no key can take away;
2. destroy the keys (the content is gone from this moment; this ledger
   forgets its cached copies);
3. record ``Erased`` in each session (an erased session records nothing
   again: erasing is idempotent, so a rerun after a crash completes it);
4. delete the sessions' snapshots and sweep keys made meanwhile; for a user or
   an account whose keys other processes may still seal with (a user's key, a
   pseudonym's), keep sweeping for sessions started meanwhile under them until
   no such write can still land (``_Run.sweep``); a pseudonym's key goes last;
5. ask the key store to purge the destroyed keys from its storage.

Deleting a session (``delete_session``) is erasure's small sibling: with each
incarnation sealed under a key of its own, the deleted incarnation's keys are
destroyed and an ``Erased`` of scope ``incarnation`` goes with the ``Deleted``.

A session erased on its own must have a key of its own: with ``key_scope =
"user"`` its content shares its user's key, and erasing it alone is refused
(``erase_user`` erases them all). Content stored unencrypted cannot be erased
by destroying keys: unless the caller accepts that (``allow_unencrypted``), an
erasure of sessions holding some is refused before anything is done.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from chatledger.adapters.keyring import (
    USER_SCOPE_PREFIX,
    USER_SEAL_SECONDS,
    incarnation_id,
    pseudonym_owner,
    pseudonym_with,
)
from chatledger.adapters.sealing import open_body
from chatledger.adapters.shredding import Survey, delete_snapshots, started_sessions, survey
from chatledger.domain.access import SCOPE_PREFIX, Target
from chatledger.domain.events import ArchiveMerged, Committed, Deleted, Forked
from chatledger.domain.failures import AccessDenied, ChatLedgerError, InvalidInput, UnknownSession
from chatledger.domain.ports import ArchiveBody, KeyStore
from chatledger.domain.session import ErasureScope, Session
from chatledger.domain.values import Principal
from chatledger.results import ErasureResult
from chatledger.service import retries
from chatledger.service.core import Core
from chatledger.service.sessions import AlreadyRecorded, unknown

logger = logging.getLogger("chatledger.erasure")


@dataclass(frozen=True)
class _Erasing:
    """One session to erase: its stream, its key, what its rows name."""

    sid: UUID
    key: str
    found: Survey


def erase_session(
    core: Core, principal: Principal, target: Target, *, allow_unencrypted: bool = False
) -> ErasureResult:
    """Erase one session (``erase``)."""
    found = survey(core.store, target.session_id)
    if not found.exists:
        raise UnknownSession(unknown(target.key, target.tenant))
    erasing = [_Erasing(target.session_id, target.key, found)]
    _check_encrypted(erasing, allow_unencrypted)
    keys = core.store.keyring.store
    records = keys.records(session_id=target.session_id)
    if found.key_ids:
        records += keys.records(key_ids=sorted(found.key_ids))
    shared = sorted({repr(r.user_id) for r in records if r.scope == "user"})
    if shared:
        raise InvalidInput(
            f"Session {target.key!r} is encrypted with the key of its user ({', '.join(shared)}; "
            "key_scope 'user'), which all of that user's sessions share: it cannot be erased "
            "alone. Erase the user (erase_user), or use key_scope 'session' for sessions to be "
            "erased one by one. Nothing was erased."
        )
    key_ids = sorted({r.key_id for r in records} | found.key_ids)
    return _erase(core, principal, "session", target.tenant, None, erasing, key_ids)


def erase_user(
    core: Core, principal: Principal, tenant: str, user_id: str, *, allow_unencrypted: bool
) -> ErasureResult:
    """Erase every session ``user_id`` started in ``tenant`` (``erase_user``), and those of
    the user's pseudonym (an agent framework's user, see ``pseudonym``) with their ``user:``
    state scopes; then destroy the pseudonym's key. Other shared state scopes are the
    account's and stay. ``UnknownSession`` if the user started nothing there and holds no
    key (a misspelt user id erases nothing)."""
    keys = core.store.keyring.store
    marker = pseudonym_owner(tenant, user_id).user_id
    pseudonym_records = keys.records(tenant=tenant, user_id=marker)
    pseudonym_keys = [r for r in pseudonym_records if not r.destroyed_at]
    users = [user_id]
    for record in pseudonym_keys:
        material = keys.get(record.key_id)
        if material is not None:
            users.append(pseudonym_with(material, user_id, None))
    erasing = [
        _Erasing(sid, key, survey(core.store, sid))
        for sid, key, _ in _users_sessions(core, tenant, users)
    ]
    user_keys = [r for user in users for r in keys.records(tenant=tenant, user_id=user)]
    if not erasing and not user_keys and not pseudonym_records:  # (a pseudonym erased: known)
        raise UnknownSession(
            f"No session was started by user {user_id!r} in account {tenant!r}, and the "
            "user holds no key there: nothing to erase (check the user id and the account). "
            "Nothing was erased."
        )
    _check_encrypted(erasing, allow_unencrypted)
    key_ids = {r.key_id for r in user_keys}
    for item in erasing:
        key_ids |= item.found.key_ids
        key_ids |= {r.key_id for r in keys.records(session_id=item.sid)}
    return _erase(
        core, principal, "user", tenant, user_id, erasing, sorted(key_ids),
        latecomers=lambda: _users_sessions(core, tenant, users),
        then_destroy=[r.key_id for r in pseudonym_keys],
        allow_unencrypted=allow_unencrypted,
    )  # fmt: skip


def _users_sessions(core: Core, tenant: str, users: list[str]) -> list[tuple[UUID, str, bool]]:
    """(id, key, wholly the user's) of the sessions ``users`` started in ``tenant``: the first
    is a user id, any other its pseudonym, every session of which is the user's. Shared
    state scopes are the account's, except ``user:`` scopes."""
    return [
        (sid, key, user != users[0])
        for user in users
        for sid, key in started_sessions(core.store, tenant, user)
        if not key.startswith(SCOPE_PREFIX) or key.startswith(USER_SCOPE_PREFIX)
    ]


def erase_tenant(
    core: Core, principal: Principal, tenant: str, *, allow_unencrypted: bool
) -> ErasureResult:
    """Erase every session of an account, its shared state scopes too (``erase_tenant``)."""
    if not principal.is_admin:
        raise AccessDenied("Only admins may erase a whole account; nothing was erased.")
    keys = core.store.keyring.store
    erasing = [
        _Erasing(sid, key, survey(core.store, sid))
        for sid, key in started_sessions(core.store, tenant, None)
    ]
    _check_encrypted(erasing, allow_unencrypted)
    key_ids = {r.key_id for r in keys.records(tenant=tenant)}
    for item in erasing:
        key_ids |= item.found.key_ids

    def everyone() -> list[tuple[UUID, str, bool]]:
        return [(sid, key, False) for sid, key in started_sessions(core.store, tenant, None)]

    return _erase(
        core, principal, "tenant", tenant, None, erasing, sorted(key_ids),
        latecomers=everyone,
        allow_unencrypted=allow_unencrypted,
    )  # fmt: skip


def _check_encrypted(erasing: list[_Erasing], allowed: bool) -> None:
    """Refuse (``InvalidInput``) to erase sessions with content stored unencrypted, unless
    the caller accepts that it stays readable."""
    plain = [
        (item.key, item.found.unencrypted)
        for item in erasing
        if item.found.unencrypted and not item.found.erased  # erased before: accepted then
    ]
    if plain and not allowed:
        named = ", ".join(f"{key!r} ({n} events)" for key, n in plain[:5])
        more = f" and {len(plain) - 5} more" if len(plain) > 5 else ""
        raise InvalidInput(
            f"Content of {named}{more} was stored unencrypted (written with the setting "
            "encryption off, or before encryption existed): destroying keys cannot erase it. "
            "Pass allow_unencrypted=True (CLI: --allow-unencrypted) to record the erasure "
            "anyway -- the sessions then read as erased, but that content stays in their "
            "history and exports -- and turn encryption on for new content. Nothing was "
            "erased."
        )


def _erase(
    core: Core,
    principal: Principal,
    scope: ErasureScope,
    tenant: str,
    user_id: str | None,
    erasing: list[_Erasing],
    key_ids: list[str],
    *,
    latecomers: Callable[[], list[tuple[UUID, str, bool]]] | None = None,
    then_destroy: Sequence[str] = (),
    allow_unencrypted: bool = False,
) -> ErasureResult:
    ring = core.store.keyring
    keys = ring.store
    now = core.now()
    keys.destroy(key_ids, now)
    run = _Run(core, principal, scope, now, set(key_ids), allow_unencrypted)
    ring.forget(key_ids, [item.sid for item in erasing])
    for item in erasing:
        run.erase(item)
    if then_destroy:  # a pseudonym's key: only once its sessions carry Erased (a rerun finds them)
        keys.destroy(then_destroy, now)
        run.destroyed |= set(then_destroy)
        run.destroyed_at = time.monotonic()
        ring.forget(then_destroy)
    if latecomers is not None and (then_destroy or _shared_keys(keys, key_ids)):
        run.sweep(latecomers)
    try:
        purged = bool(keys.purge())
    except ChatLedgerError as error:  # the erasure itself is complete: say so, and why not
        logger.warning("erasure done, but destroyed keys not purged from storage: %s", error)
        purged = False
    return ErasureResult(
        scope=scope,
        account_id=tenant,
        user_id=user_id,
        erased=tuple(run.erased),
        already_erased=tuple(run.already),
        key_ids=tuple(sorted(run.destroyed)),
        snapshots_deleted=run.snapshots,
        unencrypted_events=run.unencrypted,
        purged=purged,
    )


def _shared_keys(keys: KeyStore, key_ids: list[str]) -> bool:
    """Whether some of these keys are a user's (or an account's): keys that sessions started
    while the erasure runs may be sealed with, unlike a session's own."""
    return any(r.scope == "user" for r in keys.records(key_ids=key_ids)) if key_ids else False


class _Run:
    """One erasure under way: what it destroyed and erased so far."""

    def __init__(
        self,
        core: Core,
        principal: Principal,
        scope: ErasureScope,
        now: datetime,
        destroyed: set[str],
        allow_unencrypted: bool,
    ) -> None:
        self.core, self.principal, self.scope, self.now = core, principal, scope, now
        self.allow_unencrypted = allow_unencrypted
        self.destroyed = destroyed
        self.erased: list[str] = []
        self.already: list[str] = []
        self.done: set[UUID] = set()
        self.snapshots = self.unencrypted = 0
        self.destroyed_at = time.monotonic()  # when keys were last destroyed

    def erase(self, item: _Erasing) -> None:
        """Record ``Erased`` in one session, delete its snapshots, and destroy any key a write
        that slipped in between the destruction and the event sealed with (a user's new key
        made meanwhile)."""
        core, keys, ring = self.core, self.core.store.keyring.store, self.core.store.keyring
        named = sorted(item.found.key_ids | {r.key_id for r in keys.records(session_id=item.sid)})
        written = core.sessions.write(
            item.sid, _recorder(self.scope, named, self.principal, self.now)
        )
        (self.erased if written.outcome else self.already).append(item.key)
        self.done.add(item.sid)
        self.snapshots += delete_snapshots(core.store, item.sid)
        core.sessions.forget(item.sid)
        self.unencrypted += item.found.unencrypted
        late = survey(core.store, item.sid).key_ids - self.destroyed
        if late:
            keys.destroy(sorted(late), self.now)
            self.destroyed_at = time.monotonic()
            ring.forget(late)
            self.destroyed |= late

    def sweep(self, latecomers: Callable[[], list[tuple[UUID, str, bool]]]) -> None:
        """Erase the sessions started while the erasure ran that are the user's: every one of
        a pseudonym, and any whose rows name a destroyed key -- until no write sealed with
        such a key, or made under the pseudonym, can still land.

        Another process may have been handed a user key (or a pseudonym) just before it was
        destroyed and start a session with it that the first survey did not see; it may use
        a cached copy for up to ``USER_SEAL_SECONDS``, and such a write may then wait for the
        database up to ``busy_timeout``. So the sweep goes on until that long after the last
        destruction (a session erased here may name a user's newer key, which goes too). A
        session of the user id written wholly under keys that still exist is left alone.
        """
        fence = USER_SEAL_SECONDS + self.core.sessions.busy_timeout
        surveyed: set[UUID] = set()
        while True:
            started = time.monotonic()
            for sid, key, whole in latecomers():
                if sid in self.done or sid in surveyed:
                    continue  # a session found wholly under live keys keeps using them
                found = survey(self.core.store, sid)
                surveyed.add(sid)
                plain_ok = self.allow_unencrypted or not found.unencrypted
                if (whole and plain_ok) or found.key_ids & self.destroyed:
                    before = len(self.destroyed)
                    self.erase(_Erasing(sid, key, found))
                    if len(self.destroyed) != before:
                        surveyed.clear()  # a newer key went too: look at every session again
            if started >= self.destroyed_at + fence:
                return
            time.sleep(0.05)


def _recorder(
    scope: ErasureScope, key_ids: list[str], principal: Principal, now: datetime
) -> Callable[[Session], bool]:
    """The write that records ``Erased`` in a session (``False``: erased before)."""

    def record(session: Session) -> bool:
        return session.erase(scope, key_ids, actor=principal, timestamp=now)

    return record


def delete_session(
    core: Core,
    principal: Principal,
    target: Target,
    *,
    erase: bool,
    idempotency_key: str | None,
    expected_version: int | None,
) -> None:
    """Record ``Deleted`` (``delete_session``): the key starts afresh, and members see only
    what comes after. Where this ledger can (encryption on, ``key_scope = "session"``) the
    deleted incarnation's keys are destroyed first and an ``Erased`` of scope
    ``incarnation`` is recorded with the ``Deleted``, so its content is gone for everyone;
    ``erase`` insists on that (``InvalidInput`` where it cannot be done)."""
    ring, sessions = core.store.keyring, core.sessions
    with sessions.lock(target.session_id):
        recorded = (
            [] if idempotency_key is None
            else sessions.recorded_write(target.session_id, idempotency_key)
        )  # fmt: skip
        head = sessions.load(target.session_id)
    if recorded:  # a retry of a delete that landed (another write under that key: refused)
        retries.first_event(sessions, recorded, lambda event: isinstance(event, Deleted))
        return
    if head is None:
        raise UnknownSession(unknown(target.key, target.tenant))
    head.require_present()
    shred = ring.seal and ring.scope == "session"
    if erase and not shred:
        raise InvalidInput(
            "Erasing a session as it is deleted needs the setting encryption on and "
            "key_scope 'session' (each incarnation then has a key of its own to destroy); "
            "nothing was deleted. Delete it without erase, or erase the session whole."
        )
    start = max(1, head.incarnation)
    key_ids: list[str] | None = None
    now = core.now()
    if shred:
        found = survey(core.store, target.session_id, since=start)
        if erase and found.unencrypted:
            raise InvalidInput(
                f"Session {target.key!r} holds {found.unencrypted} events with content stored "
                "unencrypted since it last started, which destroying keys cannot erase; "
                "nothing was deleted. Delete it without erase (members no longer see it)."
            )
        own = ring.store.records(session_id=incarnation_id(head))
        key_ids = sorted(found.key_ids | {r.key_id for r in own if r.scope == "session"})
        ring.store.destroy(key_ids, now)
        ring.forget(key_ids, [target.session_id])

    def apply(session: Session) -> None:
        session.delete(actor=principal, timestamp=now, erased_key_ids=key_ids)

    try:
        sessions.write(
            target.session_id, apply,
            idempotency_key=idempotency_key, expected_version=expected_version,
        )  # fmt: skip
    except AlreadyRecorded as done:  # a racing retry landed first
        retries.first_event(sessions, done.rows, lambda event: isinstance(event, Deleted))
        return
    finally:
        sessions.forget(target.session_id)
    if key_ids is not None:
        # A write that slipped in before the Deleted may have sealed with a key made
        # meanwhile: destroy it too (it is this incarnation's).
        late = survey(core.store, target.session_id, since=start).key_ids - set(key_ids)
        late_own = [k for k in late if _owned_by_session(ring.store, k)]
        if late_own:
            ring.store.destroy(late_own, now)
            ring.forget(late_own)


def _owned_by_session(keys: KeyStore, key_id: str) -> bool:
    return any(r.scope == "session" for r in keys.records(key_ids=[key_id]))


def archive_body(core: Core, target: Target, archive_id: str) -> ArchiveBody | None:
    """An archive body of the session from the archive store, opened with its key (erased
    content, or a body written unencrypted, reads as stored)."""
    store = core.commits.archive_store
    if store is None:
        return None
    body = store.get(archive_id)
    if body is None or body.session_id != target.session_id.hex:
        return None
    first = core.sessions.visible_from(target)
    if first > 1 and not any(  # a member reads the current incarnation's archives only
        archive_id in _archive_ids(event)
        for event in core.sessions.events(target.session_id, gt=first - 1)
    ):
        return None
    return open_body(body, core.store.keyring.cipher)


def _archive_ids(event: object) -> set[str]:
    if isinstance(event, Committed | ArchiveMerged):
        return {event.archive.archive_id}
    if isinstance(event, Forked):
        return {a.archive_id for a in event.archives}
    return set()
