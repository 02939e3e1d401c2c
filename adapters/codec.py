"""The stored form of session events: compact JSON under the event's short name.

Format 2 (written since schema revision 0006). An event's row holds its type
name as ``topic`` (``MessageAdded``, not the module path) and, as ``state``,
the JSON of its fields without what the row holds already or what a default
gives back: no ids or versions (own columns), no ``timestamp`` when it is UTC
(the ``timestamp_us`` column), no field equal to its default. A
``MessageAdded`` -- nearly every row of a ledger -- is written in a shape of
its own, with one-letter keys: ``a`` the actor as a list (account, user,
agent, role, trace; trailing defaults left out), ``i`` the message id, ``r``
``c`` ``n`` its role, text and name (left out for a framework item, ``x``,
whose own text gives them back exactly), ``t`` a tool call, ``at`` the
message time when it is not the event's, ``k`` an idempotency key.

Rows of format 1 (a module path as ``topic``, every field in the JSON) are
read as they were written: the hash chain covers the stored bytes, so no row
is ever rewritten. Every payload is ``json.dumps(..., ensure_ascii=False,
separators=(",", ":"))`` of a JSON object, which an export carries as that
object and an import re-encodes to the very same bytes.

With a sealing key (setting ``encryption``), an event's content is taken out
of this form and encrypted under ``"sealed"`` (``chatledger.adapters.sealing``;
a sealed ``MessageAdded`` always writes its role out); reading opens it with the
key it names, or gives its erased form once that key is destroyed.

``trusted_messages`` is the read path of long runs of messages: it builds
``Message`` values from rows of this format without validating them again
(they were validated before they were written, and their chain vouches for
the bytes); ``decode`` validates, and the tests hold the two equal.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic_core import from_json

from chatledger.adapters.sealing import (
    PARTS,
    SEALED,
    Ciphers,
    open_compact_message,
    open_sealed,
    row_aad,
    seal,
    seal_compact_message,
)
from chatledger.domain.events import EVENT_TYPES, MessageAdded
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.items import describe_item
from chatledger.domain.timestamps import from_micros
from chatledger.domain.values import Message, Principal
from chatledger.projections.facts import summarize

EVENTS_BY_NAME: dict[str, type[SessionEvent]] = {cls.__name__: cls for cls in EVENT_TYPES}
"""Session events by the short name a format-2 row stores as its topic."""
_ACTOR_FIELDS = ("account_id", "user_id", "agent_id", "role", "trace_id")
_ACTOR_DEFAULTS = (None, "", "", "member", "")  # the account has no default
_MESSAGE_KEYS = frozenset({"a", "i", "r", "c", "n", "x", "t", "at", "ts", "k"})
_PLAIN_KEYS = frozenset({"a", "i", "r", "c", "n", "x", "k"})  # what trusted_messages builds
_FIELDS_SET = frozenset({"id", "role", "content", "created_at"})
_UNKEYED = frozenset({"originator_id", "originator_version", "idempotency_key"})
_ZERO = timedelta(0)
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
_loads = json.JSONDecoder().decode
_string = json.encoder.encode_basestring  # a str as JSON, as _dumps writes it (not ASCII-only)
_last_actor: list[tuple[Principal | None, str]] = [(None, "")]  # the last principal, its JSON
_new = object.__new__
_set = object.__setattr__


def is_compact(topic: str) -> bool:
    """Whether a stored row is of format 2 (a short name as its topic)."""
    return ":" not in topic


Sealing = tuple[str, AESGCM]
"""A key id and its cipher: what seals an event's content."""


def encode(event: SessionEvent, sealing: Sealing | None = None) -> tuple[str, bytes]:
    """The topic and payload a format-2 row stores for ``event`` (its content sealed with
    ``sealing``, if given).

    Raises ``ValueError`` (or ``TypeError``) for a value JSON cannot hold
    (a non-finite number, a lone surrogate).
    """
    cls = type(event)
    topic = cls.__name__
    if cls is MessageAdded:
        if sealing is None:
            plain = _plain_message(event)  # type: ignore[arg-type]
            if plain is not None:
                return topic, plain
        payload = _message_added(event)  # type: ignore[arg-type]
        if sealing is not None:
            aad = row_aad(event.originator_id, topic)
            seal_compact_message(payload, event.message, *sealing, aad)  # type: ignore[attr-defined]
    else:
        payload = _fields(event)
        parts = PARTS.get(cls)
        if sealing is not None and parts is not None:
            seal(parts, payload, *sealing, row_aad(event.originator_id, topic))
    return topic, _dumps(payload).encode()


