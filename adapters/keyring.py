"""``KeyRing``: the data keys one ledger seals and opens content with, cached.

It sits between the event store and the ``KeyStore`` port: which key seals a
session's new events (the session's own key, or its user's: ``key_scope``),
and which cipher opens a stored key id -- both remembered for ``ttl`` seconds (a
user's key seals from the cache for at most ``USER_SEAL_SECONDS``), so appends
and loads do not ask the key store each time. Another process that
destroys a key is noticed when the entry expires; this process's own erasures
drop the entries at once (``forget``). A new session always asks the store, so
a user key destroyed elsewhere is never used for a session started here later.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any
from uuid import UUID, uuid5

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from chatledger.adapters.sealing import seal_body
from chatledger.domain.access import SCOPE_PREFIX
from chatledger.domain.failures import StoreUnavailable
from chatledger.domain.ports import ArchiveBody, KeyOwner, KeyScope, KeyStore
from chatledger.domain.session import Session

_MAX_ENTRIES = 10_000
USER_SCOPE_PREFIX = SCOPE_PREFIX + "user:"
"""Shared state scopes named ``user:...`` (ledger key ``~state:user:...``) are their
user's: sealed with the key of the user who started them and erased with that user (an
agent framework's per-user state); every other scope is the account's."""
PSEUDONYM_OWNER = "~pseudonym:"
_PSEUDONYM_BYTES = 16
USER_SEAL_SECONDS = 1.0
"""Longest a user's key seals from the cache: a user key is shared by every session the user
starts, so an erasure elsewhere must know how long another process may still seal with it
(``erase_user`` waits that long, plus a write's lock wait, for such writes to land)."""
_KEY_ID = re.compile(r"[A-Za-z0-9._:/-]{1,128}")
_KEY_BYTES = 32


class KeyRing:
    """Sealing keys by session and ciphers by key id, in front of a key store (each cache
    keeps the newest entries: one fetched more than ``_MAX_ENTRIES`` fetches ago is
    dropped)."""

    def __init__(
        self,
        store: KeyStore,
        *,
        scope: KeyScope,
        seal: bool,
        ttl: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.scope = scope
        self.seal = seal  # whether new content is encrypted (setting ``encryption``)
        self.ttl = ttl
        # How long a cached key seals new content: a user's key for at most
        # USER_SEAL_SECONDS (see there), a session's for the whole ttl.
        self.seal_ttl = ttl if scope == "session" else min(ttl, USER_SEAL_SECONDS)
        self._monotonic = monotonic
        # By (session id, incarnation): a restarted session seals with a key of its own.
        self._sealing: OrderedDict[tuple[int, int], tuple[float, str, AESGCM]] = OrderedDict()
        self._ciphers: OrderedDict[str, tuple[float, AESGCM | None]] = OrderedDict()
        self._lock = threading.Lock()
        self._overlay: dict[str, AESGCM | None] = {}
        self._pseudonym_keys: OrderedDict[tuple[str, str], tuple[float, bytes]] = OrderedDict()

    def owner_of(self, session: Session) -> KeyOwner:
        """Whose key seals ``session``: its own -- one per incarnation, so that deleting it
        can destroy the content of the deleted one (``incarnation_id``) -- or that of the
        user who started it (a shared state scope belongs to the account: its key is the
        account's, user ``""``; a ``user:`` scope is its user's)."""
        if self.scope == "session":
            return KeyOwner(
                scope="session", tenant=session.tenant, session_id=incarnation_id(session)
            )
        key = session.key
        shared = key.startswith(SCOPE_PREFIX) and not key.startswith(USER_SCOPE_PREFIX)
        user = "" if shared else session.started_by.user_id
        return KeyOwner(scope="user", tenant=session.tenant, user_id=user)

    def pseudonym(self, tenant: str, user_id: str, value: str | None, at: datetime) -> str:
        """A keyed pseudonym of a user of ``tenant`` (``value`` None), or of ``value`` among
        that user's names: ``p`` and 32 hex digits of an HMAC-SHA256 under a key of the user
        kept in the key store (made on first use). Destroying that key (``erase_user``)
        leaves nothing that links a pseudonym back; the user's next one differs."""
        owner = pseudonym_owner(tenant, user_id)
        now = self._monotonic()
        cached = self._pseudonym_keys.get((tenant, user_id))
        if cached is not None and now - cached[0] < self.seal_ttl:
            material = cached[1]
        else:
            material = self.store.key_for(owner, at).material
            with self._lock:
                self._pseudonym_keys[(tenant, user_id)] = (now, material)
                while len(self._pseudonym_keys) > _MAX_ENTRIES:
                    self._pseudonym_keys.popitem(last=False)
        return pseudonym_with(material, user_id, value)

    def sealing_key(self, session: Session, at: datetime, *, new: bool) -> tuple[str, AESGCM]:
        """The key id and cipher that seal ``session``'s new content (``SessionErased`` if
        its own key was destroyed); ``new``: the session is being started (ask the store)."""
        now = self._monotonic()
        sid = (session.id.int, session.incarnation)
        if not new:
            entry = self._sealing.get(sid)  # a dict read needs no lock (the hot path)
            if entry is not None and now - entry[0] < self.seal_ttl:
                return entry[1], entry[2]
        key = self.store.key_for(self.owner_of(session), at)
        if not _KEY_ID.fullmatch(key.key_id) or len(key.material) != _KEY_BYTES:
            raise StoreUnavailable(
                f"The key store returned key id {key.key_id!r} with {len(key.material)} bytes "
                "of material; key ids must be 1-128 letters, digits or ._:/- and keys "
                "32 bytes (AES-256). Fix the key store."
            )
        cipher = AESGCM(key.material)
        with self._lock:
            self._sealing[sid] = (now, key.key_id, cipher)
            self._sealing.move_to_end(sid)
            self._ciphers[key.key_id] = (now, cipher)
            self._trim()
        return key.key_id, cipher

    def archive_sealer(
        self, session: Session, at: datetime
    ) -> Callable[[ArchiveBody], ArchiveBody] | None:
        """What encrypts ``session``'s archive bodies (``None`` with encryption off)."""
        if not self.seal:
            return None
        key_id, cipher = self.sealing_key(session, at, new=False)
        return lambda body: seal_body(body, key_id, cipher)

    def cipher(self, key_id: str) -> AESGCM | None:
        """The cipher of a stored key id; ``None`` if the key is destroyed (content erased)."""
        if key_id in self._overlay:
            return self._overlay[key_id]
        now = self._monotonic()
        entry = self._ciphers.get(key_id)
        if entry is not None and now - entry[0] < self.ttl:
            return entry[1]
        material = self.store.get(key_id)
        cipher = None if material is None else AESGCM(material)
        with self._lock:
            self._ciphers[key_id] = (now, cipher)
            self._ciphers.move_to_end(key_id)
            self._trim()
        return cipher

    @contextmanager
    def overlay(self, keys: Mapping[str, bytes | None]) -> Iterator[None]:
        """While it lasts, these keys (material, or ``None``: destroyed) open content before
        the store's (an import checks a file with the keys the file brings)."""
        self._overlay = {k: None if m is None else AESGCM(m) for k, m in keys.items()}
        try:
            yield
        finally:
            self._overlay = {}

    def forget(self, key_ids: Iterable[str] = (), session_ids: Iterable[Any] = ()) -> None:
        """Drop cached keys (after this ledger destroyed them)."""
        with self._lock:
            self._pseudonym_keys.clear()  # rare, and cheap to fetch again
            gone = set(key_ids)
            for key_id in gone:
                self._ciphers.pop(key_id, None)
            sessions = {sid.int for sid in session_ids}
            for cached, entry in list(self._sealing.items()):
                if cached[0] in sessions or entry[1] in gone:
                    del self._sealing[cached]

    def _trim(self) -> None:
        while len(self._sealing) > _MAX_ENTRIES:
            self._sealing.popitem(last=False)
        while len(self._ciphers) > _MAX_ENTRIES:
            self._ciphers.popitem(last=False)


def pseudonym_owner(tenant: str, user_id: str) -> KeyOwner:
    """The owner of a user's pseudonym key: the user named by a hash of their id, so that
    the key table does not hold the id itself."""
    digest = hashlib.sha256(user_id.encode()).hexdigest()
    return KeyOwner(scope="user", tenant=tenant, user_id=PSEUDONYM_OWNER + digest)


def pseudonym_with(material: bytes, user_id: str, value: str | None) -> str:
    """The pseudonym of ``user_id`` (or of ``value`` among its names) under ``material``."""
    label = b"user\0" + user_id.encode() if value is None else b"name\0" + value.encode()
    return "p" + hmac.new(material, label, hashlib.sha256).hexdigest()[: 2 * _PSEUDONYM_BYTES]


def incarnation_id(session: Session) -> UUID:
    """The id a session's key is owned by: the session's own id until it is first deleted,
    then one derived from the version that began its current incarnation."""
    if session.incarnation <= 1:
        return session.id
    return uuid5(session.id, f"incarnation:{session.incarnation}")
