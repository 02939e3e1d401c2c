"""``SessionStore``: the repository of sessions -- locks, a cache, loads and atomic writes.

Every read and write of a session goes through here. A per-session lock
orders this process's writes (and loads) of one session while other sessions
proceed in parallel; recently used sessions stay loaded (an LRU cache: the
library's own cache deep-copies on every read, so it is off); a write applies
a change to the loaded session and records its events in one transaction,
reloading and re-applying after a version conflict with another writer until
``busy_timeout`` runs out. A write made with an idempotency key first looks
for a write recorded with that key and, if there is one, raises
``AlreadyRecorded`` with its rows instead of writing again.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, NamedTuple, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import IntegrityError, StoredEvent

from chatledger.adapters.recorders import KeyedRow
from chatledger.adapters.shredding import incarnation_start
from chatledger.adapters.store import EventStoreApplication
from chatledger.domain.access import Target
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.failures import (
    ConcurrencyConflict,
    InvalidInput,
    SessionErased,
    StoreUnavailable,
    UnknownSession,
)
from chatledger.domain.limits import check_aware, check_int
from chatledger.domain.session import Session
from chatledger.domain.timestamps import to_micros

R = TypeVar("R")
logger = logging.getLogger("chatledger.sessions")
_MIN_WRITE_ATTEMPTS = 5


class AlreadyRecorded(Exception):
    """The write was recorded before with the same idempotency key (its rows attached)."""

    def __init__(self, rows: list[KeyedRow]) -> None:
        super().__init__("already recorded")
        self.rows = rows


class Written(NamedTuple, Generic[R]):
    """What a write returned: the change's own result, the events' positions, the session,
    and the session's version and pending tokens right after the write.

    The session object may be the cached one, which other threads write to once
    the lock is released: what the write itself left is in ``version`` and
    ``pending_tokens``, taken under the lock. A named tuple: one is made for
    every write, and it is cheaper to build than a frozen dataclass."""

    outcome: R
    positions: list[int]
    session: Session
    version: int
    pending_tokens: int


def unknown(key: str, tenant: str) -> str:
    """The message for a session that does not exist."""
    return f"No session {key!r} in account {tenant!r}; add a message to start it."


class SessionStore:
    """Sessions of one event store: locked, cached, loaded as of any version, written."""

    def __init__(self, store: EventStoreApplication, *, cache_size: int, busy_timeout: float):
        self.store = store
        self.cache_size = cache_size
        self.busy_timeout = busy_timeout
        # Loaded sessions, least recently used first, each with its lock (the strong
        # reference keeps the weakly held lock alive while cached). Keyed by UUID.int:
        # hashing an int skips UUID.__hash__ (Python code) on the hot path.
        self._cache: OrderedDict[int, tuple[Session, threading.Lock | None]] = OrderedDict()
        self._cache_guard = threading.Lock()
        self._locks: weakref.WeakValueDictionary[int, threading.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._locks_guard = threading.Lock()

    # ------------------------------------------------------------- locking
    def lock(self, sid: UUID) -> threading.Lock:
        """The lock serialising this process's writes and loads of one session."""
        # A cached session holds its lock: found without the guard (one dict read,
        # atomic), the common case of every write to a loaded session.
        entry = self._cache.get(sid.int)
        if entry is not None and entry[1] is not None:
            return entry[1]
        with self._locks_guard:
            holder = self._locks.get(sid.int)
            if holder is None:
                holder = threading.Lock()  # weakly held: idle sessions cost nothing
                self._locks[sid.int] = holder
        return holder

    # --------------------------------------------------------------- cache
    def _cached(self, sid: UUID) -> Session | None:
        with self._cache_guard:
            entry = self._cache.get(sid.int)
            if entry is None:
                return None
            self._cache.move_to_end(sid.int)
            return entry[0]

    def _remember(self, sid: UUID, session: Session) -> None:
        if self.cache_size == 0:
            return
        with self._cache_guard:
            entry = self._cache.get(sid.int)
            if entry is not None and entry[0] is session:
                return  # the cached object itself was changed
            self._cache[sid.int] = (session, self._locks.get(sid.int))
            self._cache.move_to_end(sid.int)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    def forget(self, sid: UUID) -> None:
        """Drop the cached copy of one session (eviction is about memory)."""
        with self._cache_guard:
            self._cache.pop(sid.int, None)

    def clear(self) -> None:
        """Drop every cached session (after an import, say)."""
        with self._cache_guard:
            self._cache.clear()

    # --------------------------------------------------------------- loads
    def load(self, sid: UUID, *, fresh: bool = True) -> Session | None:
        """The session (the caller holds its lock), from the cache or the store.

        With ``fresh`` a cached session is fast-forwarded past events other
        processes appended. Writes pass ``fresh=False``: a stale copy cannot be
        recorded anyway (the append conflicts on its version, and the write is
        re-applied to a reloaded session).
        """
        session = self._cached(sid)
        if session is None:
            try:
                session = self.store.load(sid)
            except AggregateNotFoundError:
                return None
            self._remember(sid, session)
            return session
        if fresh:
            self.store.fast_forward(session)
        return session

    def require(self, target: Target) -> Session:
        """The session ``target`` names (the caller holds its lock), or ``UnknownSession``."""
        session = self.load(target.session_id)
        if session is None:
            raise UnknownSession(unknown(target.key, target.tenant))
        session.require_present()  # a deleted session is no session
        return session

    def current(self, target: Target) -> Session:
        """A private copy of the session as it is now (for views)."""
        with self.lock(target.session_id):
            session = self.require(target)
            return Session.from_state(session.id, session.version, session.to_state())

    def read(
        self,
        target: Target,
        render: Callable[[Session], R],
        at_version: int | None = None,
        at_time: datetime | None = None,
    ) -> R:
        """``render`` of the session now (under its lock, so no copy is made: a long
        buffer is not copied on every read) or as it was at a version or a moment."""
        if at_version is None and at_time is None:
            with self.lock(target.session_id):
                return render(self.require(target))
        return render(self.as_of(target, at_version, at_time))

    def as_of(
        self, target: Target, at_version: int | None = None, at_time: datetime | None = None
    ) -> Session:
        """The session as it was at a version or a moment (now, if neither is given)."""
        if at_version is not None and at_time is not None:
            raise InvalidInput("Pass at_version or at_time, not both.")
        sid, key = target.session_id, target.key
        if at_time is not None:
            check_aware(at_time, "at_time")
            at_version = self.store.event_recorder.version_at(sid, to_micros(at_time))
            if at_version is None:
                raise UnknownSession(f"Session {key!r} did not exist yet at {at_time}.")
        if at_version is None:
            return self.current(target)
        check_int(at_version, "at_version", minimum=1)
        try:
            session = self.store.load(sid, at_version)
        except AggregateNotFoundError:
            raise UnknownSession(unknown(key, target.tenant)) from None
        if session.version < at_version:
            raise InvalidInput(
                f"Session {key!r} has only {session.version} versions; "
                f"at_version {at_version} does not exist yet."
            )
        if session.deleted:
            raise UnknownSession(
                f"Session {key!r} was deleted at version {at_version} (an earlier version "
                "shows it as it was)."
            )
        first = self.visible_from(target)
        if at_version < first:
            raise UnknownSession(
                f"Version {at_version} of session {key!r} belongs to an incarnation deleted "
                f"since (the current one began at version {first}); only an admin reads "
                "deleted incarnations (audit)."
            )
        return session

    def visible_from(self, target: Target) -> int:
        """The first version the requester may read: 1 for an admin (audit) or a session
        never deleted; else the version that began its current incarnation (while it is
        deleted, its ``Deleted``)."""
        if target.audit:
            return 1
        with self.lock(target.session_id):
            try:
                head = self.load(target.session_id)  # cached and fast-forwarded: fresh
            except StoreUnavailable:  # a stream that cannot be loaded whole: ask its rows
                return incarnation_start(self.store, target.session_id)
        return max(1, head.incarnation) if head is not None else 1

    def exists(self, sid: UUID) -> bool:
        return bool(list(self.store.events.get(sid, limit=1)))

    def events(
        self, sid: UUID, *, gt: int | None = None, lte: int | None = None, limit: int | None = None
    ) -> list[SessionEvent]:
        """A session's recorded events in version order (decoded)."""
        found: list[SessionEvent] = list(
            self.store.events.get(sid, gt=gt, lte=lte, limit=limit)  # type: ignore[arg-type]
        )
        return found

    def decode(self, stored: StoredEvent) -> Any:
        """The domain event of a stored row."""
        return self.store.mapper.to_domain_event(stored)

    def recorded_write(self, sid: UUID, idempotency_key: str, reach: int = 1) -> list[KeyedRow]:
        """The rows (at most ``reach``) of the write recorded with ``idempotency_key`` in the
        session, empty if none; the caller holds its lock. A write's rows are consecutive
        versions of one moment and, on PostgreSQL, one transaction. ``SessionErased`` if the
        session was erased since: erased content cannot answer a retry."""
        rows = self.store.event_recorder.keyed_rows(sid, idempotency_key, reach)
        write = rows[:1]
        for row in rows[1:]:
            last = write[-1]
            if (row.version, row.tx, _moment(row)) != (last.version + 1, last.tx, _moment(last)):
                break  # a later write's
            write.append(row)
        session = self.load(sid) if write else None
        if session is not None and session.erased:
            raise SessionErased(
                f"Session {session.key!r} was erased after the write under idempotency key "
                f"{idempotency_key!r} was recorded: its content is gone and it takes no more "
                "writes. Start a new session under another key. Nothing was recorded."
            )
        return write

    # -------------------------------------------------------------- writes
    def write(
        self,
        sid: UUID,
        apply: Callable[[Session], R],
        *,
        create: Callable[[], Session] | None = None,
        idempotency_key: str | None = None,
        reach: int = 1,
        expected_version: int | None = None,
    ) -> Written[R]:
        """Apply a change and record its events atomically, re-applying on conflicts.

        A version conflict means another writer (another thread, ledger or
        process) appended first: reload and re-apply, after a short random
        back-off that grows with each conflict. With ``idempotency_key`` each
        attempt first looks for a write recorded with that key (a retry after an
        unknown outcome, or a racing duplicate whose insert collided on the key)
        and raises ``AlreadyRecorded`` with its first ``reach`` rows. With
        ``expected_version`` the session must be at exactly that version (read
        fresh), else ``ConcurrencyConflict`` and nothing is recorded.
        """
        deadline = time.monotonic() + self.busy_timeout
        attempts = 0
        with self.lock(sid):
            while attempts < _MIN_WRITE_ATTEMPTS or time.monotonic() < deadline:
                attempts += 1
                if idempotency_key is not None:
                    recorded = self.recorded_write(sid, idempotency_key, reach)
                    if recorded:
                        raise AlreadyRecorded(recorded)
                # A cached copy needs no fast-forward: a stale one conflicts on append.
                cached = None if expected_version is not None else self._cached(sid)
                session = (
                    cached if cached is not None
                    else self.load(sid, fresh=expected_version is not None)
                )  # fmt: skip
                if expected_version is not None:
                    check_expected(session, expected_version)
                if session is None:
                    if create is None:
                        raise UnknownSession(
                            "That session does not exist; add a message to start it."
                        )
                    session = create()
                try:
                    if idempotency_key is not None:
                        session.key_write(idempotency_key)
                    outcome = apply(session)
                    positions = self.store.record(session)
                except IntegrityError:
                    self.forget(sid)  # another writer got there first: reload, re-apply
                    if logger.isEnabledFor(logging.DEBUG):
                        logger.debug("version conflict on session %s; retry %d", sid, attempts)
                    time.sleep(random.uniform(0, min(0.05, 0.0005 * 2**attempts)))
                    continue
                except BaseException:
                    self.forget(sid)  # the object may hold unrecorded changes
                    raise
                if session is not cached:
                    self._remember(sid, session)
                return Written(outcome, positions, session, session.version, session.pending_tokens)
        raise self._gave_up(attempts)

    def write_together(self, parts: Sequence[Part]) -> list[Written[Any]]:
        """Write several sessions in one transaction: every part's events, or none.

        The first part is the session the caller writes (a keyed write is looked up
        in its stream); the others are streams that must change with it (shared
        state scopes). Locks are taken in a
        fixed order (by id), so two such writes never deadlock; a conflict on
        any stream reloads all and re-applies all.
        """
        deadline = time.monotonic() + self.busy_timeout
        attempts = 0
        locks = [self.lock(sid) for sid in sorted({part.sid for part in parts}, key=str)]
        for held in locks:
            held.__enter__()
        try:
            while attempts < _MIN_WRITE_ATTEMPTS or time.monotonic() < deadline:
                attempts += 1
                sessions: list[Session] = []
                first = parts[0]  # the caller's session: where the write's key is looked up
                if first.idempotency_key is not None:
                    recorded = self.recorded_write(first.sid, first.idempotency_key, first.reach)
                    if recorded:
                        raise AlreadyRecorded(recorded)
                for part in parts:
                    session = self.load(part.sid, fresh=part.expected_version is not None)
                    if part.expected_version is not None:
                        check_expected(session, part.expected_version)
                    if session is None:
                        if part.create is None:
                            raise UnknownSession(
                                "That session does not exist; add a message to start it."
                            )
                        session = part.create()
                    sessions.append(session)
                try:
                    outcomes = []
                    for part, session in zip(parts, sessions, strict=True):
                        if part.idempotency_key is not None:
                            session.key_write(part.idempotency_key)
                        outcomes.append(part.apply(session))
                    positions = self.store.record_together(sessions)
                except IntegrityError:
                    for part in parts:
                        self.forget(part.sid)
                    time.sleep(random.uniform(0, min(0.05, 0.0005 * 2**attempts)))
                    continue
                except BaseException:
                    for part in parts:
                        self.forget(part.sid)
                    raise
                for part, session in zip(parts, sessions, strict=True):
                    self._remember(part.sid, session)
                return [
                    Written(outcome, pos, session, session.version, session.pending_tokens)
                    for outcome, pos, session in zip(outcomes, positions, sessions, strict=True)
                ]
        finally:
            for held in reversed(locks):
                held.__exit__(None, None, None)
        raise self._gave_up(attempts)

    def _gave_up(self, attempts: int) -> ConcurrencyConflict:
        logger.warning(
            "gave up a write after %d version conflicts in %gs", attempts, self.busy_timeout
        )
        return ConcurrencyConflict(
            f"Gave up after {attempts} version conflicts with other writers in "
            f"{self.busy_timeout:g}s (setting busy_timeout); retry later."
        )


@dataclass(frozen=True)
class Part:
    """One stream of a ``write_together``: what ``write`` takes for one session."""

    sid: UUID
    apply: Callable[[Session], Any]
    create: Callable[[], Session] | None = None
    # The key the part's events carry; only the first part's is looked up (the write's).
    idempotency_key: str | None = None
    reach: int = 1
    expected_version: int | None = None


def _moment(row: KeyedRow) -> int | None:
    return getattr(row.stored, "timestamp_us", None)


def check_expected(session: Session | None, expected_version: int) -> None:
    """``ConcurrencyConflict`` unless the session is at ``expected_version`` (0: not yet
    started)."""
    check_int(expected_version, "expected_version")
    found = 0 if session is None else session.version
    if found != expected_version:
        raise ConcurrencyConflict(
            f"The session is at version {found}, not the expected {expected_version} "
            "(another writer changed it); read it again. Nothing was recorded."
        )
