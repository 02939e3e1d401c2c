"""The session events: the public contract of what can happen to a session.

Names and fields are stable (stored events name their class by module path, so
these classes must never move; see docs/concepts.md for the catalogue). Each
event's ``apply`` is replayed on every load: it only changes aggregate state,
never validates or performs I/O (validation happens in ``Session`` commands).
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter
from typing import Any, Literal

from pydantic import Field

from chatledger.domain.aggregate import SessionFields
from chatledger.domain.erased_forms import (
    erased_archive,
    erased_context,
    erased_message,
    erased_state,
    erased_task,
    erased_text,
)
from chatledger.domain.eventsourced import SessionCreationEvent, SessionEvent
from chatledger.domain.rules import merged_refs, with_merge
from chatledger.domain.values import (
    ArchiveSummary,
    ClientContext,
    CompactionToken,
    EvictionReason,
    Message,
    TaskState,
)


class Started(SessionCreationEvent):
    """A session was created for a tenant under a key, with the client's context."""

    tenant: str
    key: str
    context: ClientContext = ClientContext()

    def apply(self, aggregate: Any) -> None:
        _begin(aggregate, self)


def _begin(session: SessionFields, event: Started | Forked) -> None:
    """What every first event sets: identity, client context, who started it."""
    session.tenant = event.tenant
    session.key = event.key
    session.context = event.context
    session.updated_at = event.timestamp
    session.started_by = event.actor


class Forked(SessionCreationEvent):
    """A session was started as a copy of another session's state at one version.

    It names its origin (session id, key and version) and carries the origin's
    live buffer, live archives and counters as they were then; the origin's
    own stream is untouched.
    """

    tenant: str
    key: str
    context: ClientContext = ClientContext()
    origin_session_id: uuid.UUID
    origin_key: str
    origin_version: int
    buffer: tuple[Message, ...]
    archives: tuple[ArchiveSummary, ...]
    message_count: int
    commit_count: int
    last_commit_at: datetime | None
    state: dict[str, Any] = Field(default_factory=dict)
    task: TaskState = TaskState()
    watermark: int = 0
    extraction_summary: str = ""

    def apply(self, aggregate: Any) -> None:
        session: SessionFields = aggregate
        _begin(session, self)
        session.task = self.task
        session.watermark = self.watermark
        session.extraction_summary = self.extraction_summary
        session.set_buffer(self.buffer)
        session.archives = list(self.archives)
        session.archive_refs = [(self.originator_version, i) for i in range(len(self.archives))]
        session.message_count = self.message_count
        session.commit_count = self.commit_count
        session.last_commit_at = self.last_commit_at
        session.state = dict(self.state)


class MessageAdded(SessionEvent):
    """One message joined the live buffer."""

    message: Message

    def apply(self, aggregate: Any) -> None:
        session: SessionFields = aggregate
        message = self.message
        session.buffer[message.id] = message
        session.pending_tokens += message.tokens
        if message.role == "user":
            session.turn_count += 1
        session.message_count += 1
        session.evicted = session.closed = False
        session.updated_at = self.timestamp


class Committed(SessionEvent):
    """Exactly the messages named by the archive left the buffer, folded into it -- or, with
    ``kept``, were archived while they stay live (a snapshot archive)."""

    archive: ArchiveSummary
    kept: bool = False

    @property
    def message_ids(self) -> tuple[str, ...]:
        return self.archive.message_ids

    def apply(self, aggregate: Any) -> None:
        session: SessionFields = aggregate
        if not self.kept:
            _drop(session, self.archive.message_ids)
        session.archives.append(self.archive)
        if session.archive_refs is not None:
            session.archive_refs.append((self.originator_version, 0))
        session.commit_count += 1
        session.last_commit_at = self.timestamp
        session.updated_at = self.timestamp


class CommitFailed(SessionEvent):
    """A commit attempt failed; recorded for audit, it changes no state."""

    attempt_id: str
    error: str
    message_count: int

    def apply(self, aggregate: Any) -> None:
        # Deliberately nothing: a failed commit leaves buffer, archives and
        # counters exactly as they were (only the version moves on).
        return None


class ArchiveMerged(SessionEvent):
    """Several live archives were replaced by one merged archive."""

    archive: ArchiveSummary
    source_archive_ids: tuple[str, ...]

    def apply(self, aggregate: Any) -> None:
        session: SessionFields = aggregate
        if session.archive_refs is not None:
            session.archive_refs = merged_refs(
                session.archives,
                session.archive_refs,
                (self.originator_version, 0),
                self.source_archive_ids,
            )
        session.archives = with_merge(session.archives, self.archive, self.source_archive_ids)
        session.updated_at = self.timestamp


