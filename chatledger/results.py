"""Typed, frozen results returned by ``SessionLedger`` (never bare dicts)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.values import ArchiveSummary, ClientContext, Message, Principal

CommitStatus = Literal["completed", "failed", "processing", "skipped"]
TaskStatus = Literal["processing", "completed", "failed"]


class Result(BaseModel):
    model_config = ConfigDict(frozen=True)


class AddedMessage(Result):
    """A recorded message: its id, the session version it made, the pending tokens."""

    message_id: str
    version: int
    pending_tokens: int
    position: int


class SessionView(Result):
    """A session as of one version: meta, live buffer and live archives."""

    session_id: UUID
    tenant: str
    key: str
    version: int
    context: ClientContext
    created_at: datetime
    updated_at: datetime
    message_count: int
    commit_count: int
    last_commit_at: datetime | None
    archive_count: int
    evicted: bool
    buffer: tuple[Message, ...]
    archives: tuple[ArchiveSummary, ...]
    pending_tokens: int
    turn_count: int
    should_compress: bool


class ContextView(Result):
    """The prompt context: the latest archive's summary plus the live messages that fit."""

    key: str
    version: int
    token_budget: int
    archive_id: str | None
    overview: str
    abstract: str
    messages: tuple[Message, ...]
    tokens: int
    dropped_messages: int


class CommitResult(Result):
    """Outcome of a commit: archived or not, and why."""

    status: CommitStatus
    archived: bool = False
    archive_id: str | None = None
    task_id: str | None = None
    reason: str | None = None
    error: str | None = None
    message_ids: tuple[str, ...] = ()


class CommitTask(Result):
    """A commit started with ``wait=False``, as seen now."""

    task_id: str
    key: str
    status: TaskStatus
    result: CommitResult | None = None


class MergeResult(Result):
    """Outcome of an archive merge."""

    merged: bool
    archive_id: str | None = None
    source_archive_ids: tuple[str, ...] = ()
    reason: str | None = None
    error: str | None = None


class LedgerEvent(Result):
    """One recorded event of a session, with who caused it and when."""

    key: str
    version: int
    type: str
    timestamp: datetime
    actor: Principal
    event: SessionEvent
