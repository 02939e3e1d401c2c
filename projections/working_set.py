"""The working-set fold: one accumulator per session, counters and liveness.

``fold_working_set(state, facts)`` applies one event to a session's
``WorkingSetState`` and returns it. The state is a plain slotted record that
the fold updates in place (a persisted read model folds hundreds of thousands
of events, and copying a model per event would dominate a rebuild); the fold
is still deterministic and free of I/O. ``buffer`` holds the live messages
the state knows of (id -> (tokens, is a user turn)): a ``Committed`` needs the
covered messages' tokens, so whoever folds a commit must have loaded the
session's buffer first. Also here: ``archive_changes`` for the archive history.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from chatledger.projections.audit import ArchiveFacts, EventFacts

LIVE = "live"
EVICTED = "evicted"


@dataclass(slots=True)
class WorkingSetState:
    """One session in the working set, as of the last event folded."""

    session_id: UUID
    account_id: str = ""
    user_id: str = ""
    agent_id: str = ""
    session_key: str = ""
    created_at_us: int = 0
    last_activity_us: int = 0
    message_count: int = 0
    pending_tokens: int = 0
    turn_count: int = 0
    commit_count: int = 0
    archive_count: int = 0
    last_commit_us: int | None = None
    status: str = LIVE
    version: int = 0
    buffer: dict[str, tuple[int, bool]] = field(default_factory=dict)


def fold_working_set(state: WorkingSetState | None, facts: EventFacts) -> WorkingSetState:
    """``state`` after ``facts`` (a new state for a session's creation event)."""
    if state is None:
        state = WorkingSetState(facts.session_id)
    kind = facts.type
    state.version = facts.version
    state.last_activity_us = facts.timestamp_us
    if kind == "MessageAdded" and facts.message is not None:
        m = facts.message
        user = m.role == "user"
        state.buffer[m.message_id] = (m.tokens, user)
        state.message_count += 1
        state.pending_tokens += m.tokens
        state.turn_count += user
        state.status = LIVE
    elif kind == "Committed" and facts.archive is not None:
        for message_id in facts.archive.message_ids:
            held = state.buffer.pop(message_id, None)
            if held is not None:
                state.pending_tokens -= held[0]
                state.turn_count -= held[1]
        state.commit_count += 1
        state.archive_count += 1
        state.last_commit_us = facts.timestamp_us
    elif kind == "ArchiveMerged":
        state.archive_count += 1 - len(set(facts.sources))
    elif kind in ("Evicted", "Closed"):
        state.status = EVICTED
    elif kind in ("Started", "Forked"):
        state.account_id = facts.tenant or ""
        state.session_key = facts.key or ""
        state.user_id = facts.actor_user
        state.agent_id = facts.actor_agent
        state.created_at_us = facts.timestamp_us
        state.status = LIVE
        if kind == "Forked":
            state.buffer = {m.message_id: (m.tokens, m.role == "user") for m in facts.buffer}
            state.pending_tokens = sum(t for t, _ in state.buffer.values())
            state.turn_count = sum(u for _, u in state.buffer.values())
            state.message_count = facts.message_count
            state.commit_count = facts.commit_count
            state.archive_count = len(facts.archives)
            state.last_commit_us = facts.last_commit_us
    return state


# ---------------------------------------------------------- archive history
@dataclass(frozen=True, slots=True)
class ArchiveCreated:
    """An archive entered the history (``merged_from`` names what it replaced)."""

    archive: ArchiveFacts
    position: int
    version: int
    merged_from: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ArchivesMerged:
    """These archives left the live set, merged into ``merged_into``."""

    archive_ids: tuple[str, ...]
    merged_into: str


ArchiveChange = ArchiveCreated | ArchivesMerged


def archive_changes(facts: EventFacts) -> list[ArchiveChange]:
    """What ``facts`` does to its session's archive history, in order."""
    kind = facts.type
    if kind == "Committed" and facts.archive is not None:
        return [ArchiveCreated(facts.archive, facts.position, facts.version)]
    if kind == "ArchiveMerged" and facts.archive is not None:
        return [
            ArchivesMerged(tuple(dict.fromkeys(facts.sources)), facts.archive.archive_id),
            ArchiveCreated(facts.archive, facts.position, facts.version, facts.sources),
        ]
    if kind == "Forked":
        return [ArchiveCreated(a, facts.position, facts.version) for a in facts.archives]
    return []
