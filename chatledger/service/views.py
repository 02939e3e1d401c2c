"""Views of a session: what callers get back, built from a loaded ``Session``.

Pure mapping from aggregate state to the frozen result types of
``chatledger.results``; nothing here loads or records.
"""

from __future__ import annotations

from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.session import Session
from chatledger.domain.values import estimate_tokens
from chatledger.results import ContextView, Counters, LedgerEvent, SessionView


def session_view(session: Session, compress_threshold: int) -> SessionView:
    """The whole session as a ``SessionView``."""
    return SessionView(
        session_id=session.id,
        tenant=session.tenant,
        key=session.key,
        version=session.version,
        context=session.context,
        created_at=session.created_on,
        updated_at=session.updated_at,
        message_count=session.message_count,
        commit_count=session.commit_count,
        last_commit_at=session.last_commit_at,
        archive_count=len(session.archives),
        evicted=session.evicted,
        status=session.status,
        buffer=tuple(session.buffer.values()),
        archives=tuple(session.archives),
        pending_tokens=session.pending_tokens,
        turn_count=session.turn_count,
        should_compress=session.should_compress(compress_threshold),
        state=dict(session.state),
        task=session.task,
        watermark=session.watermark,
        extraction_summary=session.extraction_summary,
        pending_compaction=session.pending_compaction,
    )


def context_view(session: Session, token_budget: int) -> ContextView:
    """The prompt context: the latest archive's summary plus the newest live messages that fit."""
    remaining = token_budget
    archive = session.archives[-1] if session.archives else None
    overview = abstract = ""
    if archive is not None:
        cost = estimate_tokens(archive.overview + archive.abstract)
        if cost <= remaining:
            overview, abstract = archive.overview, archive.abstract
            remaining -= cost
        else:
            archive = None
    # Of a buffer replayed unbuilt, only the messages kept are built.
    kept, used = session.newest_within(remaining)
    remaining -= used
    return ContextView(
        key=session.key,
        version=session.version,
        token_budget=token_budget,
        archive_id=archive.archive_id if archive else None,
        overview=overview,
        abstract=abstract,
        messages=tuple(kept),
        tokens=token_budget - remaining,
        dropped_messages=session.buffer_size - len(kept),
    )


def counters(session: Session) -> Counters:
    """The session's counters at its version."""
    return Counters(
        version=session.version,
        message_count=session.message_count,
        commit_count=session.commit_count,
        archive_count=len(session.archives),
        buffer_size=session.buffer_size,
        pending_tokens=session.pending_tokens,
        turn_count=session.turn_count,
    )


def ledger_event(key: str, event: SessionEvent) -> LedgerEvent:
    """One recorded event with who caused it and when."""
    return LedgerEvent(
        key=key,
        version=event.originator_version,
        type=type(event).__name__,
        timestamp=event.timestamp,
        actor=event.actor,
        event=event,
    )
