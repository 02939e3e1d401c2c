"""The stored form of session events: compact JSON under the event's short name.

Format 2 (written since schema revision 0006). An event's row holds its type
name as ``topic`` (``MessageAdded``, not the module path) and, as ``state``,
the JSON of its fields without what the row holds already or what a default
gives back: no ids or versions (own columns), no ``timestamp`` when it is UTC
(the ``timestamp_us`` column), no field equal to its default. A
``MessageAdded`` -- nearly every row of a ledger -- is written in a shape of
its own, with one-letter keys: ``a`` the actor as a list (account, user,
agent, role, trace; trailing defaults left out), ``i`` the message id (left
out when it is the id of its place, ``message_id_at`` the row's version), ``r``
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

``trusted_messages`` and ``stored_run`` are the read path of long runs of
messages: they build ``Message`` values from rows of this format without
validating them again (they were validated before they were written, and
their chain vouches for the bytes); ``decode`` validates, and the tests hold
them equal. ``stored_run`` parses a run of plain text messages with msgspec
into slotted records checked against the one shape ``_plain_message`` writes
(a third of the work of parsing every payload into a dict), and anything
else the general way.
"""

from __future__ import annotations

import gc
import json
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from functools import partial
from itertools import compress, repeat
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from operator import attrgetter, contains, itemgetter, methodcaller
from typing import Annotated, Any
from uuid import UUID

import msgspec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from msgspec.structs import astuple
from pydantic import ValidationError
from pydantic_core import from_json, to_json

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
from chatledger.domain.events import (
    EVENT_TYPES,
    ArchiveMerged,
    Committed,
    ItemsRemoved,
    MessageAdded,
    TailReplaced,
)
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.identity import message_id_at, packed_ids, unpacked_ids
from chatledger.domain.items import describe_item, described
from chatledger.domain.message_runs import MessageRun, newest_fitting, newest_that_fit
from chatledger.domain.timestamps import from_micros, from_micros_all
from chatledger.domain.values import (
    MESSAGE_ID_CHARS,
    ROLES,
    Message,
    Principal,
    Role,
    ToolCall,
    assemble,
    assemble_all,
    quarters_tokens,
    text_quarters,
    tokens_of_quarters,
    tokens_of_texts,
)
from chatledger.projections.facts import summarize

EVENTS_BY_NAME: dict[str, type[SessionEvent]] = {cls.__name__: cls for cls in EVENT_TYPES}
"""Session events by the short name a format-2 row stores as its topic."""
_ACTOR_FIELDS = ("account_id", "user_id", "agent_id", "role", "trace_id")
_ACTOR_DEFAULTS = (None, "", "", "member", "")  # the account has no default
_MESSAGE_KEYS = frozenset({"a", "i", "r", "c", "n", "x", "t", "at", "ts", "k"})
_PLAIN_KEYS = frozenset({"a", "i", "r", "c", "n", "x", "k"})  # what trusted_messages builds
_TEXT_KEYS = frozenset({"a", "i", "r", "c", "n", "k"})  # a plain text message (StoredMessages)
_CHECKED_KEYS = frozenset({"a", "i", "r", "c", "n", "x", "t", "k"})  # message_added_of_row
_ITEM_KEYS = frozenset({"a", "i", "x", "t", "k"})  # an item without its derived text
_ROLES = frozenset(ROLES)
_ACTORS_KEPT = 1024  # distinct actors whose validated Principal message_added_of_row keeps
_UNKEYED = frozenset({"originator_id", "originator_version", "idempotency_key"})
_ZERO = timedelta(0)
_NO_ID = msgspec.UNSET  # a payload's id where it names none: its message's is its place's
# Where an event names messages by id: stored as ``packed_ids`` (runs of the ledger's own
# ids as [first, last] versions), read back by ``unpacked_ids``.
_ID_LISTS: dict[type[SessionEvent], tuple[str, ...]] = {
    Committed: ("archive", "message_ids"),
    ArchiveMerged: ("archive", "message_ids"),
    ItemsRemoved: ("message_ids",),
    TailReplaced: ("removed_ids",),
}
_EPOCH_UTC = from_micros(0)


