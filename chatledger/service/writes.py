"""Recording messages and lifecycle events: one write each, keyed writes replayed.

``record_messages`` appends messages (starting the session on first use) in
one transaction; ``record`` runs any other single-session write (close, evict,
get-or-create). A write made with an idempotency key that was recorded before
returns what it returned then, rebuilt from the stored rows, and records
nothing -- if it asks for the same write (``service.retries``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from chatledger.domain.access import Target
from chatledger.domain.events import Closed, Evicted
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.session import Session
from chatledger.domain.values import ClientContext, EvictionReason, Message, Principal, assemble
from chatledger.results import AddedMessage, SessionView
from chatledger.service import retries
from chatledger.service.sessions import AlreadyRecorded, SessionStore, Written


def record_messages(
    sessions: SessionStore,
    principal: Principal,
    target: Target,
    messages: list[Message],
    now: datetime,
    context: ClientContext | None,
    idempotency_key: str | None,
) -> list[AddedMessage]:
    """Append ``messages`` to the session (started with ``context`` if new), all or none."""

    def apply(session: Session) -> list[tuple[int, str]]:
        if session.deleted:
            session.restart_if_deleted(context, actor=principal, timestamp=now)
        return recorded_messages(session, messages, principal, now)

    def create() -> Session:
        return Session.start(
            tenant=target.tenant, key=target.key, actor=principal, timestamp=now, context=context
        )

    reach = len(messages) + 3  # a Started and a Reactivated may come first; one more ends it
    try:
        written = sessions.write(
            target.session_id,
            apply,
            create=create,
            idempotency_key=idempotency_key,
            reach=reach,
        )
    except AlreadyRecorded as done:  # a retry: what the first call returned, if it is the same
        return retries.added_again(sessions, done.rows, messages, now, reach=reach, context=context)
    return added(written)


def recorded_messages(
    session: Session, messages: list[Message], principal: Principal, now: datetime
) -> list[tuple[int, str]]:
    """Record ``messages`` in ``session``: the version and id of each."""
    recorded = []
    for message in messages:
        message_id = session.add_message(message, actor=principal, timestamp=now)
        recorded.append((session.version, message_id))
    return recorded


def added(written: Written[list[tuple[int, str]]]) -> list[AddedMessage]:
    """What a write of messages returns: each one's id, version and position (the write's
    outcome: the version and id of each), and the session's pending tokens after the
    write (values the write just made, so built without validating them again)."""
    positions = written.positions
    first = written.version - len(positions) + 1  # the versions of the write's events
    pending = written.pending_tokens  # (not the session's now: other threads write to it)
    results = []
    for version, message_id in written.outcome:
        index = version - first
        fields = {"message_id": message_id, "version": version, "pending_tokens": pending}
        fields["position"] = positions[index] if 0 <= index < len(positions) else 0
        results.append(assemble(AddedMessage, fields))
    return results


def record(
    sessions: SessionStore,
    target: Target,
    apply: Callable[[Session], None],
    *,
    same: Callable[[SessionEvent], bool],
    idempotency_key: str | None,
    view: Callable[[Session], SessionView],
    expected_version: int | None = None,
) -> SessionView:
    """One single-event write of an existing session; the view after it. A retry gets the
    view after the recorded write if ``same`` says its event is the one asked for again."""
    try:
        written = sessions.write(
            target.session_id,
            apply,
            idempotency_key=idempotency_key,
            expected_version=expected_version,
        )
    except AlreadyRecorded as done:
        retries.first_event(sessions, done.rows, same)
        return view(sessions.store.load(target.session_id, done.rows[0].version))
    return view(written.session)


def get_or_create(
    sessions: SessionStore,
    principal: Principal,
    target: Target,
    context: ClientContext | None,
    now: Callable[[], datetime],
) -> tuple[Session, bool]:
    """The session ``target`` names, started (with ``context``) if it does not exist; and
    whether this call started it. Racing creators end with one session: the loser's
    append conflicts on version 1, it reloads, and finds the winner's."""
    with sessions.lock(target.session_id):
        existing = sessions.load(target.session_id)
        if existing is not None and not existing.deleted:
            return existing, False
    moment = now()

    def created(session: Session) -> bool:
        if session.deleted:  # its key starts afresh
            session.restart_if_deleted(context, actor=principal, timestamp=moment)
            return True
        return session.version == 1 and bool(session.pending_events)

    def create() -> Session:
        return Session.start(
            tenant=target.tenant, key=target.key, actor=principal, timestamp=moment,
            context=context,
        )  # fmt: skip

    written = sessions.write(target.session_id, created, create=create)
    return written.session, written.outcome


def close(
    sessions: SessionStore,
    principal: Principal,
    target: Target,
    now: datetime,
    idempotency_key: str | None,
    view: Callable[[Session], SessionView],
    expected_version: int | None = None,
) -> SessionView:
    """Record ``Closed``; the session leaves this process's cache too."""

    def apply(session: Session) -> None:
        session.close(actor=principal, timestamp=now)

    closed = record(
        sessions, target, apply, same=lambda event: isinstance(event, Closed),
        idempotency_key=idempotency_key, view=view, expected_version=expected_version,
    )  # fmt: skip
    sessions.forget(target.session_id)
    return closed


def evict(
    sessions: SessionStore,
    principal: Principal,
    target: Target,
    reason: EvictionReason,
    idle_seconds: float | None,
    now: datetime,
    idempotency_key: str | None,
    view: Callable[[Session], SessionView],
    expected_version: int | None = None,
) -> SessionView:
    """Record ``Evicted``; eviction is about memory, so the cached copy goes too."""

    def apply(session: Session) -> None:
        session.evict(reason, idle_seconds=idle_seconds, actor=principal, timestamp=now)

    def same(event: SessionEvent) -> bool:
        return (
            isinstance(event, Evicted)
            and event.reason == reason
            and event.idle_seconds == idle_seconds
        )

    evicted = record(
        sessions, target, apply, same=same, idempotency_key=idempotency_key, view=view,
        expected_version=expected_version,
    )  # fmt: skip
    sessions.forget(target.session_id)
    return evicted
