"""Typed, frozen results returned by ``SessionLedger`` (never bare dicts)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.session import SessionStatus
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
    evicted: bool  # out of the working set: evicted or closed
    status: SessionStatus
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


class Counters(Result):
    """The counters of a session at one version."""

    version: int
    message_count: int
    commit_count: int
    archive_count: int
    buffer_size: int
    pending_tokens: int
    turn_count: int


class MergeRecord(Result):
    """An archive merge seen in a diff."""

    version: int
    archive: ArchiveSummary
    source_archive_ids: tuple[str, ...]


class FailedCommit(Result):
    """A failed commit attempt seen in a diff."""

    version: int
    attempt_id: str
    error: str
    message_count: int


class SessionDiff(Result):
    """What changed in a session between two versions (``from_version`` excluded)."""

    key: str
    from_version: int
    to_version: int
    messages_added: tuple[Message, ...]
    commits: tuple[ArchiveSummary, ...]
    merges: tuple[MergeRecord, ...]
    failed_commits: tuple[FailedCommit, ...]
    event_types: tuple[str, ...]
    before: Counters
    after: Counters


class VerifyIssue(Result):
    """The first broken link of one session's hash chain (or a forged snapshot)."""

    session_id: UUID
    tenant: str | None
    key: str | None
    version: int
    position: int | None
    reason: str
    expected: str
    found: str


class ChainHead(Result):
    """The newest event of a session's chain: anchor these outside the database."""

    session_id: UUID
    tenant: str | None
    key: str | None
    version: int
    hash: str


class VerifyReport(Result):
    """Outcome of recomputing hash chains: ``ok`` when nothing is broken."""

    ok: bool
    sessions_checked: int
    events_checked: int
    snapshots_checked: int
    issues: tuple[VerifyIssue, ...]
    heads: tuple[ChainHead, ...] = ()


class ImportResult(Result):
    """What ``import_`` recorded."""

    sessions: int
    events: int