def _unserialisable(value: object) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _json_writer() -> Callable[[Any], str]:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)``.

    ``JSONEncoder.encode`` makes a new C encoder (and a closure) on every call;
    this makes the same C encoder once -- the same text, at about half the cost
    of a payload. Without the circular-reference check: what it writes comes
    from models and from input held to ``MAX_JSON_DEPTH`` (a cycle could not
    pass that check), and a structure too deep for it is refused as a
    ``ValueError`` all the same.
    """
    if c_make_encoder is None:  # an interpreter without the C accelerator
        return json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
    encoder = c_make_encoder(
        None, _unserialisable, encode_basestring, None, ":", ",", False, False, False
    )
    join = "".join

    def dumps(value: Any) -> str:
        try:
            return join(encoder(value, 0))
        except RecursionError:
            raise ValueError("the value is nested too deeply to be written as JSON") from None

    return dumps


json_text = _json_writer()
"""The compact JSON text every payload is (see ``_json_writer``)."""
_loads = json.JSONDecoder().decode
# Payloads parsed with their keys cached, not their values: ids and texts are unique, and
# looking them up costs more.
_parsed = partial(from_json, cache_strings="keys")
_string = encode_basestring  # a str as JSON, as json_text writes it (not ASCII-only)
_last_actor: list[tuple[Principal | None, str]] = [(None, "")]  # the last principal, its JSON


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
        path = _ID_LISTS.get(cls)
        if path is not None:
            _repack(payload, path, partial(packed_ids, event.originator_id))
        parts = PARTS.get(cls)
        if sealing is not None and parts is not None:
            seal(parts, payload, *sealing, row_aad(event.originator_id, topic))
    return topic, json_text(payload).encode()


def _repack(payload: dict[str, Any], path: tuple[str, ...], change: Callable[[Any], Any]) -> None:
    """Replace the id list at ``path`` in ``payload`` by ``change`` of it."""
    holder = payload
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = change(holder[path[-1]])


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
    """The payload ``_message_added`` gives a plain message -- text, or a framework item
    whose own text gives its role, text and name back -- with no tool call, the event's
    own UTC time and no key, built as text: the same bytes ``json_text`` writes of it, at a
    fraction of the cost, on the path of nearly every append. ``None`` for any other
    message."""
    m = event.message
    timestamp, created = event.timestamp, m.created_at
    if (
        m.tool_call is not None or event.idempotency_key is not None
        or timestamp.utcoffset() != _ZERO
        or (created is not timestamp and (created != timestamp or not _utc(created)))
    ):  # fmt: skip
        return None
    item, text = m.item, _string
    if item is None:
        if m.name is not None:
            return None
        actor = _actor_json(event.actor)
        own = "" if _placed_id(event) else f'"i":{text(m.id)},'
        return f'{{"a":{actor},{own}"r":{text(m.role)},"c":{text(m.content)}}}'.encode()
    if described(item) != (m.role, m.content, m.name):
        return None
    own = "" if _placed_id(event) else f'"i":{text(m.id)},'
    return f'{{"a":{_actor_json(event.actor)},{own}"x":{json_text(item)}}}'.encode()


def _placed_id(event: MessageAdded) -> bool:
    """Whether the message's id is its place's (``message_id_at``): the payload omits it."""
    return event.message.id == message_id_at(event.originator_id, event.originator_version)


def _actor_json(actor: Principal) -> str:
    """The ``a`` list of a ``MessageAdded`` payload, as JSON (the last one remembered:
    a process writes for few principals, mostly the same one again)."""
    last, text = _last_actor[0]
    if actor is last:
        return text
    text = json_text(_actor_list(actor))
    _last_actor[0] = (actor, text)
    return text


def _actor_list(a: Principal) -> list[str]:
    actor: list[str] = [a.account_id, a.user_id, a.agent_id, a.role, a.trace_id]
    while len(actor) > 1 and actor[-1] == _ACTOR_DEFAULTS[len(actor) - 1]:
        actor.pop()
    return actor


def _message_added(event: MessageAdded) -> dict[str, Any]:
    m = event.message
    payload: dict[str, Any] = {"a": _actor_list(event.actor)}
    if not _placed_id(event):
        payload["i"] = m.id
    item = m.item
    if item is None or described(item) != (m.role, m.content, m.name):
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
        fields = _message_added_fields(data, timestamp_us, message_id_at(originator_id, version))
    else:
        fields = data
        path = _ID_LISTS.get(cls)
        if path is not None:
            _repack(fields, path, partial(unpacked_ids, originator_id))
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


def _message_added_fields(
    data: dict[str, Any], timestamp_us: int, placed_id: str
) -> dict[str, Any]:
    """The fields of a ``MessageAdded`` of this payload (``placed_id``: the id of its place,
    the message's where the payload names none)."""
    unknown = data.keys() - _MESSAGE_KEYS
    if unknown:
        raise ValueError(f"a MessageAdded payload has unknown keys {sorted(unknown)}")
    timestamp = data.get("ts") or from_micros(timestamp_us)
    actor = data["a"]
    if not isinstance(actor, list) or not 1 <= len(actor) <= len(_ACTOR_FIELDS):
        raise TypeError("a MessageAdded payload's actor is not a list of 1 to 5 values")
    message: dict[str, Any] = {
        "id": data.get("i", placed_id),
        "created_at": data.get("at", timestamp),
    }
    if "r" in data:
        message.update(role=data["r"], content=data["c"], name=data.get("n"))
    else:
        item = data["x"]
        if not isinstance(item, dict):
            raise TypeError("a MessageAdded payload's item is not a JSON object")
        role, content, name = describe_item(item)
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


def decode_payloads(
    states: Sequence[bytes], opener: Callable[[dict[str, Any], Any], object] | None = None
) -> list[Any]:
    """The JSON values of consecutive payloads, parsed in one pass, sealed ones opened by
    ``opener(payload, sealed)``. Raises ``ValueError`` if a payload is not JSON, or is
    sealed and there is no ``opener``."""
    decoded: list[Any] = _parsed(_json_array(states))
    if len(decoded) != len(states):
        raise ValueError("a payload holds more than one JSON value")
    try:  # in C: a plain run is not walked again
        maybe_sealed = any(map(contains, decoded, repeat(SEALED)))
    except TypeError:  # a number among them: walk it
        maybe_sealed = True
    if maybe_sealed:
        for data in decoded:
            if isinstance(data, dict) and SEALED in data:
                if opener is None:
                    raise ValueError("a sealed payload, and no way to open it")
                opener(data, data.pop(SEALED))
    return decoded


def trusted_messages(
    states: Sequence[bytes],
    stamps: Sequence[int],
    placed: Sequence[str],
    opener: Callable[[dict[str, Any], Any], object] | None = None,
) -> list[Message]:
    """The messages of consecutive format-2 ``MessageAdded`` rows (payloads, their
    ``timestamp_us``, and the ids of their places: ``message_ids_at`` their versions),
    built without validating them again; equal to what ``decode`` gives (sealed
    payloads opened by ``opener(payload, sealed)``). Raises ``ValueError`` if a payload
    is not JSON, or is sealed and there is no ``opener``."""
    return _messages(decode_payloads(states, opener), stamps, placed)


def stored_run(
    states: Sequence[bytes],
    stamps: Sequence[int],
    placed: Sequence[str],
    opener: Callable[[dict[str, Any], Any], object] | None = None,
) -> MessageRun:
    """``trusted_messages`` as a run for ``Session.replay_run``: plain text messages are
    built only when read (``StoredMessages``), any other run at once. Raises what
    ``trusted_messages`` raises.

    A run of plain text payloads -- a long live buffer -- is parsed and type-checked in
    one pass of msgspec's C code into slotted records (``_PlainText``), with no dict per
    row; any other run (sealed, items, tool calls, a time of its own, anything odd) fails
    that schema and is parsed the general way, which gives the same messages.
    """
    if len(states) != len(stamps):
        raise ValueError(f"{len(states)} payloads but {len(stamps)} timestamps")
    try:
        plain = _plain_texts(_json_array(states))
    except msgspec.DecodeError:  # not that shape (or not JSON): the general way says which
        pass
    else:
        if len(plain) == len(states):  # else a payload held more than one JSON value
            return StoredMessages.of_plain(plain, stamps, placed)
    return parsed_run(states, stamps, placed, opener)


def parsed_run(
    states: Sequence[bytes],
    stamps: Sequence[int],
    placed: Sequence[str],
    opener: Callable[[dict[str, Any], Any], object] | None = None,
) -> MessageRun:
    """``stored_run`` the general way: every payload parsed into a dict (sealed ones
    opened), plain text runs still kept unbuilt. The tests hold the two equal."""
    payloads = decode_payloads(states, opener)
    try:
        return StoredMessages(payloads, stamps, placed)
    except ValueError:
        return BuiltMessages(_messages(payloads, stamps, placed))


def _json_array(states: Sequence[bytes]) -> bytes:
    """The payloads as one JSON array, copied once (a long run's are megabytes)."""
    if not states:
        return b"[]"
    parts = list(states)
    parts[0] = b"[" + parts[0]
    parts[-1] = parts[-1] + b"]"
    return b",".join(parts)


class _PlainText(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """The payload of a plain text message, as ``_plain_message`` writes it: the shape
    ``StoredMessages`` takes (the actor is not read back: a run keeps messages only)."""

    a: msgspec.Raw
    r: Role
    c: str
    i: str | msgspec.UnsetType = msgspec.UNSET  # unset: the id of the row's place
    n: str | None = None
    k: str | None = None


_plain_texts = msgspec.json.Decoder(list[_PlainText]).decode
_ID, _ROLE, _CONTENT, _NAME = attrgetter("i"), attrgetter("r"), attrgetter("c"), attrgetter("n")
_get_id = methodcaller("get", "i", _NO_ID)


def _placed(ids: list[Any], placed: Sequence[str]) -> list[Any]:
    """A run's stored ids (``_NO_ID`` where a payload names none) with the ids of their
    places (``placed``) where they name none."""
    if len(ids) != len(placed):
        raise ValueError(f"{len(ids)} payloads but {len(placed)} places")
    unset = ids.count(_NO_ID)
    if not unset:
        return ids
    if unset == len(ids):  # written since ids came from places: none named
        return list(placed)
    return [p if i is _NO_ID else i for i, p in zip(ids, placed, strict=True)]


def _messages(
    decoded: Sequence[Any], stamps: Sequence[int], placed: Sequence[str]
) -> list[Message]:
    if not len(decoded) == len(stamps) == len(placed):
        raise ValueError(
            f"{len(decoded)} payloads, {len(stamps)} timestamps and {len(placed)} places"
        )
    messages: list[Message] = []
    append, built = messages.append, _built
    last_us = -1
    when: datetime | None = None
    plain = _PLAIN_KEYS
    for data, us, place in zip(decoded, stamps, placed, strict=True):
        if not isinstance(data, dict) or not data.keys() <= plain:
            append(Message.model_validate(_message_added_fields(data, us, place)["message"]))
            continue
        if us != last_us:
            when, last_us = from_micros(us), us
        item = data.get("x")
        if "r" in data:
            role, content, name = data["r"], data["c"], data.get("n")
        else:
            role, content, name = describe_item(item)  # type: ignore[arg-type]
        append(built(data.get("i", place), role, content, when, name, None, item))
    return messages


def _built(
    id_: str,
    role: str,
    content: str,
    created_at: datetime | None,
    name: str | None,
    tool_call: ToolCall | None,
    item: dict[str, Any] | None,
) -> Message:
    """A ``Message`` of these (valid) fields, equal to the validated one, without
    validating them again: the fast decodes here build every message through this."""
    return assemble(Message, {
        "id": id_, "role": role, "content": content, "created_at": created_at,
        "name": name, "tool_call": tool_call, "item": item,
    })  # fmt: skip


class StoredMessages:
    """A run of consecutive format-2 ``MessageAdded`` payloads of plain text messages (as
    ``decode_payloads`` gives them, or parsed by msgspec: ``of_plain``), whose messages
    are built only when read: a ``chatledger.domain.message_runs.MessageRun``.

    It keeps each message's fields in columns (lists of strings, which the
    cyclic garbage collector need not walk; the parsed payloads are dropped)
    and counts ids, tokens and user turns in passes of C code: a load of a long
    live buffer does little else. Each message is built, equal to what
    ``decode`` gives, when asked for. Only the plain shape is taken -- role and
    text stored, no item, tool call or timestamp of its own -- so that counting
    needs no per-message Python: anything else raises ``ValueError``, and
    ``trusted_messages`` builds it instead.
    """

    __slots__ = (
        "_contents", "_names", "_quarters", "_roles", "_stamps", "_when", "ids", "tokens",
        "user_turns",
    )  # fmt: skip

    def __init__(self, payloads: list[Any], stamps: Sequence[int], placed: Sequence[str]) -> None:
        if len(payloads) != len(stamps):
            raise ValueError(f"{len(payloads)} payloads but {len(stamps)} timestamps")
        try:  # each a pass in C; anything but a JSON object fails the itemgetter
            if not all(map(_TEXT_KEYS.issuperset, payloads)):
                raise ValueError("not a run of plain text messages")
            ids: list[str] = _placed(list(map(_get_id, payloads)), placed)
            roles: list[str] = list(map(itemgetter("r"), payloads))
            contents: list[str] = list(map(itemgetter("c"), payloads))
            names: list[str | None] | None = None  # None: no message has a name
            if any(map(contains, payloads, repeat("n"))):
                names = list(map(_get_name, payloads))
            if not (
                set(map(type, ids)) <= {str}
                and set(map(type, contents)) <= {str}
                and (names is None or set(map(type, names)) <= {str, type(None)})
                and set(roles) <= _ROLES
            ):
                raise ValueError("a message field of the wrong type")
        except (KeyError, TypeError, AttributeError) as error:  # a key missing, not an object
            raise ValueError(f"not a run of plain text messages ({error!r})") from None
        self._hold(ids, roles, contents, names, stamps)

    @classmethod
    def of_plain(
        cls, payloads: list[_PlainText], stamps: Sequence[int], placed: Sequence[str]
    ) -> StoredMessages:
        """The run of payloads msgspec parsed and checked already (``stored_run``)."""
        run = cls.__new__(cls)
        names: list[str | None] = list(map(_NAME, payloads))
        run._hold(
            _placed(list(map(_ID, payloads)), placed), list(map(_ROLE, payloads)),
            list(map(_CONTENT, payloads)),
            None if names.count(None) == len(names) else names, stamps,
        )  # fmt: skip
        return run

    def _hold(
        self,
        ids: list[str],
        roles: list[str],
        contents: list[str],
        names: list[str | None] | None,
        stamps: Sequence[int],
    ) -> None:
        self._roles = roles
        self._contents = contents
        self._names = names
        self._stamps = stamps
        self._when: tuple[int, datetime] = (-1, _EPOCH_UTC)
        self._quarters = text_quarters(contents)  # kept: a context counts the newest again
        self.ids = ids
        self.tokens = quarters_tokens(self._quarters)
        self.user_turns = roles.count("user")

    def __len__(self) -> int:
        return len(self.ids)

    def message(self, index: int) -> Message:
        us = self._stamps[index]
        last = self._when  # messages written together share their time: one datetime
        if last[0] != us:
            last = self._when = (us, from_micros(us))
        when = last[1]
        name = None if self._names is None else self._names[index]
        return _built(
            self.ids[index], self._roles[index], self._contents[index], when, name, None, None
        )

    def messages(self) -> list[Message]:
        return self._between(0, len(self.ids))

    def newest(self, budget: int) -> tuple[list[Message], int]:
        """The newest messages that fit in ``budget`` tokens (``MessageRun.newest``): their
        count found from the texts' lengths, then only they are built."""
        end = len(self.ids)
        count, used = newest_fitting(end, self.tokens, self._tokens_between, budget)
        return self._between(end - count, end), used

    def _tokens_between(self, start: int, end: int) -> list[int]:
        return tokens_of_quarters(self._quarters[start:end])

    def _between(self, start: int, end: int) -> list[Message]:
        """Messages ``start`` to ``end``, built at once."""
        count = end - start
        names = repeat(None, count) if self._names is None else self._names[start:end]
        return _assembled(
            self.ids[start:end], self._roles[start:end], self._contents[start:end],
            from_micros_all(self._stamps[start:end]), names, repeat(None, count),
        )  # fmt: skip


def _assembled(
    ids: Iterable[str],
    roles: Iterable[str],
    contents: Iterable[str],
    times: Iterable[datetime],
    names: Iterable[str | None],
    tool_calls: Iterable[ToolCall | None],
) -> list[Message]:
    """Messages (no item) from their fields in columns, built at once (``assemble_all``)."""
    with without_cyclic_gc():  # many objects, all kept
        return assemble_all(Message, [
            {"id": id_, "role": role, "content": content, "created_at": when, "name": name,
             "tool_call": tool, "item": None}
            for id_, role, content, when, name, tool in zip(
                ids, roles, contents, times, names, tool_calls, strict=True
            )
        ])  # fmt: skip


_get_name = methodcaller("get", "n")


class BuiltMessages:
    """A run of messages built already (a ``MessageRun``)."""

    __slots__ = ("_messages", "ids", "tokens", "user_turns")

    def __init__(self, messages: list[Message], tokens: list[int] | None = None) -> None:
        """``tokens``: each message's ``Message.tokens``, if counted already."""
        self._messages = messages
        self.ids = [m.id for m in messages]
        self.tokens = sum(m.tokens for m in messages) if tokens is None else sum(tokens)
        self.user_turns = sum(1 for m in messages if m.role == "user")

    def __len__(self) -> int:
        return len(self._messages)

    def message(self, index: int) -> Message:
        return self._messages[index]

    def messages(self) -> list[Message]:
        return self._messages

    def newest(self, budget: int) -> tuple[list[Message], int]:
        return newest_that_fit(reversed(self._messages), budget)


_actors: dict[tuple[str, ...], Principal] = {}
# The datetime of the last timestamp decoded (rows written together share one), as one
# tuple: replaced whole, so threads never see a time with another's datetime.
_last_when: list[tuple[int, datetime]] = [(0, from_micros(0))]


def message_added_of_row(
    state: bytes, originator_id: UUID, version: int, timestamp_us: int
) -> MessageAdded | None:
    """``decode`` of a format-2 ``MessageAdded`` row, equal to it, without validating the
    event through pydantic -- or None where this cannot say so for sure (sealed,
    timestamps of its own, anything unusual), and ``decode`` must.

    It checks what validation would: every field's type, the role, the id's
    length; an actor and a tool call are validated by their own models (an
    actor once per distinct one: a session has few). For readers of every row
    (``verify(deep=True)``, imports), which must refuse what ``decode`` refuses.
    """
    try:
        # pydantic's parser: json's values (tested), in half the time; it refuses what
        # json refuses (bad UTF-8, a lone surrogate, control characters) or more.
        data = from_json(state)
    except (ValueError, TypeError):  # decode says what is wrong with it
        return None
    match data:  # the usual shape, its types checked in the match
        case {"a": list() as actor, "r": str() as role, "c": str() as text}:
            id_ = data.get("i", _NO_ID)
            if id_ is _NO_ID:  # the id of its place
                id_, usual = message_id_at(originator_id, version), 3
            elif type(id_) is str:
                usual = 4
            else:
                return None
            if len(data) == usual:
                name = key = tool = item = None
            elif data.keys() <= _CHECKED_KEYS:
                name, key, tool, item = data.get("n"), data.get("k"), data.get("t"), data.get("x")
                if not (
                    (name is None or type(name) is str)
                    and (key is None or type(key) is str)
                    and (item is None or type(item) is dict)
                    and ("x" not in data or item is not None)
                    and ("t" not in data or tool is not None)
                ):
                    return None
            else:
                return None
        case _:
            return _item_only(data, originator_id, version, timestamp_us)
    if not (0 < len(id_) <= MESSAGE_ID_CHARS and role in _ROLES):
        return None
    return _built_event(originator_id, version, timestamp_us, actor, key, id_, role, text,
                        name, tool, item)  # fmt: skip


def _item_only(
    data: Any, originator_id: UUID, version: int, timestamp_us: int
) -> MessageAdded | None:
    """``message_added_of_row`` of a framework item stored without its derived text."""
    if type(data) is not dict or not data.keys() <= _ITEM_KEYS:
        return None
    match data:
        case {"a": list() as actor, "x": dict() as item}:
            id_ = data.get("i", _NO_ID)
            if id_ is _NO_ID:  # the id of its place
                id_ = message_id_at(originator_id, version)
            key, tool = data.get("k"), data.get("t")
            if not (
                type(id_) is str
                and (key is None or type(key) is str)
                and ("t" not in data or tool is not None)
            ):
                return None
        case _:
            return None
    role, text, name = describe_item(item)
    if not (
        0 < len(id_) <= MESSAGE_ID_CHARS
        and role in _ROLES
        and type(text) is str
        and (name is None or type(name) is str)
    ):
        return None
    return _built_event(originator_id, version, timestamp_us, actor, key, id_, role, text,
                        name, tool, item)  # fmt: skip


def _built_event(
    originator_id: UUID,
    version: int,
    timestamp_us: int,
    actor: list[Any],
    key: str | None,
    id_: str,
    role: str,
    text: str,
    name: str | None,
    tool: Any,
    item: dict[str, Any] | None,
) -> MessageAdded | None:
    principal = _actor(actor)
    if principal is None:
        return None
    tool_call = None
    if tool is not None:
        try:
            tool_call = ToolCall.model_validate(tool)
        except ValidationError:
            return None
    last = _last_when[0]
    if last[0] != timestamp_us:
        last = _last_when[0] = (timestamp_us, from_micros(timestamp_us))
    when = last[1]
    return message_added(
        originator_id, version, when, principal, key,
        _built(id_, role, text, when, name, tool_call, item),
    )  # fmt: skip


def message_added(
    originator_id: UUID,
    version: int,
    timestamp: datetime,
    actor: Principal,
    key: str | None,
    message: Message,
) -> MessageAdded:
    """The ``MessageAdded`` of these (valid) values, without validating them again."""
    return assemble(MessageAdded, {
        "originator_id": originator_id, "originator_version": version, "timestamp": timestamp,
        "actor": actor, "idempotency_key": key, "message": message,
    })  # fmt: skip


def _actor(stored: list[Any]) -> Principal | None:
    """The validated principal of a stored actor list (None if it is not one)."""
    try:
        values = tuple(stored)
        found = _actors.get(values)
    except TypeError:  # an unhashable value: not a principal's
        return None
    if found is None:  # kept ones hold strings only: none equals another JSON value
        if not 1 <= len(values) <= len(_ACTOR_FIELDS) or {*map(type, values)} != {str}:
            return None
        try:
            found = Principal.model_validate(dict(zip(_ACTOR_FIELDS, values, strict=False)))
        except ValidationError:
            return None
        if len(_actors) >= _ACTORS_KEPT:
            _actors.clear()
        _actors[values] = found
    return found


class CheckedMessages:
    """What ``checked_messages`` reads of a run of rows, one entry per row, as columns: a
    ``MessageRun`` of its messages, with what else the rows say.

    Its messages are built only when read (``message``, ``messages``): every field
    was checked already, and a deep check whose run a commit folds away never reads
    them -- building one is most of what a run of rows costs after parsing it.
    """

    __slots__ = (
        "_built", "_contents", "_names", "_stamps", "_whens", "actors", "each_tokens", "ids",
        "keys", "roles", "tokens", "tool_calls", "user_turns",
    )  # fmt: skip

    def __init__(
        self,
        ids: list[str],
        roles: list[str],
        contents: list[str],
        names: list[str | None] | None,
        stamps: Sequence[int],
        tool_calls: list[ToolCall | None],
        actors: list[Principal],
        keys: list[str | None],
    ) -> None:
        """``names`` None: no message has a name. Counted from the columns."""
        self._contents = contents
        self._names = names
        self._stamps = stamps
        self._whens = {us: from_micros(us) for us in set(stamps)}  # rows share their time
        self._built: list[Message] | None = None
        self.ids = ids
        self.roles = roles
        self.tool_calls = tool_calls
        self.actors = actors
        self.keys = keys  # idempotency keys
        self.each_tokens = tokens_of_texts(contents)  # each message's ``Message.tokens``
        self.tokens = sum(self.each_tokens)
        self.user_turns = roles.count("user")

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def last_time(self) -> datetime:
        """The time of the last message (a checked message's is its event's)."""
        return self._whens[self._stamps[-1]]

    def message(self, index: int) -> Message:
        return _built(
            self.ids[index], self.roles[index], self._contents[index],
            self._whens[self._stamps[index]],
            None if self._names is None else self._names[index], self.tool_calls[index], None,
        )  # fmt: skip

    def messages(self) -> list[Message]:
        """Every message, built in passes of C code on the first call (then kept)."""
        if self._built is None:
            names = repeat(None, len(self.ids)) if self._names is None else self._names
            self._built = _assembled(
                self.ids, self.roles, self._contents,
                map(self._whens.__getitem__, self._stamps), names, self.tool_calls,
            )  # fmt: skip
        return self._built

    def newest(self, budget: int) -> tuple[list[Message], int]:
        return newest_that_fit(reversed(self.messages()), budget)

    def buffer_records(self) -> list[_BufferMessage]:
        """Each message as ``buffer_json`` writes it, from the columns (none built)."""
        count = len(self.ids)
        whens = {us: msgspec.Raw(_json_of(when)) for us, when in self._whens.items()}
        tools: Iterable[msgspec.Raw]
        if self.tool_calls.count(None) == count:
            tools = repeat(_NULL, count)
        else:  # a run has few distinct tool calls (the codec keeps one of each)
            distinct = {id(tool): tool for tool in self.tool_calls}
            of_id = {
                key: _NULL if tool is None else msgspec.Raw(_tool_call_json(tool))
                for key, tool in distinct.items()
            }
            tools = map(of_id.__getitem__, map(id, self.tool_calls))
        return list(map(
            _BufferMessage, self.ids, self.roles, self._contents,
            map(whens.__getitem__, self._stamps),
            repeat(None, count) if self._names is None else self._names, tools,
        ))  # fmt: skip


class _BufferMessage(msgspec.Struct, gc=False):
    """A ``Message`` without an item in the JSON pydantic writes of it: every field, in the
    model's order (``created_at`` and ``tool_call`` as pydantic writes them)."""

    id: str
    role: str
    content: str
    created_at: msgspec.Raw
    name: str | None
    tool_call: msgspec.Raw
    item: None = None


_NULL = msgspec.Raw(b"null")
_json_of = to_json  # pydantic's JSON of a value (a datetime, here)
_message_json = Message.__pydantic_serializer__.to_json
_tool_call_json = ToolCall.__pydantic_serializer__.to_json
_encode_records = msgspec.json.Encoder().encode


def buffer_json(built: Sequence[Message], runs: Sequence[MessageRun]) -> bytes:
    """The JSON array of a buffer of ``built`` messages followed by those of ``runs``, as
    a ``SessionState`` holds it: a checked run's messages written from its columns, none
    built (msgspec escapes strings as pydantic does; the tests hold the two equal), the
    others by pydantic.

    Raises ``ValueError`` for text that JSON cannot hold (a lone surrogate)."""
    records: list[Any] = list(map(msgspec.Raw, map(_message_json, built)))
    for run in runs:
        if isinstance(run, CheckedMessages):
            records += run.buffer_records()
        else:
            records += map(msgspec.Raw, map(_message_json, run.messages()))
    return _encode_records(records)


_StoredId = Annotated[str, msgspec.Meta(min_length=1, max_length=MESSAGE_ID_CHARS)]  # characters


class _RunMessage(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A message payload in the shapes ``checked_messages`` takes, its types checked as it is
    parsed: role and text stored, no item, no time of its own (``at``, ``ts``: unknown
    keys here), a tool call kept as its JSON (``t``; empty if none)."""

    a: tuple[str, ...]
    r: Role
    c: str
    i: _StoredId | msgspec.UnsetType = msgspec.UNSET  # unset: the id of the row's place
    n: str | None = None
    t: msgspec.Raw = msgspec.Raw()
    k: str | None = None


# One payload per call, never a run joined into one array: there, a payload that is not
# JSON on its own could be made to parse together with its neighbour.
_run_message = msgspec.json.Decoder(_RunMessage).decode


def checked_messages(
    states: Sequence[Any], stamps: Sequence[Any], placed: Sequence[str]
) -> CheckedMessages | None:
    """``message_added_of_row`` of each of consecutive format-2 ``MessageAdded`` rows
    (payloads and their ``timestamp_us``), checked in passes over the whole run: the same
    messages, actors and idempotency keys -- or None where any row needs it to say.

    It takes a part of the shapes that one takes (role and text stored, no item, no
    time of its own, a tool call if any validated by its model, an actor once per
    distinct one), and checks each as it does: msgspec parses each payload into a
    slotted record, checking every type as it goes (and refusing what that parser
    refuses: bad UTF-8, a lone surrogate, control characters; a key given twice must
    hold a valid value both times), the rest in passes of C code. The deep check reads
    every message of a store this way.
    """
    if not states or set(map(type, states)) != {bytes} or set(map(type, stamps)) != {int}:
        return None
    try:  # each record's fields, as columns (astuple and zip: C)
        columns = list(map(list, zip(*map(astuple, map(_run_message, states)), strict=True)))
    except msgspec.DecodeError:  # not JSON, or not this shape: one by one says which
        return None
    stored_actors, roles, contents, stored_ids, stored_names, stored_tools, keys = columns
    ids: list[str] = _placed(stored_ids, placed)
    actors = _principals_of(stored_actors)
    if actors is None:
        return None
    # None: no message has a name
    names = None if stored_names.count(None) == len(stored_names) else stored_names
    tools: list[ToolCall | None] = [None] * len(ids)
    at = list(compress(range(len(ids)), stored_tools))  # a Raw is empty where there is none
    if at:
        reported = list(map(bytes, map(stored_tools.__getitem__, at)))
        of_json: dict[bytes, ToolCall] = {}
        for stored in set(reported):  # a run reports few distinct tool calls
            tool = _tool_call_of_json(stored)
            if tool is None:  # (a stored null is no tool call: message_added_of_row declines it)
                return None
            of_json[stored] = tool
        deque(map(tools.__setitem__, at, map(of_json.__getitem__, reported)), maxlen=0)
    return CheckedMessages(
        ids, roles, contents, names, stamps, tools, actors, keys,
    )  # fmt: skip


def _principals_of(stored: list[tuple[str, ...]]) -> list[Principal] | None:
    """The validated principal of each row's stored actor (None if one is not one), each
    distinct actor validated once: a run of one actor -- the usual -- told by comparing
    (in C), others through a dict of the few distinct ones."""
    first = stored[0]
    if stored.count(first) == len(stored):
        principal = _actor(list(first))
        return None if principal is None else [principal] * len(stored)
    principals: dict[tuple[str, ...], Principal] = {}
    for values in set(stored):  # a session has few actors
        found = _actor(list(values))
        if found is None:
            return None
        principals[values] = found
    return list(map(principals.__getitem__, stored))


_json_tool_calls: dict[bytes, ToolCall] = {}


def _tool_call_of_json(stored: bytes) -> ToolCall | None:
    """``_tool_call`` of a tool call's JSON as stored, kept by those bytes (the same bytes
    parse to the same value)."""
    found = _json_tool_calls.get(stored)
    if found is None:
        try:
            found = _tool_call(from_json(stored))
        except ValueError:
            return None
        if found is None:
            return None
        if len(_json_tool_calls) >= _TOOL_CALLS_KEPT:
            _json_tool_calls.clear()
        _json_tool_calls[stored] = found
    return found


_tool_calls: dict[tuple[Any, ...], ToolCall] = {}
_TOOL_CALLS_KEPT = 1024


def _tool_call(stored: Any) -> ToolCall | None:
    """The validated ``ToolCall`` of a stored tool call (None if it is not one), validated
    once per distinct one: the same keys, values and types of values (``1``, ``1.0`` and
    ``True`` are equal, but need not validate alike)."""
    key: tuple[Any, ...] | None = None
    if type(stored) is dict:
        try:
            key = (*stored.items(), *map(type, stored.values()))
            found = _tool_calls.get(key)
        except TypeError:  # an unhashable value
            key = found = None
        if found is not None:
            return found
    if stored is None:
        return None
    try:
        found = ToolCall.model_validate(stored)
    except ValidationError:
        return None
    if key is not None:
        if len(_tool_calls) >= _TOOL_CALLS_KEPT:
            _tool_calls.clear()
        _tool_calls[key] = found
    return found


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
