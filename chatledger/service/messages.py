"""Building what a write records from what a caller passed: messages, contexts, keys.

Each builder checks its input against ``chatledger.domain.limits`` and raises
``InvalidInput`` saying what is wrong, before anything is recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from chatledger.domain.failures import InvalidInput
from chatledger.domain.identity import validate_key
from chatledger.domain.limits import Limits, check_context, check_message
from chatledger.domain.values import ROLES, ClientContext, Message, ToolCall, assemble

_MESSAGE_FIELDS = frozenset(
    ("role", "content", "name", "tool_call", "message_id", "id", "created_at")
)


def build_message(
    limits: Limits,
    now: datetime,
    role: Any,
    content: Any,
    name: Any = None,
    tool_call: Any = None,
    message_id: Any = None,
    created_at: Any = None,
) -> Message:
    """A checked ``Message`` (a fresh id unless ``message_id``, created ``now`` unless given)."""
    if role not in ROLES:
        raise InvalidInput(f"Unknown role {role!r}; use one of {', '.join(ROLES)}.")
    if not isinstance(content, str):
        raise InvalidInput(f"Message content must be a str, not {type(content).__name__}.")
    if len(content) > limits.max_content_chars:  # before building a huge message
        raise InvalidInput(
            f"Message content has {len(content)} characters; the limit is "
            f"{limits.max_content_chars} (setting max_content_chars)."
        )
    if (
        type(role) is str and type(content) is str and not message_id and name is None
        and tool_call is None and created_at is None
    ):  # fmt: skip
        # The usual call (text and a role, nothing else), each field checked above or
        # below: built without a second validation of the same values.
        plain = assemble(Message, {
            "id": "", "role": role, "content": content, "created_at": now,
            "name": None, "tool_call": None, "item": None,
        })  # fmt: skip
        return check_message(plain, limits)
    if message_id:
        validate_key(message_id, what="message id")
    if tool_call is not None and not isinstance(tool_call, ToolCall):
        tool_call = ToolCall.model_validate(tool_call)
    message = unnamed(
        message_id,
        role=role,
        content=content,
        created_at=created_at or now,
        name=name,
        tool_call=tool_call,
    )
    return check_message(message, limits)


def build_messages(
    limits: Limits, now: datetime, specs: Sequence[Mapping[str, Any] | Message]
) -> list[Message]:
    """Checked messages from dicts (``role``, ``content``, ...) or ``Message`` objects."""
    if isinstance(specs, str | bytes) or not isinstance(specs, Sequence):
        raise InvalidInput("messages must be a list of message dicts or Message objects.")
    if not specs:
        raise InvalidInput("add_messages needs at least one message.")
    built = [_from_spec(limits, now, spec) for spec in specs]
    ids = [m.id for m in built if m.id]  # (the rest get theirs as they are recorded)
    if len(set(ids)) != len(ids):
        raise InvalidInput("Message ids within one call must be distinct.")
    return built


def _from_spec(limits: Limits, now: datetime, spec: Mapping[str, Any] | Message) -> Message:
    if isinstance(spec, Message):
        fields: dict[str, Any] = spec.model_dump()
        fields["message_id"] = fields.pop("id")
    elif isinstance(spec, Mapping):
        fields = dict(spec)
    else:
        raise InvalidInput("Each message must be a dict or a Message.")
    unknown = fields.keys() - _MESSAGE_FIELDS
    if unknown:
        raise InvalidInput(f"Unknown message fields {sorted(unknown)}.")
    return build_message(
        limits,
        now,
        fields.get("role"),
        fields.get("content"),
        fields.get("name"),
        fields.get("tool_call"),
        fields.get("message_id") or fields.get("id"),
        fields.get("created_at"),
    )


def message_ids(value: object) -> list[str]:
    """The message ids a snapshot commit names: a non-empty list of distinct strings."""
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidInput("message_ids must be a list of message id strings.")
    if not value:
        raise InvalidInput("commit_snapshot needs at least one message id.")
    if not all(isinstance(i, str) for i in value):
        raise InvalidInput("message_ids must all be strings.")
    if len(set(value)) != len(value):
        raise InvalidInput("message_ids contains duplicates; name each message once.")
    return list(value)


def build_context(
    limits: Limits, context: ClientContext | Mapping[str, Any] | None
) -> ClientContext | None:
    """The client context to record with a new session, checked (``None`` stays ``None``)."""
    if context is None:
        return None
    if not isinstance(context, ClientContext):
        if not isinstance(context, Mapping):
            raise InvalidInput("context must be a ClientContext (or a dict of its fields).")
        context = ClientContext.model_validate(context)
    return check_context(context, limits)


def idempotency_key(key: object) -> str | None:
    """A caller's idempotency key, checked (``None``: the write is not keyed)."""
    return None if key is None else validate_key(key, what="idempotency key")


def unnamed(message_id: str | None, **fields: Any) -> Message:
    """A validated ``Message`` of ``fields``: with ``message_id``, or else without an id
    (``""``), one its session names as it records it (``Session.add_message``)."""
    if message_id:
        return Message(id=message_id, **fields)
    return Message(id="-", **fields).named("")