class Evicted(SessionEvent):
    """The session left the working set (idle TTL, LRU cap or an admin); history stays."""

    reason: EvictionReason
    idle_seconds: float | None = None

    def apply(self, aggregate: Any) -> None:
        session: SessionFields = aggregate
        session.evicted = True
        session.closed = False
        session.updated_at = self.timestamp


class Closed(SessionEvent):
    """The client closed the session: it leaves the working set like an eviction.

    Recorded after any live work on the session has unwound, so no write of
    the closed session can land after it; a later message reopens it.
    """

    def apply(self, aggregate: Any) -> None:
        session: SessionFields = aggregate
        session.evicted = session.closed = True
        session.updated_at = self.timestamp


class Reactivated(SessionEvent):
    """An evicted or closed session came back to the working set: a message arrived for it.

    Recorded just before that message, so who brought the session back and
    when is part of its history.
    """

    previous_status: Literal["evicted", "closed"]

    def apply(self, aggregate: Any) -> None:
        session: SessionFields = aggregate
        session.evicted = session.closed = False
        session.updated_at = self.timestamp


class ItemsRemoved(SessionEvent):
    """Live items left the buffer without being archived: removed by id, popped off the end,
    or the whole buffer cleared (``reason``). They stay in the history."""

    message_ids: tuple[str, ...]
    reason: Literal["remove", "pop", "clear"] = "remove"

    def apply(self, aggregate: Any) -> None:
        session: SessionFields = aggregate
        _drop(session, self.message_ids)
        session.updated_at = self.timestamp


class TailReplaced(SessionEvent):
    """The newest live items (``removed_ids``, the whole tail of the buffer) were replaced by
    ``messages`` in one step -- what framework-side compaction records."""

    removed_ids: tuple[str, ...]
    messages: tuple[Message, ...]

    def apply(self, aggregate: Any) -> None:
        session: SessionFields = aggregate
        _drop(session, self.removed_ids)
        for message in self.messages:
            session.buffer[message.id] = message
            session.pending_tokens += message.tokens
            if message.role == "user":
                session.turn_count += 1
        session.message_count += len(self.messages)
        session.updated_at = self.timestamp


class StateChanged(SessionEvent):
    """Keys of the session's state were set to new values (JSON), or removed."""

    changes: dict[str, Any]
    removed: tuple[str, ...] = ()

    def apply(self, aggregate: Any) -> None:
        session: SessionFields = aggregate
        session.state = {
            **{k: v for k, v in session.state.items() if k not in self.removed},
            **self.changes,
        }
        session.updated_at = self.timestamp


class Deleted(SessionEvent):
    """The session was deleted: its key starts afresh. Its live state (buffer, archives,
    counters, state) is gone from the session; its history stays (unless erased)."""

    def apply(self, aggregate: Any) -> None:
        session: SessionFields = aggregate
        session.set_buffer(())
        session.archives = []
        session.archive_refs = []
        session.message_count = session.commit_count = 0
        session.last_commit_at = None
        session.state = {}
        session.task = TaskState()
        session.watermark = 0
        session.extraction_summary = ""
        session.pending_compaction = None
        session.deleted = True
        session.evicted = session.closed = False
        session.incarnation = self.originator_version
        session.updated_at = self.timestamp


class Restarted(SessionEvent):
    """A deleted session's key was used again: the session starts afresh, with this context."""

    context: ClientContext = ClientContext()

    def apply(self, aggregate: Any) -> None:
        session: SessionFields = aggregate
        session.deleted = False
        session.context = self.context
        session.incarnation = self.originator_version
        session.updated_at = self.timestamp


class TaskStateChanged(SessionEvent):
    """The agent's working state (objective, active task, constraints, blockers, notes)."""

    task: TaskState

    def apply(self, aggregate: Any) -> None:
        session: SessionFields = aggregate
        session.task = self.task
        session.updated_at = self.timestamp


class ExtractionAdvanced(SessionEvent):
    """A background extractor has read the oldest ``watermark`` live items, and says what
    it found in ``summary``."""

    watermark: int
    summary: str

    def apply(self, aggregate: Any) -> None:
        session: SessionFields = aggregate
        session.watermark = self.watermark
        session.extraction_summary = self.summary
        session.updated_at = self.timestamp


