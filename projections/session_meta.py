"""Fold: a session's identity, counters and timestamps."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from chatledger.domain.events import (
    ArchiveMerged,
    Closed,
    Committed,
    Deleted,
    Evicted,
    Forked,
    ItemsRemoved,
    MessageAdded,
    Reactivated,
    Restarted,
    Started,
    StateChanged,
    TailReplaced,
)
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.values import ClientContext


class SessionMeta(BaseModel):
    """What a session is and how far it has come, as of one version."""

    model_config = ConfigDict(frozen=True)

    session_id: UUID | None = None
    tenant: str = ""
    key: str = ""
    context: ClientContext = ClientContext()
    version: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None
    message_count: int = 0
    commit_count: int = 0
    last_commit_at: datetime | None = None
    archive_count: int = 0
    evicted: bool = False


def fold_session_meta(state: SessionMeta, event: SessionEvent) -> SessionMeta:
    """The session meta after ``event``."""
    changes: dict[str, object] = {"version": event.originator_version}
    if isinstance(event, Started | Forked):
        changes.update(
            session_id=event.originator_id,
            tenant=event.tenant,
            key=event.key,
            context=event.context,
            created_at=event.timestamp,
            updated_at=event.timestamp,
        )
    if isinstance(event, Forked):
        changes.update(
            message_count=event.message_count,
            commit_count=event.commit_count,
            last_commit_at=event.last_commit_at,
            archive_count=len(event.archives),
        )
    elif isinstance(event, MessageAdded):
        changes.update(
            message_count=state.message_count + 1, updated_at=event.timestamp, evicted=False
        )
    elif isinstance(event, Committed):
        changes.update(
            commit_count=state.commit_count + 1,
            archive_count=state.archive_count + 1,
            last_commit_at=event.timestamp,
            updated_at=event.timestamp,
        )
    elif isinstance(event, ArchiveMerged):
        changes.update(
            archive_count=state.archive_count - len(set(event.source_archive_ids)) + 1,
            updated_at=event.timestamp,
        )
    elif isinstance(event, Evicted | Closed):
        changes.update(evicted=True, updated_at=event.timestamp)
    elif isinstance(event, Reactivated):
        changes.update(evicted=False, updated_at=event.timestamp)
    elif isinstance(event, TailReplaced):
        changes.update(
            message_count=state.message_count + len(event.messages), updated_at=event.timestamp
        )
    elif isinstance(event, Deleted):
        changes.update(
            message_count=0, commit_count=0, archive_count=0, last_commit_at=None,
            evicted=False, updated_at=event.timestamp,
        )  # fmt: skip
    elif isinstance(event, Restarted):
        changes.update(context=event.context, updated_at=event.timestamp)
    elif isinstance(event, ItemsRemoved | StateChanged):
        changes.update(updated_at=event.timestamp)
    return state.model_copy(update=changes)
