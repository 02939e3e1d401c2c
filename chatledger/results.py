"""Typed, frozen results returned by ``SessionLedger`` and ``ReadModels`` (never bare dicts)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.session import SessionStatus
from chatledger.domain.values import (
    ArchiveSummary,
    ClientContext,
    CompactionToken,
    Message,
    Principal,
    TaskState,
)

CommitStatus = Literal["completed", "failed", "processing", "skipped"]
WorkingSetOrder = Literal["last_activity", "created", "key", "pending_tokens"]
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
    state: dict[str, Any] = Field(default_factory=dict)  # the session's key-value state
    task: TaskState = TaskState()  # the agent's working state
    watermark: int = 0  # live items a background extractor has read
    extraction_summary: str = ""
    pending_compaction: CompactionToken | None = None


class StateView(Result):
    """The key-value state of a session (or a shared state scope) at one version."""

    key: str
    version: int  # 0: nothing recorded yet
    state: dict[str, Any]


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

    def as_json(self) -> dict[str, Any]:
        """The event as JSON, in the one shape every output gives it (``log --json``, each
        line of an export, which adds what an import needs): ``key``, ``version``,
        ``type``, ``timestamp``, ``actor``, ``summary`` (one line for people) and
        ``event``, the whole event with every field (docs/audit.md)."""
        from chatledger.projections.describe import describe_event

        record = self.model_dump(mode="json", exclude={"event"})
        record["summary"] = describe_event(self.event)
        record["event"] = self.event.model_dump(mode="json")
        return record


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
    messages_removed: tuple[Message, ...] = ()  # left the buffer without being archived
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
    """Outcome of recomputing hash chains: ``ok`` when nothing is broken.

    ``deep``: whether every session was also replayed (its stored facts and
    snapshots compared with the events); without it only the chains, the
    identities, the naming facts and the snapshot versions were checked."""

    ok: bool
    deep: bool = False
    sessions_checked: int
    events_checked: int
    snapshots_checked: int
    issues: tuple[VerifyIssue, ...]
    heads: tuple[ChainHead, ...] = ()


class ImportResult(Result):
    """What ``import_`` recorded, and how many of the sessions read as erased: erased at the
    source (``erased_sessions``), or sealed with keys the file did not bring
    (``unreadable_sessions``, imported only with ``allow_missing_keys=True``)."""

    sessions: int
    events: int
    erased_sessions: int = 0
    unreadable_sessions: int = 0


class ErasureResult(Result):
    """What an erasure did (``erase``, ``erase_user``, ``erase_tenant``)."""

    scope: Literal["session", "user", "tenant"]
    account_id: str
    user_id: str | None = None
    erased: tuple[str, ...]  # keys of the sessions this call erased (one Erased each)
    already_erased: tuple[str, ...] = ()  # keys erased before: nothing recorded for them
    key_ids: tuple[str, ...] = ()  # the data keys destroyed
    snapshots_deleted: int = 0
    # Whether the key store also made the destroyed keys unrecoverable from its storage
    # (SQLite: free space zeroed, WAL truncated; PostgreSQL: key table rewritten). False:
    # the keys are destroyed, but old bytes may linger until the next erasure purges.
    purged: bool = True
    # Events whose content was stored unencrypted (written before encryption, or with
    # the setting ``encryption`` off): destroying keys cannot erase it (docs/erasure.md).
    unencrypted_events: int = 0


# ------------------------------------------------------- read-model rows
class WorkingSetEntry(Result):
    """One session of the working set: who started it, its counters, when it was last active."""

    session_id: UUID
    account_id: str
    user_id: str
    agent_id: str
    session_key: str
    created_at: datetime
    last_activity_at: datetime
    message_count: int
    pending_tokens: int
    turn_count: int
    commit_count: int
    archive_count: int
    last_commit_at: datetime | None
    status: SessionStatus
    version: int


class ArchiveEntry(Result):
    """One archive of a session, live or merged into another, with its lineage."""

    session_id: UUID
    account_id: str
    session_key: str
    archive_id: str
    overview: str
    abstract: str
    message_ids: tuple[str, ...]
    tokens: int
    created_at: datetime
    position: int
    version: int
    merged_into: str | None
    merged_from: tuple[str, ...]
    live: bool


class AuditEntry(Result):
    """One recorded event: where in the log, which session and version, who, when, what."""

    position: int
    session_id: UUID
    account_id: str
    session_key: str
    version: int
    event_type: str
    actor: Principal
    timestamp: datetime
    summary: str


class TimelineEntry(AuditEntry):
    """One event of a session, with the session's counters and status right after it."""

    message_count: int
    pending_tokens: int
    turn_count: int
    commit_count: int
    archive_count: int  # live archives
    last_commit_at: datetime | None
    status: SessionStatus
    tool_name: str | None  # the tool call a message reports, if any
    tool_status: str | None
    prompt_tokens: int
    completion_tokens: int


class ForkEntry(Result):
    """A session started as a fork of another: its key, and the origin's version it copies."""

    session_id: UUID
    account_id: str
    session_key: str
    origin_version: int
    created_at: datetime
    actor: Principal


class ToolUsage(Result):
    """Calls of one tool in one session, their outcomes and tokens."""

    session_id: UUID
    account_id: str
    session_key: str
    tool_name: str
    call_count: int
    success_count: int
    fail_count: int
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class SkippedEvent(Result):
    """An event a read model could not apply and skipped, so the log could go on."""

    model: str
    position: int
    error: str
    skipped_at: datetime
