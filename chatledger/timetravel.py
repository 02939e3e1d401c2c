"""Looking back and branching off: what changed between versions, and forks.

``diff`` reads the events between two versions of a session and the session
as it was at both ends; ``fork`` starts a new session whose first event,
``Forked``, names the origin and version and carries the origin's state as it
was then. The origin is never touched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chatledger.domain.errors import InvalidInput
from chatledger.domain.events import ArchiveMerged, CommitFailed, Committed, Forked, MessageAdded
from chatledger.domain.limits import check_int
from chatledger.domain.session import Session
from chatledger.domain.values import Principal
from chatledger.results import Counters, FailedCommit, MergeRecord, SessionDiff, SessionView

if TYPE_CHECKING:
    from chatledger.ledger import SessionLedger


def _counters(session: Session) -> Counters:
    return Counters(
        version=session.version,
        message_count=session.message_count,
        commit_count=session.commit_count,
        archive_count=len(session.archives),
        buffer_size=len(session.buffer),
        pending_tokens=session.pending_tokens,
        turn_count=session.turn_count,
    )


def diff(
    ledger: SessionLedger,
    principal: Principal,
    key: str,
    from_version: int,
    to_version: int,
    account_id: str | None,
) -> SessionDiff:
    check_int(from_version, "from_version", minimum=1)
    check_int(to_version, "to_version", minimum=1)
    if from_version > to_version:
        raise InvalidInput("from_version must not be after to_version.")
    _, key, sid = ledger._target(principal, key, account_id)
    before = ledger._load_as_of(sid, key, from_version, None)
    after = ledger._load_as_of(sid, key, to_version, None)
    events = list(ledger._app.events.get(sid, gt=from_version, lte=to_version))
    return SessionDiff(
        key=key,
        from_version=from_version,
        to_version=to_version,
        messages_added=tuple(e.message for e in events if isinstance(e, MessageAdded)),
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
        before=_counters(before),
        after=_counters(after),
    )


def fork(
    ledger: SessionLedger,
    principal: Principal,
    key: str,
    at_version: int,
    new_key: str,
    account_id: str | None,
    idempotency_key: str | None = None,
) -> SessionView:
    tenant, key, sid = ledger._target(principal, key, account_id)
    _, new_key, new_sid = ledger._target(principal, new_key, tenant)
    if new_sid == sid:
        raise InvalidInput("A fork needs a new key, different from the origin's.")
    origin = ledger._load_as_of(sid, key, at_version, None)
    now = ledger._now()

    def refuse_existing(session: Session) -> None:
        if not session.pending_events:
            raise InvalidInput(
                f"Session {new_key!r} already exists; fork into a key that is not in use."
            )

    def create() -> Session:
        return Session.fork(origin, key=new_key, actor=principal, timestamp=now)

    from chatledger.ledger import _AlreadyRecorded  # the ledger imports this module

    try:
        _, _, forked = ledger._write(
            new_sid, refuse_existing, create=create, idempotency_key=idempotency_key
        )
    except _AlreadyRecorded as done:
        return ledger._view_recorded(new_sid, done.rows, Forked)
    return ledger._view(forked)
