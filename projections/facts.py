"""Stored facts: what the read models need of an event, kept next to it in the store.

Every event row of the store also holds a ``StoredFacts`` record: the
session's tenant and key, the event type, the actor, what the event changed
in the session's counters (messages, pending tokens, user turns, commits,
live archives, the last commit time and the session status), the tool call
it reports, and a one-line human summary. They are written in the same
statement as the event, so they can never disagree with it or lag behind it;
read models are then rebuilt set-wise in SQL (sums and copies of these
columns) instead of decoding every payload. They are derived from the event
alone (plus its session's tenant and key), so ``verify`` recomputes and
checks them. Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import NamedTuple

from chatledger.domain.events import (
    EVENT_TYPES,
    ArchiveMerged,
    Closed,
    CommitFailed,
    Committed,
    Evicted,
    Forked,
    MessageAdded,
    Started,
)
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.timestamps import to_micros

LIVE = "live"
EVICTED = "evicted"
CLOSED = "closed"
SESSION_STATUSES: tuple[str, ...] = (LIVE, EVICTED, CLOSED)
_SUMMARY_ERROR_CHARS = 80
EVENT_NAMES: frozenset[str] = frozenset(cls.__name__ for cls in EVENT_TYPES)


class StoredFacts(NamedTuple):
    """The facts columns of one stored event (same names as the columns)."""

    event_type: str
    tenant: str
    session_key: str
    actor_account: str
    actor_user: str
    actor_agent: str
    actor_role: str
    trace_id: str
    messages: int  # added to the session's message count
    tokens: int  # added to its pending tokens (negative for a commit)
    turns: int  # added to its pending user turns (negative for a commit)
    commits: int  # added to its commit count
    archives: int  # added to its number of live archives (negative for a merge)
    last_commit_us: int | None  # the session's last commit time from here on, if set
    status: str | None  # the session's status from here on, if the event sets one
    tool_name: str | None
    tool_status: str | None
    prompt_tokens: int
    completion_tokens: int
    summary: str


FACT_COLUMNS: tuple[str, ...] = StoredFacts._fields


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def stored_facts(event: SessionEvent, tenant: str, key: str) -> StoredFacts:
    """The facts of ``event``, an event of the session ``(tenant, key)``."""
    a = event.actor
    who = (tenant, key, a.account_id, a.user_id, a.agent_id, a.role, a.trace_id)
    kind = type(event).__name__
    if isinstance(event, MessageAdded):
        m = event.message
        tokens = m.tokens
        summary = f"{m.role} message {m.id} ({_count(tokens, 'token')})"
        tool = m.tool_call
        if tool is None:
            return StoredFacts(
                kind, *who, 1, tokens, int(m.role == "user"), 0, 0, None, LIVE, None, None, 0, 0,
                summary,
            )  # fmt: skip
        used = tool.prompt_tokens + tool.completion_tokens
        summary += f"; tool {tool.tool_name} {tool.status}, {_count(used, 'token')}"
        return StoredFacts(
            kind, *who, 1, tokens, int(m.role == "user"), 0, 0, None, LIVE, tool.tool_name,
            tool.status, tool.prompt_tokens, tool.completion_tokens, summary,
        )  # fmt: skip
    changes: tuple[int, int, int, int, int, int | None, str | None]
    if isinstance(event, Committed):
        ids = event.archive.message_ids
        summary = f"committed {_count(len(ids), 'message')} into archive {event.archive.archive_id}"
        when = to_micros(event.timestamp)
        changes = (0, -event.covered_tokens, -event.covered_turns, 1, 1, when, None)
    elif isinstance(event, ArchiveMerged):
        sources = event.source_archive_ids
        summary = f"merged {len(sources)} archives into {event.archive.archive_id}"
        changes = (0, 0, 0, 0, 1 - len(set(sources)), None, None)
    elif isinstance(event, Started):
        summary = f"started session {event.key!r} in account {event.tenant!r}"
        changes = (0, 0, 0, 0, 0, None, LIVE)
    elif isinstance(event, Forked):
        summary = f"forked from {event.origin_key!r} at version {event.origin_version}"
        last = event.last_commit_at
        changes = (
            event.message_count,
            sum(m.tokens for m in event.buffer),
            sum(1 for m in event.buffer if m.role == "user"),
            event.commit_count,
            len(event.archives),
            None if last is None else to_micros(last),
            LIVE,
        )
    elif isinstance(event, CommitFailed):
        error = event.error.strip().replace("\n", " ")
        if len(error) > _SUMMARY_ERROR_CHARS:
            error = error[: _SUMMARY_ERROR_CHARS - 1] + "…"
        summary = f"commit of {_count(event.message_count, 'message')} failed: {error}"
        changes = (0, 0, 0, 0, 0, None, None)
    elif isinstance(event, Evicted):
        idle = "" if event.idle_seconds is None else f", idle {event.idle_seconds:.0f}s"
        summary = f"evicted ({event.reason}{idle})"
        changes = (0, 0, 0, 0, 0, None, EVICTED)
    elif isinstance(event, Closed):
        summary = "closed by the client"
        changes = (0, 0, 0, 0, 0, None, CLOSED)
    else:
        summary = kind
        changes = (0, 0, 0, 0, 0, None, None)
    return StoredFacts._make((kind, *who, *changes, None, None, 0, 0, summary))
