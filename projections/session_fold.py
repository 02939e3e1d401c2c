"""All per-session folds together: the state of a session as of any prefix of its events.

``project(events[:n])`` is the session as of version ``n``; this is what time
travel and the consistency checks against the aggregate rely on.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from chatledger.domain.eventsourced import SessionEvent
from chatledger.projections.archive_history import ArchiveHistory, fold_archive_history
from chatledger.projections.buffer import Buffer, fold_buffer
from chatledger.projections.session_meta import SessionMeta, fold_session_meta


class SessionProjection(BaseModel):
    """The buffer, the archive history and the meta of one session."""

    model_config = ConfigDict(frozen=True)

    buffer: Buffer = Buffer()
    archives: ArchiveHistory = ArchiveHistory()
    meta: SessionMeta = SessionMeta()


def fold_session(state: SessionProjection, event: SessionEvent) -> SessionProjection:
    """The projection after ``event``."""
    return SessionProjection(
        buffer=fold_buffer(state.buffer, event),
        archives=fold_archive_history(state.archives, event),
        meta=fold_session_meta(state.meta, event),
    )


def project(events: Iterable[SessionEvent]) -> SessionProjection:
    """Fold a session's events, oldest first, from the empty state."""
    state = SessionProjection()
    for event in events:
        state = fold_session(state, event)
    return state