def _utc(moment: datetime) -> bool:
    return moment.utcoffset() == _ZERO


def _fields(event: SessionEvent) -> dict[str, Any]:
    exclude = set(_UNKEYED if event.idempotency_key is None else ())
    exclude.update(("originator_id", "originator_version"))
    if _utc(event.timestamp):
        exclude.add("timestamp")  # the row's timestamp_us gives it back
    payload: dict[str, Any] = event.model_dump(mode="json", exclude=exclude, exclude_defaults=True)
    class_version: int = getattr(type(event), "class_version", 1)
    if class_version > 1:
        payload["class_version"] = class_version
    return payload


def _plain_message(event: MessageAdded) -> bytes | None:
    """The payload ``_message_added`` gives a plain text message (no item, name or tool
    call, the event's own UTC time, no key), built as text: the same bytes ``_dumps``
    writes of it, at a third of the cost, on the path of nearly every append. ``None``
    for any other message."""
    m = event.message
    timestamp = event.timestamp
    if (
        m.item is not None or m.tool_call is not None or m.name is not None
        or event.idempotency_key is not None or m.created_at != timestamp
        or timestamp.utcoffset() != _ZERO
    ):  # fmt: skip
        return None
    actor = _actor_json(event.actor)
    text = _string
    return f'{{"a":{actor},"i":{text(m.id)},"r":{text(m.role)},"c":{text(m.content)}}}'.encode()


def _actor_json(actor: Principal) -> str:
    """The ``a`` list of a ``MessageAdded`` payload, as JSON (the last one remembered:
    a process writes for few principals, mostly the same one again)."""
    last, text = _last_actor[0]
    if actor is last:
        return text
    text = _dumps(_actor_list(actor))
    _last_actor[0] = (actor, text)
    return text


def _actor_list(a: Principal) -> list[str]:
    actor: list[str] = [a.account_id, a.user_id, a.agent_id, a.role, a.trace_id]
    while len(actor) > 1 and actor[-1] == _ACTOR_DEFAULTS[len(actor) - 1]:
        actor.pop()
    return actor


def _message_added(event: MessageAdded) -> dict[str, Any]:
    m = event.message
    payload: dict[str, Any] = {"a": _actor_list(event.actor), "i": m.id}
    item = m.item
    if item is None or describe_item(item) != (m.role, m.content, m.name):
        payload["r"] = m.role
        payload["c"] = m.content
        if m.name is not None:
            payload["n"] = m.name
    if item is not None:
        payload["x"] = item
    if m.tool_call is not None:
        payload["t"] = m.tool_call.model_dump(mode="json", exclude_defaults=True)
    timestamp = event.timestamp
    if m.created_at != timestamp or not _utc(m.created_at):
        payload["at"] = m.created_at.isoformat()
    if not _utc(timestamp):
        payload["ts"] = timestamp.isoformat()
    if event.idempotency_key is not None:
        payload["k"] = event.idempotency_key
    return payload


def decode(
    topic: str,
    state: bytes,
    originator_id: UUID,
    version: int,
    timestamp_us: int,
    ciphers: Ciphers | None = None,
) -> SessionEvent:
    """The event of a format-2 row, validated; sealed content opened with ``ciphers`` (or,
    without them or the key, erased). Raises ``KeyError``, ``ValueError`` or
    ``TypeError`` (pydantic's ``ValidationError`` is one) for a row it cannot read."""
    cls = EVENTS_BY_NAME[topic]
    data = _loads(state.decode())
    if not isinstance(data, dict):
        raise TypeError(f"the payload of a {topic} is not a JSON object")
    sealed = data.pop(SEALED, None)
    if sealed is not None:
        unseal(cls, data, sealed, ciphers or _no_keys, row_aad(originator_id, topic))
    if cls is MessageAdded:
        fields = _message_added_fields(data, timestamp_us)
    else:
        fields = data
        fields.setdefault("timestamp", from_micros(timestamp_us))
        from_version = fields.pop("class_version", 1)
        class_version = getattr(cls, "class_version", 1)
        while from_version < class_version:
            getattr(cls, f"upcast_v{from_version}_v{from_version + 1}")(fields)
            from_version += 1
    return cls(originator_id=originator_id, originator_version=version, **fields)


def unseal(cls: type[Any], data: dict[str, Any], sealed: Any, ciphers: Ciphers, aad: bytes) -> None:
    """Open the sealed content of a format-2 payload of ``cls`` (popped as ``sealed``)."""
    if cls is MessageAdded:
        open_compact_message(data, sealed, ciphers, aad)
    else:
        open_sealed(PARTS.get(cls, ()), data, sealed, ciphers, aad)