class CompactionPrepared(SessionEvent):
    """An external compactor was handed a token; it must complete before ``expires_at``."""

    token: str
    expires_at: datetime
    message_count: int
    watermark: int

    def apply(self, aggregate: Any) -> None:
        session: SessionFields = aggregate
        session.pending_compaction = CompactionToken(
            token=self.token,
            prepared_at=self.timestamp,
            expires_at=self.expires_at,
            message_count=self.message_count,
            watermark=self.watermark,
        )
        session.updated_at = self.timestamp


class CompactionCleared(SessionEvent):
    """The pending compaction token is gone: consumed, expired, or given up."""

    token: str
    reason: Literal["completed", "expired", "cancelled"]

    def apply(self, aggregate: Any) -> None:
        session: SessionFields = aggregate
        session.pending_compaction = None
        session.updated_at = self.timestamp


class UsageImported(SessionEvent):
    """Tool usage totals from an earlier system, merged with the calls recorded here."""

    tool_name: str
    call_count: int
    success_count: int
    fail_count: int
    prompt_tokens: int
    completion_tokens: int
    source: str = ""

    def apply(self, aggregate: Any) -> None:
        return None  # the usage read model adds it up; the session itself does not change


class Erased(SessionEvent):
    """The session's content was erased: the data keys it was encrypted with were destroyed.

    From here on its content -- in this state and in every earlier event -- reads
    as ``ERASED``; ids, roles, actors, times, counters and the hash chain stay.
    ``scope`` says what was erased at once (this session, every session its user
    started, the whole account); ``key_ids`` names the destroyed keys. An erased
    session takes no more writes -- except after scope ``incarnation``: the content of
    the session since its last (re)start, erased as it is deleted (a ``Deleted``
    follows in the same write, and the key starts afresh as after any deletion).
    """

    scope: Literal["session", "user", "tenant", "incarnation"]
    key_ids: tuple[str, ...] = ()

    def apply(self, aggregate: Any) -> None:
        session: SessionFields = aggregate
        session.erased = self.scope != "incarnation"
        session.context = erased_context(session.context)
        session.set_buffer([erased_message(m) for m in session.buffer.values()])
        session.archives = [erased_archive(a) for a in session.archives]
        session.state = erased_state(session.state)
        session.task = erased_task(session.task)
        session.extraction_summary = erased_text(session.extraction_summary)
        session.updated_at = self.timestamp


_tokens = attrgetter("tokens")
_role = attrgetter("role")


def _drop(session: SessionFields, message_ids: tuple[str, ...]) -> None:
    session.drop_messages(message_ids)


def drop_built(session: SessionFields, message_ids: Sequence[str]) -> None:
    """``drop_messages`` on a buffer of built messages (``session.buffer``)."""
    buffer = session.buffer
    if session.watermark:  # items the extractor had read leave: its watermark moves down
        gone = set(message_ids)
        read = itertools.islice(buffer, session.watermark)
        below = sum(1 for m in read if m in gone)
        session.watermark -= below
    # In passes of C code: a commit drops every message of a long buffer.
    dropped = [m for m in map(buffer.pop, message_ids, itertools.repeat(None)) if m is not None]
    session.pending_tokens -= sum(map(_tokens, dropped))
    session.turn_count -= list(map(_role, dropped)).count("user")


EVENT_TYPES: tuple[type[SessionEvent], ...] = (
    Started,
    MessageAdded,
    Committed,
    CommitFailed,
    ArchiveMerged,
    Evicted,
    Closed,
    Reactivated,
    Forked,
    ItemsRemoved,
    TailReplaced,
    StateChanged,
    Deleted,
    Restarted,
    TaskStateChanged,
    ExtractionAdvanced,
    CompactionPrepared,
    CompactionCleared,
    UsageImported,
    Erased,
)
EventName = Literal[
    "Started",
    "MessageAdded",
    "Committed",
    "CommitFailed",
    "ArchiveMerged",
    "Evicted",
    "Closed",
    "Reactivated",
    "Forked",
    "ItemsRemoved",
    "TailReplaced",
    "StateChanged",
    "Deleted",
    "Restarted",
    "TaskStateChanged",
    "ExtractionAdvanced",
    "CompactionPrepared",
    "CompactionCleared",
    "UsageImported",
    "Erased",
]


def new_id() -> str:
    """A fresh identifier for messages, archives and commit attempts: 128 random bits, hex."""
    return os.urandom(16).hex()  # as unique as uuid4().hex, at a fifth of the cost
