"""The agent's working state: task state, extraction watermark, compaction handshake, usage.

Each function is one write of one session (``SessionStore.write``): the
agent's task state (``TaskStateChanged``), how far a background extractor has
read the buffer (``ExtractionAdvanced``), a compaction handshake
(``CompactionPrepared`` then ``CompactionCleared`` -- consumed, or expired and
refused), and tool usage imported from an earlier system (``UsageImported``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from chatledger.domain.access import Target
from chatledger.domain.events import new_id
from chatledger.domain.failures import InvalidInput
from chatledger.domain.limits import (
    MAX_INT,
    MAX_NAME_CHARS,
    Limits,
    check_int,
    check_seconds,
    check_text,
)
from chatledger.domain.session import Session
from chatledger.domain.values import (
    CompactionToken,
    Message,
    Principal,
    TaskState,
    has_control_characters,
)
from chatledger.service.sessions import SessionStore

MAX_OBJECTIVE_CHARS = 200
_SENTENCE = re.compile(r"(?<=[.!?])\s")


def task_state(limits: Limits, task: TaskState | Mapping[str, Any]) -> TaskState:
    """A checked task state (a ``TaskState`` or a dict of its fields)."""
    if not isinstance(task, TaskState):
        if not isinstance(task, Mapping):
            raise InvalidInput("task must be a TaskState (or a dict of its fields).")
        task = TaskState.model_validate(dict(task))
    for field in ("objective", "active_task", "notes"):
        check_text(getattr(task, field), f"task.{field}", max_chars=limits.max_content_chars)
    for field in ("constraints", "blockers"):
        for index, text in enumerate(getattr(task, field)):
            check_text(text, f"task.{field}[{index}]", max_chars=limits.max_content_chars)
    return task


def set_task(
    sessions: SessionStore, principal: Principal, target: Target, task: TaskState, now: datetime
) -> TaskState:
    """Record the agent's working state of the session."""

    def apply(session: Session) -> None:
        session.set_task(task, actor=principal, timestamp=now)

    return sessions.write(target.session_id, apply).session.task


def advance_extraction(
    sessions: SessionStore,
    principal: Principal,
    target: Target,
    watermark: int,
    summary: str,
    now: datetime,
) -> None:
    """Record that an extractor has read the oldest ``watermark`` live items."""

    def apply(session: Session) -> None:
        session.advance_extraction(watermark, summary, actor=principal, timestamp=now)

    sessions.write(target.session_id, apply)


def prepare_compaction(
    sessions: SessionStore,
    principal: Principal,
    target: Target,
    ttl_seconds: float,
    now: datetime,
) -> CompactionToken:
    """Hand out a compaction token valid for ``ttl_seconds``."""
    ttl = check_seconds(ttl_seconds, "ttl_seconds")
    if ttl <= 0:
        raise InvalidInput("ttl_seconds must be above 0.")
    token = new_id()

    def apply(session: Session) -> CompactionToken:
        session.prepare_compaction(
            token, now + timedelta(seconds=ttl), actor=principal, timestamp=now
        )
        assert session.pending_compaction is not None
        return session.pending_compaction

    return sessions.write(target.session_id, apply).outcome


def complete_compaction(
    sessions: SessionStore, principal: Principal, target: Target, token: str, now: datetime
) -> None:
    """Consume the pending token; an expired one is cleared (recorded) and refused."""
    if not isinstance(token, str) or not token:
        raise InvalidInput("token must be the token prepare_compaction returned.")

    def apply(session: Session) -> str:
        return session.consume_compaction(token, actor=principal, timestamp=now)

    outcome = sessions.write(target.session_id, apply).outcome
    if outcome == "expired":
        raise InvalidInput(
            "That compaction token expired before it was consumed; it was cleared. Prepare a "
            "new one (and keep the work within its ttl_seconds)."
        )
    if outcome == "unknown":
        raise InvalidInput(
            "No compaction with that token is pending for this session (consumed already, "
            "expired, or never prepared; a pending one that had expired was cleared); "
            "prepare a new one."
        )


_TOTALS = ("call_count", "success_count", "fail_count", "prompt_tokens", "completion_tokens")


def usage_totals(totals: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Checked per-tool usage totals (``tool_name`` and the five counts)."""
    if isinstance(totals, str | bytes | Mapping) or not isinstance(totals, Sequence) or not totals:
        raise InvalidInput("totals must be a non-empty list of per-tool dicts.")
    checked = []
    for index, total in enumerate(totals):
        if not isinstance(total, Mapping):
            raise InvalidInput(f"totals[{index}] must be a dict.")
        unknown = set(total) - {"tool_name", *_TOTALS}
        if unknown:
            raise InvalidInput(f"totals[{index}] has unknown fields {sorted(unknown)}.")
        name = check_text(total.get("tool_name"), f"totals[{index}].tool_name",
                          max_chars=MAX_NAME_CHARS)  # fmt: skip
        if not name or has_control_characters(name):
            raise InvalidInput(f"totals[{index}].tool_name must be printable, non-empty text.")
        counts = {
            field: check_int(total.get(field, 0), f"totals[{index}].{field}", maximum=MAX_INT // 4)
            for field in _TOTALS
        }
        if counts["call_count"] != counts["success_count"] + counts["fail_count"]:
            raise InvalidInput(f"totals[{index}]: call_count must be success_count + fail_count.")
        checked.append({"tool_name": name, **counts})
    names = [c["tool_name"] for c in checked]
    if len(set(names)) != len(names):
        raise InvalidInput("Name each tool once in totals.")
    return checked


def import_usage(
    sessions: SessionStore,
    principal: Principal,
    target: Target,
    totals: list[dict[str, Any]],
    source: str,
    now: datetime,
) -> None:
    """Record usage totals of an earlier system (one ``UsageImported`` per tool)."""

    def apply(session: Session) -> None:
        session.import_usage(totals, source=source, actor=principal, timestamp=now)

    sessions.write(target.session_id, apply)


def derived_objective(messages: Sequence[Message]) -> str:
    """The objective a conversation states: the first sentence of its first user message."""
    first = next((m.content for m in messages if m.role == "user" and m.content.strip()), "")
    sentence = _SENTENCE.split(" ".join(first.split()), maxsplit=1)[0]
    if len(sentence) > MAX_OBJECTIVE_CHARS:
        sentence = sentence[: MAX_OBJECTIVE_CHARS - 1].rstrip() + "…"
    return sentence