def _no_keys(key_id: str) -> AESGCM | None:
    return None


def _message_added_fields(data: dict[str, Any], timestamp_us: int) -> dict[str, Any]:
    unknown = data.keys() - _MESSAGE_KEYS
    if unknown:
        raise ValueError(f"a MessageAdded payload has unknown keys {sorted(unknown)}")
    timestamp = data.get("ts") or from_micros(timestamp_us)
    actor = data["a"]
    if not isinstance(actor, list) or not 1 <= len(actor) <= len(_ACTOR_FIELDS):
        raise TypeError("a MessageAdded payload's actor is not a list of 1 to 5 values")
    message: dict[str, Any] = {"id": data["i"], "created_at": data.get("at", timestamp)}
    if "r" in data:
        message.update(role=data["r"], content=data["c"], name=data.get("n"))
    else:
        role, content, name = describe_item(data["x"])
        message.update(role=role, content=content, name=name)
    if "x" in data:
        message["item"] = data["x"]
    if "t" in data:
        message["tool_call"] = data["t"]
    return {
        "timestamp": timestamp,
        "actor": dict(zip(_ACTOR_FIELDS, actor, strict=False)),
        "message": message,
        "idempotency_key": data.get("k"),
    }


@contextmanager
def without_cyclic_gc() -> Iterator[None]:
    """Hold off the cyclic garbage collector while a long run of rows is decoded.

    Tens of thousands of new objects that all survive make the collector run
    over and over, for a third of the decoding time; none of them can be part
    of a reference cycle yet. It is switched back on right after (unless it
    was off already).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def trusted_messages(
    states: Sequence[bytes],
    stamps: Sequence[int],
    opener: Callable[[dict[str, Any], Any], object] | None = None,
) -> list[Message]:
    """The messages of consecutive format-2 ``MessageAdded`` rows (payloads and their
    ``timestamp_us``), built without validating them again; equal to what ``decode``
    gives (sealed payloads opened by ``opener(payload, sealed)``). Raises ``ValueError``
    if a payload is not JSON, or is sealed and there is no ``opener``."""
    decoded = from_json(b"[" + b",".join(states) + b"]")
    if len(decoded) != len(stamps):
        raise ValueError("a payload holds more than one JSON value")
    for data in decoded:
        if isinstance(data, dict) and SEALED in data:
            if opener is None:
                raise ValueError("a sealed payload, and no way to open it")
            opener(data, data.pop(SEALED))
    messages: list[Message] = []
    append, new, set_, fields = messages.append, _new, _set, _FIELDS_SET
    last_us = -1
    when: datetime | None = None
    plain = _PLAIN_KEYS
    for data, us in zip(decoded, stamps, strict=True):
        if not isinstance(data, dict) or not data.keys() <= plain:
            append(Message.model_validate(_message_added_fields(data, us)["message"]))
            continue
        if us != last_us:
            when, last_us = from_micros(us), us
        item = data.get("x")
        if "r" in data:
            role, content, name = data["r"], data["c"], data.get("n")
        else:
            role, content, name = describe_item(item)  # type: ignore[arg-type]
        message = new(Message)
        set_(message, "__dict__", {
            "id": data["i"], "role": role, "content": content, "created_at": when,
            "name": name, "tool_call": None, "item": item,
        })  # fmt: skip
        set_(message, "__pydantic_fields_set__", set(fields))
        set_(message, "__pydantic_extra__", None)
        set_(message, "__pydantic_private__", None)
        append(message)
    return messages


PAYLOAD_COLUMNS = ("stored_topic", "stored_state")
"""The extra columns (topic and state, labelled so) a facts query reads for ``add_summaries``."""


def add_summaries(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of a facts query with every ``summary`` filled in: a row of format 2 stores
    none, so its event (from the ``PAYLOAD_COLUMNS``, dropped here) says what it did."""
    for row in rows:
        topic, state = (row.pop(name) for name in PAYLOAD_COLUMNS)
        if row["summary"] or not is_compact(topic):
            continue
        try:
            event = decode(topic, bytes(state), row["session_id"], row["version"],
                           row["timestamp_us"])  # fmt: skip
        except (KeyError, TypeError, ValueError, AttributeError):  # edited: verify() says so
            row["summary"] = f"{topic} (its payload cannot be read)"
            continue
        row["summary"] = summarize(event)
    return rows
