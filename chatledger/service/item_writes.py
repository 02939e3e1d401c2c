"""Items of agent frameworks, taking them out of the buffer, and a session's state.

``build_items`` turns framework items (any JSON objects) into checked
``Message`` entries that keep each item verbatim. ``remove``, ``pop``,
``clear`` and ``replace_tail`` record ``ItemsRemoved``/``TailReplaced`` (one
event each, or ``ConcurrencyConflict`` and nothing). State changes are
``StateChanged`` events: of the session itself, or of a shared *state scope*
(say ``app:shop`` or ``user:shop:ann``), a stream of its own in the same
tenant (``domain.access.scope_target``), written in the same transaction as
the session's events.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from chatledger.domain.access import Target, scope_target
from chatledger.domain.events import ItemsRemoved, MessageAdded, TailReplaced
from chatledger.domain.failures import InvalidInput
from chatledger.domain.items import described
from chatledger.domain.limits import MAX_NAME_CHARS, Limits, check_json, check_message
from chatledger.domain.session import Session
from chatledger.domain.values import (
    ROLES,
    ClientContext,
    Message,
    Principal,
    assemble,
    has_control_characters,
)
from chatledger.results import AddedMessage
from chatledger.service import retries
from chatledger.service.messages import unnamed
from chatledger.service.sessions import AlreadyRecorded, Part, SessionStore
from chatledger.service.writes import added, recorded_messages


def build_items(limits: Limits, now: datetime, items: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Checked buffer entries for framework items (each kept verbatim in ``Message.item``)."""
    # (Exact types first: an ABC isinstance check costs several times a type test.)
    if type(items) is not list and (
        isinstance(items, str | bytes | Mapping) or not isinstance(items, Sequence)
    ):
        raise InvalidInput("items must be a list of JSON objects (dicts).")
    if not items:
        raise InvalidInput("Pass at least one item.")
    built = []
    for index, item in enumerate(items):
        if type(item) is not dict and not isinstance(item, Mapping):
            raise InvalidInput(f"items[{index}] must be a JSON object (a dict).")
        check_json(item, f"items[{index}]", max_bytes=limits.max_event_bytes)
        own = dict(item)  # the message's copy: the caller's dict may change later
        role, text, name = described(own)
        if name is not None and (len(name) > MAX_NAME_CHARS or has_control_characters(name)):
            name = None  # a name to show only: the item keeps the original
        if (
            type(role) is str
            and role in ROLES
            and type(text) is str
            and (name is None or type(name) is str)
        ):  # every field checked (the item by check_json): no second validation
            message = assemble(Message, {
                "id": "", "role": role, "content": text, "created_at": now,
                "name": name, "tool_call": None, "item": own,
            })  # fmt: skip
        else:
            message = unnamed(None, role=role, content=text, created_at=now, name=name, item=own)
        built.append(check_message(message, limits))
    return built


def state_changes(limits: Limits, changes: Mapping[str, Any] | None, what: str) -> dict[str, Any]:
    """Checked state changes (JSON values under str keys)."""
    if changes is None:
        return {}
    if not isinstance(changes, Mapping):
        raise InvalidInput(f"{what} must be a dict of key -> JSON value.")
    check_json(changes, what, max_bytes=limits.max_event_bytes)
    return dict(changes)


def record_with_state(
    sessions: SessionStore,
    principal: Principal,
    target: Target,
    messages: list[Message],
    now: datetime,
    *,
    context: ClientContext | None,
    state: dict[str, Any],
    shared: dict[str, dict[str, Any]],
    expected_version: int | None,
    idempotency_key: str | None,
) -> tuple[list[AddedMessage], int]:
    """Append ``messages`` (and the state changes) to the session, and the shared state
    changes to their scopes -- all in one transaction. Returns the messages added and the
    session's version right after the write."""

    # A keyed write always leaves an event in the session's own stream, where its key is
    # looked up on a retry: one that changes only shared scopes, an empty StateChanged.
    mark = idempotency_key is not None and bool(shared)

    def apply(session: Session) -> list[tuple[int, str]]:
        session.restart_if_deleted(context, actor=principal, timestamp=now)
        recorded = recorded_messages(session, messages, principal, now)
        session.change_state(
            state, actor=principal, timestamp=now,
            keep_empty=mark and not session.pending_events,
        )  # fmt: skip
        return recorded

    def create() -> Session:
        return Session.start(
            tenant=target.tenant, key=target.key, actor=principal, timestamp=now, context=context
        )

    reach = len(messages) + 4  # a Started, a Reactivated, a StateChanged; one more ends it
    scopes = [
        _scope_part(principal, target, scope, changes, now, idempotency_key)
        for scope, changes in shared.items()
    ]
    try:
        if shared:  # the scopes' streams change in the same transaction
            parts = [
                Part(target.session_id, apply, create, idempotency_key, reach, expected_version),
                *(part for part, _ in scopes),
            ]
            written = sessions.write_together(parts)[0]
        else:  # one stream: the plain write, without the multi-stream bookkeeping
            written = sessions.write(
                target.session_id, apply, create=create, idempotency_key=idempotency_key,
                reach=reach, expected_version=expected_version,
            )  # fmt: skip
    except AlreadyRecorded as done:  # a retry: what the first call returned, if it is the same
        again = retries.added_again(
            sessions, done.rows, messages, now, reach=reach, context=context, state=state,
            shared=[
                (part.sid, part.idempotency_key or "", shared[scope])
                for (part, scope) in scopes
            ],
        )  # fmt: skip
        return again, done.rows[-1].version
    return added(written), written.version


