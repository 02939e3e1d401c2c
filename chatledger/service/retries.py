"""Retried keyed writes: the write recorded under a key, checked to be the write asked again.

A write made with an idempotency key that is found recorded (``AlreadyRecorded``)
returns what it returned the first time -- but only if the retry asks for the
same write. Everything a write records is compared: the messages and items
(role, text, name, tool call, item; ids and times where the caller gave them),
the session's state changes, each shared scope's changes, the context a new
session was started with, what a removal took, what a tail replacement put
in, what a commit covered, a fork's origin. A key reused for any other write
is ``InvalidInput`` (``KEY_REUSED``) and records nothing. Values the ledger
makes itself (ids it names, the write's moment, trace ids) are not compared.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from chatledger.adapters.recorders import KeyedRow
from chatledger.domain.events import (
    MessageAdded,
    Reactivated,
    Restarted,
    Started,
    StateChanged,
)
from chatledger.domain.failures import InvalidInput
from chatledger.domain.values import ClientContext, Message
from chatledger.results import AddedMessage
from chatledger.service.sessions import SessionStore

KEY_REUSED = (
    "That idempotency key was already used for a different write in this session; use a "
    "fresh key for each distinct write (and the same key only to retry the same call). "
    "Nothing was recorded."
)

_STARTS = (Started, Restarted, Reactivated)  # what a write may record before its own events


def reused() -> InvalidInput:
    """The error of a key reused for a different write."""
    return InvalidInput(KEY_REUSED)


def scope_key(idempotency_key: str, session_id: UUID) -> str:
    """The key a keyed write's change of a shared state scope is recorded under in the
    scope's stream: the write's key and its session's id (a scope is shared by many
    sessions, and keys are unique per stream)."""
    return f"{idempotency_key}@{session_id.hex}"


def canonical(value: Any) -> str:
    """A JSON value in one spelling (tuples as lists, keys sorted), for comparing what a
    caller passed with what was stored."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def same_message(recorded: Message, written_at: datetime, asked: Message, now: datetime) -> bool:
    """Whether a retry asks for the message that was recorded: the same role, text, name,
    tool call and item; the same id if the caller named it; the same time if the caller
    gave one (a message's time defaults to its write's moment, which a retry has anew)."""
    if (recorded.role, recorded.content, recorded.name, recorded.tool_call) != (
        asked.role,
        asked.content,
        asked.name,
        asked.tool_call,
    ):
        return False
    if (recorded.item is None) != (asked.item is None) or (
        recorded.item is not None and canonical(recorded.item) != canonical(asked.item)
    ):
        return False
    if asked.id and recorded.id != asked.id:
        return False
    recorded_default = recorded.created_at == written_at
    asked_default = asked.created_at == now
    return (recorded_default and asked_default) or recorded.created_at == asked.created_at


def decoded(sessions: SessionStore, rows: Sequence[KeyedRow]) -> list[Any]:
    return [sessions.decode(row.stored) for row in rows]


def added_again(
    sessions: SessionStore,
    rows: list[KeyedRow],
    asked: Sequence[Message],
    now: datetime,
    *,
    reach: int,
    context: ClientContext | None = None,
    state: dict[str, Any] | None = None,
    shared: Sequence[tuple[UUID, str, dict[str, Any]]] = (),
) -> list[AddedMessage]:
    """What a keyed write of messages (and state) returned the first time, from its
    recorded rows -- or ``InvalidInput`` if the retry asks for anything else: other
    messages, another state change, other changes of a shared scope (each given as its
    stream, the key its change is recorded under, and the changes), another context."""
    events = decoded(sessions, rows)
    added = [(row, e) for row, e in zip(rows, events, strict=True) if isinstance(e, MessageAdded)]
    changed = [e for e in events if isinstance(e, StateChanged) and (e.changes or e.removed)]
    wanted_state = [canonical(state)] if state else []
    same = (
        len(rows) < reach  # the write ends within what a write of this shape can record
        and all(isinstance(e, (*_STARTS, MessageAdded, StateChanged)) for e in events)
        and len(added) == len(asked)
        and all(
            same_message(e.message, e.timestamp, wanted, now)
            for (_, e), wanted in zip(added, asked, strict=True)
        )
        and [canonical(e.changes) for e in changed if not e.removed] == wanted_state
        and len(changed) == len(wanted_state)
        and all(
            e.context == (context or ClientContext())
            for e in events
            if isinstance(e, Started | Restarted)
        )
        and all(_scope_changed(sessions, sid, key, changes) for sid, key, changes in shared)
    )
    if not same:
        raise reused()
    pending = rows[-1].pending_tokens  # the session's, right after the write
    return [
        AddedMessage(
            message_id=e.message.id,
            version=row.version,
            pending_tokens=pending,
            position=row.position,
        )
        for row, e in added
    ]


def _scope_changed(sessions: SessionStore, sid: UUID, key: str, changes: dict[str, Any]) -> bool:
    """Whether the write recorded ``changes`` in the shared scope's stream ``sid``."""
    with sessions.lock(sid):
        rows = sessions.recorded_write(sid, key, reach=3)
    events = decoded(sessions, rows)
    changed = [e for e in events if isinstance(e, StateChanged)]
    return (
        len(changed) == 1
        and not changed[0].removed
        and canonical(changed[0].changes) == canonical(changes)
        and all(isinstance(e, Started | StateChanged) for e in events)
    )


def first_event(sessions: SessionStore, rows: list[KeyedRow], same: Callable[[Any], bool]) -> Any:
    """The first event of a recorded single-event write, if ``same`` says the retry asks for
    it; else ``InvalidInput`` (the key was used for another write)."""
    event = sessions.decode(rows[0].stored)
    if not same(event):
        raise reused()
    return event
