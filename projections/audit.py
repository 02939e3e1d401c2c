"""The audit log fold, and ``EventFacts``: a stored event as the read models see it.

Persisted read models are rebuilt from hundreds of thousands of events, so
they do not fold pydantic domain events: ``facts_from_json`` reads the
stored JSON form of an event straight into a small slotted record (about ten
times cheaper than validating the event), and ``facts_from_event`` builds
the very same record from a domain event (used for anything the fast path
cannot read, and by the tests that pin the two paths equal). Everything here
is pure: no I/O, no clock; timestamps are integer microseconds (UTC).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from chatledger.domain.events import (
    EVENT_TYPES,
    ArchiveMerged,
    Closed,
    CommitFailed,
    Committed,
    Evicted,
    MessageAdded,
    Started,
)
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.timestamps import to_micros
from chatledger.domain.values import ArchiveSummary, Message, estimate_tokens

_SUMMARY_ERROR_CHARS = 80

EVENT_NAMES: frozenset[str] = frozenset(cls.__name__ for cls in EVENT_TYPES)


# Not frozen: a frozen dataclass sets every field through object.__setattr__,
# which doubles the cost of building the half a million of these a rebuild
# makes. Treat them as immutable all the same.
@dataclass(slots=True)
class MessageFacts:
    """What the read models need of one message."""

    message_id: str
    role: str
    tokens: int
    tool_name: str | None = None
    tool_status: str = "success"
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(slots=True)
class ArchiveFacts:
    """One archive summary, as recorded by a ``Committed``, ``ArchiveMerged`` or fork."""

    archive_id: str
    overview: str
    abstract: str
    message_ids: tuple[str, ...]
    tokens: int
    created_at_us: int


@dataclass(slots=True)
class EventFacts:
    """One stored event: where it sits in the log, who caused it, what it changed."""

    position: int
    session_id: UUID
    version: int
    type: str
    timestamp_us: int
    actor_account: str
    actor_user: str
    actor_agent: str
    actor_role: str
    trace_id: str
    tenant: str | None = None  # creation events only
    key: str | None = None  # creation events only
    message: MessageFacts | None = None  # MessageAdded
    buffer: tuple[MessageFacts, ...] = ()  # Forked: the copied live buffer
    archive: ArchiveFacts | None = None  # Committed, ArchiveMerged
    archives: tuple[ArchiveFacts, ...] = ()  # Forked: the copied live archives
    sources: tuple[str, ...] = ()  # ArchiveMerged
    message_count: int = 0  # CommitFailed (messages attempted), Forked (carried over)
    commit_count: int = 0  # Forked
    last_commit_us: int | None = None  # Forked
    reason: str | None = None  # Evicted
    idle_seconds: float | None = None  # Evicted
    error: str | None = None  # CommitFailed
    origin_key: str | None = None  # Forked
    origin_version: int | None = None  # Forked


# ---------------------------------------------------------------- from JSON
def _iso_micros(text: str) -> int:
    return to_micros(datetime.fromisoformat(text))


def _message_from_json(data: dict[str, Any]) -> MessageFacts:
    content: str = data["content"]
    tool = data.get("tool_call")
    if tool is None:
        return MessageFacts(data["id"], data["role"], max(1, len(content) // 4))
    return MessageFacts(
        data["id"],
        data["role"],
        max(1, len(content) // 4),
        tool["tool_name"],
        tool.get("status", "success"),
        tool.get("prompt_tokens", 0),
        tool.get("completion_tokens", 0),
    )


def _archive_from_json(data: dict[str, Any]) -> ArchiveFacts:
    return ArchiveFacts(
        data["archive_id"],
        data["overview"],
        data["abstract"],
        tuple(data["message_ids"]),
        data["tokens"],
        _iso_micros(data["created_at"]),
    )


def facts_from_json(
    position: int,
    session_id: UUID,
    version: int,
    type_name: str,
    timestamp_us: int,
    state: dict[str, Any],
) -> EventFacts:
    """Facts of a stored event from its decoded JSON state (the mapper's format, version 1).

    Raises ``KeyError``/``TypeError``/``ValueError`` on a state it does not
    understand; the caller then falls back to the full mapper.
    """
    actor = state["actor"]
    base = (
        position,
        session_id,
        version,
        type_name,
        timestamp_us,
        actor["account_id"],
        actor.get("user_id", ""),
        actor.get("agent_id", ""),
        actor.get("role", "member"),
        actor.get("trace_id", ""),
    )
    if type_name == "MessageAdded":
        return EventFacts(*base, message=_message_from_json(state["message"]))
    if type_name == "Committed":
        return EventFacts(*base, archive=_archive_from_json(state["archive"]))
    if type_name == "Started":
        return EventFacts(*base, tenant=state["tenant"], key=state["key"])
    if type_name == "ArchiveMerged":
        return EventFacts(
            *base,
            archive=_archive_from_json(state["archive"]),
            sources=tuple(state["source_archive_ids"]),
        )
    if type_name == "CommitFailed":
        return EventFacts(*base, error=state["error"], message_count=state["message_count"])
    if type_name == "Evicted":
        return EventFacts(*base, reason=state["reason"], idle_seconds=state.get("idle_seconds"))
    if type_name == "Forked":
        last = state.get("last_commit_at")
        return EventFacts(
            *base,
            tenant=state["tenant"],
            key=state["key"],
            buffer=tuple(_message_from_json(m) for m in state["buffer"]),
            archives=tuple(_archive_from_json(a) for a in state["archives"]),
            message_count=state["message_count"],
            commit_count=state["commit_count"],
            last_commit_us=None if last is None else _iso_micros(last),
            origin_key=state["origin_key"],
            origin_version=state["origin_version"],
        )
    return EventFacts(*base)


# --------------------------------------------------------------- from events
def _message_facts(message: Message) -> MessageFacts:
    tool = message.tool_call
    if tool is None:
        return MessageFacts(message.id, message.role, estimate_tokens(message.content))
    return MessageFacts(
        message.id,
        message.role,
        estimate_tokens(message.content),
        tool.tool_name,
        tool.status,
        tool.prompt_tokens,
        tool.completion_tokens,
    )


def _archive_facts(archive: ArchiveSummary) -> ArchiveFacts:
    return ArchiveFacts(
        archive.archive_id,
        archive.overview,
        archive.abstract,
        tuple(archive.message_ids),
        archive.tokens,
        to_micros(archive.created_at),
    )


def facts_from_event(event: SessionEvent, position: int) -> EventFacts:
    """Facts of a domain event recorded at ``position`` (equal to ``facts_from_json``'s)."""
    actor = event.actor
    base = (
        position,
        event.originator_id,
        event.originator_version,
        type(event).__name__,
        to_micros(event.timestamp),
        actor.account_id,
        actor.user_id,
        actor.agent_id,
        actor.role,
        actor.trace_id,
    )
    if isinstance(event, MessageAdded):
        return EventFacts(*base, message=_message_facts(event.message))
    if isinstance(event, Committed):
        return EventFacts(*base, archive=_archive_facts(event.archive))
    if isinstance(event, Started):
        return EventFacts(*base, tenant=event.tenant, key=event.key)
    if isinstance(event, ArchiveMerged):
        return EventFacts(
            *base,
            archive=_archive_facts(event.archive),
            sources=tuple(event.source_archive_ids),
        )
    if isinstance(event, CommitFailed):
        return EventFacts(*base, error=event.error, message_count=event.message_count)
    if isinstance(event, Evicted):
        return EventFacts(*base, reason=event.reason, idle_seconds=event.idle_seconds)
    if type(event).__name__ == "Forked":
        fork: Any = event
        last = fork.last_commit_at
        return EventFacts(
            *base,
            tenant=fork.tenant,
            key=fork.key,
            buffer=tuple(_message_facts(m) for m in fork.buffer),
            archives=tuple(_archive_facts(a) for a in fork.archives),
            message_count=fork.message_count,
            commit_count=fork.commit_count,
            last_commit_us=None if last is None else to_micros(last),
            origin_key=fork.origin_key,
            origin_version=fork.origin_version,
        )
    if isinstance(event, Closed):
        return EventFacts(*base)
    return EventFacts(*base)


# ------------------------------------------------------------------- audit
@dataclass(slots=True)
class AuditRecord:
    """One row of the audit log (tenant and key come from the session's creation)."""

    position: int
    session_id: UUID
    account_id: str
    session_key: str
    version: int
    event_type: str
    actor_account: str
    actor_user: str
    actor_agent: str
    actor_role: str
    trace_id: str
    timestamp_us: int
    summary: str


def _tokens(count: int) -> str:
    return f"{count} token" if count == 1 else f"{count} tokens"


def summarize_event(facts: EventFacts) -> str:
    """A short, human line saying what the event did (no message content: it may be private)."""
    kind = facts.type
    if kind == "MessageAdded" and facts.message is not None:
        m = facts.message
        text = f"{m.role} message {m.message_id} ({_tokens(m.tokens)})"
        if m.tool_name is not None:
            used = m.prompt_tokens + m.completion_tokens
            text += f"; tool {m.tool_name} {m.tool_status}, {_tokens(used)}"
        return text
    if kind == "Committed" and facts.archive is not None:
        count = len(facts.archive.message_ids)
        noun = "message" if count == 1 else "messages"
        return f"committed {count} {noun} into archive {facts.archive.archive_id}"
    if kind == "ArchiveMerged" and facts.archive is not None:
        return f"merged {len(facts.sources)} archives into {facts.archive.archive_id}"
    if kind == "Started":
        return f"started session {facts.key!r} in account {facts.tenant!r}"
    if kind == "Forked":
        return f"forked from {facts.origin_key!r} at version {facts.origin_version}"
    if kind == "CommitFailed":
        error = (facts.error or "").strip().replace("\n", " ")
        if len(error) > _SUMMARY_ERROR_CHARS:
            error = error[: _SUMMARY_ERROR_CHARS - 1] + "…"
        return f"commit of {facts.message_count} messages failed: {error}"
    if kind == "Evicted":
        idle = "" if facts.idle_seconds is None else f", idle {facts.idle_seconds:.0f}s"
        return f"evicted ({facts.reason}{idle})"
    if kind == "Closed":
        return "closed by the client"
    return kind


def audit_record(facts: EventFacts, tenant: str, key: str) -> AuditRecord:
    """The audit row of one event of the session ``(tenant, key)``."""
    return AuditRecord(
        facts.position,
        facts.session_id,
        tenant,
        key,
        facts.version,
        facts.type,
        facts.actor_account,
        facts.actor_user,
        facts.actor_agent,
        facts.actor_role,
        facts.trace_id,
        facts.timestamp_us,
        summarize_event(facts),
    )