def _scope_part(
    principal: Principal,
    target: Target,
    scope: str,
    changes: dict[str, Any],
    now: datetime,
    idempotency_key: str | None,
) -> tuple[Part, str]:
    """The part of a write that changes the shared scope ``scope`` (under a key of its own
    when the write is keyed, see ``retries.scope_key``), and the scope."""
    tenant = target.tenant
    stream = scope_target(principal, scope, tenant)

    def apply(session: Session) -> None:
        session.change_state(changes, actor=principal, timestamp=now)

    def create() -> Session:
        return Session.start(tenant=tenant, key=stream.key, actor=principal, timestamp=now)

    key = None if idempotency_key is None else retries.scope_key(idempotency_key, target.session_id)
    return Part(stream.session_id, apply, create, key), scope


def remove(
    sessions: SessionStore,
    principal: Principal,
    target: Target,
    choose: Callable[[Session], list[str]],
    reason: str,
    now: datetime,
    *,
    expected_version: int | None,
    idempotency_key: str | None,
    same: Callable[[tuple[str, ...]], bool] = lambda ids: True,
) -> list[Message]:
    """Take the items ``choose`` picks out of the buffer (one ``ItemsRemoved``); returns them.
    A retry returns what the first call took if ``same`` says those ids are what it asks."""

    def apply(session: Session) -> list[Message]:
        ids = choose(session)
        if not ids:
            return []
        taken = [session.buffer[i] for i in ids if i in session.buffer]
        session.remove_items(ids, reason=reason, actor=principal, timestamp=now)  # type: ignore[arg-type]
        return taken

    try:
        written = sessions.write(
            target.session_id,
            apply,
            idempotency_key=idempotency_key,
            expected_version=expected_version,
        )
    except AlreadyRecorded as done:  # a retry: what the first call returned, if it is the same
        event = retries.first_event(
            sessions, done.rows,
            lambda e: isinstance(e, ItemsRemoved) and e.reason == reason and same(e.message_ids),
        )  # fmt: skip
        before = sessions.store.load(target.session_id, done.rows[0].version - 1)
        return [before.buffer[i] for i in event.message_ids]
    return written.outcome


def replace_tail(
    sessions: SessionStore,
    principal: Principal,
    target: Target,
    expected_ids: list[str],
    messages: list[Message],
    now: datetime,
    *,
    expected_version: int | None,
    idempotency_key: str | None,
) -> list[AddedMessage]:
    """Replace the live tail ``expected_ids`` by ``messages`` (one ``TailReplaced``)."""

    def apply(session: Session) -> list[tuple[int, str]]:
        ids = session.replace_tail(expected_ids, messages, actor=principal, timestamp=now)
        return [(session.version, message_id) for message_id in ids]

    try:
        written = sessions.write(
            target.session_id,
            apply,
            idempotency_key=idempotency_key,
            expected_version=expected_version,
        )
    except AlreadyRecorded as done:  # a retry: what the first call returned, if it is the same
        row = done.rows[0]

        def same(event: object) -> bool:
            return (
                isinstance(event, TailReplaced)
                and list(event.removed_ids) == expected_ids
                and len(event.messages) == len(messages)
                and all(
                    retries.same_message(m, event.timestamp, wanted, now)
                    for m, wanted in zip(event.messages, messages, strict=True)
                )
            )

        event = retries.first_event(sessions, done.rows, same)
        return [
            AddedMessage(
                message_id=m.id,
                version=row.version,
                pending_tokens=row.pending_tokens,
                position=row.position,
            )
            for m in event.messages
        ]
    return added(written)


def live_items(
    sessions: SessionStore,
    target: Target,
    *,
    limit: int | None,
    after_version: int | None,
) -> list[Message]:
    """The live buffer's items, oldest first: the last ``limit`` of them, or those added
    after ``after_version`` (still live)."""
    with sessions.lock(target.session_id):
        session = sessions.require(target)
        buffer = list(session.buffer.values())
    if after_version:
        later: set[str] = set()
        for event in sessions.events(target.session_id, gt=after_version):
            if isinstance(event, MessageAdded):
                later.add(event.message.id)
            elif isinstance(event, TailReplaced):
                later.update(m.id for m in event.messages)
        buffer = [m for m in buffer if m.id in later]
    return buffer if limit is None else buffer[-limit:] if limit else []
