"""Looking back and branching off: what changed between versions, and forks.

``diff`` reads the events between two versions of a session and the session
as it was at both ends; ``fork`` starts a new session whose first event,
``Forked``, names the origin and version and carries the origin's state as it
was then. The origin is never touched.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from chatledger.domain.access import Target
from chatledger.domain.events import (
    ArchiveMerged,
    CommitFailed,
    Committed,
    Forked,
    ItemsRemoved,
    MessageAdded,
    TailReplaced,
)
from chatledger.domain.failures import InvalidInput
from chatledger.domain.limits import check_int
from chatledger.domain.session import Session
from chatledger.domain.values import Principal
from chatledger.results import FailedCommit, MergeRecord, SessionDiff, SessionView
from chatledger.service import retries
from chatledger.service.sessions import AlreadyRecorded, SessionStore
from chatledger.service.views import counters


def diff(sessions: SessionStore, target: Target, from_version: int, to_version: int) -> SessionDiff:
    """What changed in the session after ``from_version`` up to ``to_version``."""
    check_int(from_version, "from_version", minimum=1)
    check_int(to_version, "to_version", minimum=1)
    if from_version > to_version:
        raise InvalidInput("from_version must not be after to_version.")
    before = sessions.as_of(target, from_version)
    after = sessions.as_of(target, to_version)
    events = sessions.events(target.session_id, gt=from_version, lte=to_version)
    added = [
        m
        for e in events
        for m in ((e.message,) if isinstance(e, MessageAdded) else getattr(e, "messages", ()))
        if isinstance(e, MessageAdded | TailReplaced)
    ]
    known = {m.id: m for m in (*before.buffer.values(), *added)}
    removed = [
        known[i]
        for e in events
        if isinstance(e, ItemsRemoved | TailReplaced)
        for i in (e.message_ids if isinstance(e, ItemsRemoved) else e.removed_ids)
        if i in known
    ]
    return SessionDiff(
        key=target.key,
        from_version=from_version,
        to_version=to_version,
        messages_added=tuple(added),
        messages_removed=tuple(removed),
        commits=tuple(e.archive for e in events if isinstance(e, Committed)),
        merges=tuple(
            MergeRecord(
                version=e.originator_version,
                archive=e.archive,
                source_archive_ids=e.source_archive_ids,
            )
            for e in events
            if isinstance(e, ArchiveMerged)
        ),
        failed_commits=tuple(
            FailedCommit(
                version=e.originator_version,
                attempt_id=e.attempt_id,
                error=e.error,
                message_count=e.message_count,
            )
            for e in events
            if isinstance(e, CommitFailed)
        ),
        event_types=tuple(type(e).__name__ for e in events),
        before=counters(before),
        after=counters(after),
    )


def fork(
    sessions: SessionStore,
    principal: Principal,
    origin: Target,
    at_version: int,
    new: Target,
    *,
    now: datetime,
    idempotency_key: str | None,
    view: Callable[[Session], SessionView],
) -> SessionView:
    """Start ``new`` as a copy of ``origin`` at ``at_version`` (a ``Forked`` event)."""
    if new.session_id == origin.session_id:
        raise InvalidInput("A fork needs a new key, different from the origin's.")
    copied = sessions.as_of(origin, at_version)
    with sessions.lock(origin.session_id):
        latest = sessions.load(origin.session_id)
    if latest is not None:
        latest.require_writable()  # erased since: there is no content left to copy

    def refuse_existing(session: Session) -> None:
        if not session.pending_events:
            raise InvalidInput(
                f"Session {new.key!r} already exists; fork into a key that is not in use."
            )

    def create() -> Session:
        return Session.fork(copied, key=new.key, actor=principal, timestamp=now)

    try:
        written = sessions.write(
            new.session_id, refuse_existing, create=create, idempotency_key=idempotency_key
        )
    except AlreadyRecorded as done:  # a retry: the fork recorded, if it is the same
        retries.first_event(
            sessions, done.rows,
            lambda e: isinstance(e, Forked) and e.origin_session_id == origin.session_id
            and e.origin_version == copied.version,
        )  # fmt: skip
        return view(sessions.store.load(new.session_id, done.rows[0].version))
    return view(written.session)
