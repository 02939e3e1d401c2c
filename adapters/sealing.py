"""Field-level encryption of session content in stored payloads: what is sealed, and how.

A sealed payload is the event's (or snapshot's, or archive body's) JSON with
its content taken out -- message text, names and items; archive overviews,
abstracts and non-numeric metadata; state values; the task state; extraction
summaries; client contexts -- and put, as one JSON list, into one AES-256-GCM
ciphertext: ``"sealed": {"k": <key id>, "c": <base64 of nonce, ciphertext and
tag>, "t": [<tokens of each message>]}``. Everything else stays readable where
it was: ids, roles, times, actors, tool calls, token counts, state keys,
numbers in archive metadata. Where content was taken out its place says so
(a message without ``content``, an archive without ``overview``, a state as
the list of its keys, ``null`` for a task, a context or a text), so opening
knows exactly what to put back. The associated data binds each ciphertext to
its session and kind of row (``row_aad``), so a ciphertext moved to another
session does not open.

Opening with the key gives back the exact payload; without it (the key was
destroyed: the content is erased) every sealed value takes its erased form,
equal to what ``chatledger.domain.erased_forms`` makes of the value in memory.
"""

from __future__ import annotations

import base64
import functools
import json
import os
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic_core import to_json

from chatledger.domain.erased_forms import (
    ERASED_CONTEXT,
    ERASED_TASK,
    erased_item,
    erased_message,
    is_number,
)
from chatledger.domain.events import (
    ArchiveMerged,
    Committed,
    ExtractionAdvanced,
    Forked,
    MessageAdded,
    Restarted,
    Started,
    StateChanged,
    TailReplaced,
    TaskStateChanged,
)
from chatledger.domain.ports import ArchiveBody
from chatledger.domain.session import Session
from chatledger.domain.values import ERASED, Message, message_tokens

SEALED = "sealed"
"""The payload field holding the ciphertext (no event has a field of that name)."""
_NONCE = 12
_ERASED_TASK = ERASED_TASK.model_dump(mode="json")
_ERASED_CONTEXT = ERASED_CONTEXT.model_dump(mode="json")

_encode_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
Ciphers = Callable[[str], AESGCM | None]
"""Finds the cipher of a key id; ``None`` once the key is destroyed (content erased)."""
Container = dict[str, Any] | list[Any]


class Sealing:
    """What a kind of value keeps in the clear and seals (``take``), puts back (``put``),
    and reads as without its key (``blank``). A field a payload leaves out (stored form 2
    leaves out defaults: an empty state, a default task) holds nothing to seal."""

    def take(self, c: Any, f: Any, secrets: list[Any], tokens: list[int]) -> None:
        raise NotImplementedError

    def put(self, c: Any, f: Any, secrets: Iterator[Any]) -> None:
        raise NotImplementedError

    def blank(self, c: Any, f: Any, tokens: Iterator[int]) -> None:
        raise NotImplementedError


def _absent(c: Any, f: Any) -> bool:
    return isinstance(c, dict) and f not in c


class _Message(Sealing):
    """Text, name and item; the id, role, time, tool call -- and the tokens -- stay."""

    def take(self, c: Any, f: Any, secrets: list[Any], tokens: list[int]) -> None:
        if _absent(c, f):
            return
        m = c[f]
        content, name, item = m.pop("content"), m.pop("name", None), m.pop("item", None)
        tokens.append(message_tokens(content, item))
        secrets.append([content, name, item])

    def put(self, c: Any, f: Any, secrets: Iterator[Any]) -> None:
        if _absent(c, f):
            return
        m = c[f]
        if "content" not in m:
            m["content"], m["name"], m["item"] = next(secrets)

    def blank(self, c: Any, f: Any, tokens: Iterator[int]) -> None:
        if _absent(c, f):
            return
        m = c[f]
        if "content" not in m:
            m.update(content=ERASED, name=None, item=erased_item(next(tokens)))


class _Archive(Sealing):
    """Overview, abstract and (if it holds anything but numbers) the metadata."""

    def take(self, c: Any, f: Any, secrets: list[Any], tokens: list[int]) -> None:
        if _absent(c, f):
            return
        a = c[f]
        metadata = a.get("metadata", {})
        hidden = not all(is_number(v) for v in metadata.values())
        secrets.append([a.pop("overview"), a.pop("abstract"), metadata if hidden else None])
        if hidden:
            a["metadata"] = {k: v for k, v in metadata.items() if is_number(v)}

    def put(self, c: Any, f: Any, secrets: Iterator[Any]) -> None:
        if _absent(c, f):
            return
        a = c[f]
        if "overview" not in a:
            a["overview"], a["abstract"], metadata = next(secrets)
            if metadata is not None:
                a["metadata"] = metadata

    def blank(self, c: Any, f: Any, tokens: Iterator[int]) -> None:
        if _absent(c, f):
            return
        a = c[f]
        if "overview" not in a:
            a["overview"] = a["abstract"] = ERASED


class _State(Sealing):
    """The values of a key-value state; the keys stay (as a list, which marks it sealed)."""

    def take(self, c: Any, f: Any, secrets: list[Any], tokens: list[int]) -> None:
        if _absent(c, f):
            return
        state = c[f]
        if state:
            secrets.append(list(state.values()))
            c[f] = list(state)

    def put(self, c: Any, f: Any, secrets: Iterator[Any]) -> None:
        if _absent(c, f):
            return
        if isinstance(c[f], list):
            c[f] = dict(zip(c[f], next(secrets), strict=True))

    def blank(self, c: Any, f: Any, tokens: Iterator[int]) -> None:
        if _absent(c, f):
            return
        if isinstance(c[f], list):
            c[f] = dict.fromkeys(c[f], ERASED)


class _Whole(Sealing):
    """A value sealed whole unless it is empty (``null`` in its place marks it sealed)."""

    def __init__(self, erased: Any) -> None:
        self.erased = erased

    def take(self, c: Any, f: Any, secrets: list[Any], tokens: list[int]) -> None:
        if _absent(c, f):
            return
        value = c[f]
        if value and (not isinstance(value, dict) or any(value.values())):
            secrets.append(value)
            c[f] = None

    def put(self, c: Any, f: Any, secrets: Iterator[Any]) -> None:
        if _absent(c, f):
            return
        if c[f] is None:
            c[f] = next(secrets)

    def blank(self, c: Any, f: Any, tokens: Iterator[int]) -> None:
        if _absent(c, f):
            return
        if c[f] is None:
            c[f] = json.loads(json.dumps(self.erased))  # a fresh copy


class _Each(Sealing):
    """Every entry of a list, as ``kind``."""

    def __init__(self, kind: Sealing) -> None:
        self.kind = kind

    def take(self, c: Any, f: Any, secrets: list[Any], tokens: list[int]) -> None:
        if _absent(c, f):
            return
        entries = c[f]
        for i in range(len(entries)):
            self.kind.take(entries, i, secrets, tokens)

    def put(self, c: Any, f: Any, secrets: Iterator[Any]) -> None:
        if _absent(c, f):
            return
        entries = c[f]
        for i in range(len(entries)):
            self.kind.put(entries, i, secrets)

    def blank(self, c: Any, f: Any, tokens: Iterator[int]) -> None:
        if _absent(c, f):
            return
        entries = c[f]
        for i in range(len(entries)):
            self.kind.blank(entries, i, tokens)


Parts = tuple[tuple[str, Sealing], ...]


class _Nested(Sealing):
    """A JSON object with sealed parts of its own (a snapshot's session state)."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts

    def take(self, c: Any, f: Any, secrets: list[Any], tokens: list[int]) -> None:
        if _absent(c, f):
            return
        for field, kind in self.parts:
            kind.take(c[f], field, secrets, tokens)

    def put(self, c: Any, f: Any, secrets: Iterator[Any]) -> None:
        if _absent(c, f):
            return
        for field, kind in self.parts:
            kind.put(c[f], field, secrets)

    def blank(self, c: Any, f: Any, tokens: Iterator[int]) -> None:
        if _absent(c, f):
            return
        for field, kind in self.parts:
            kind.blank(c[f], field, tokens)


MESSAGE = _Message()
MESSAGES = _Each(MESSAGE)
ARCHIVE = _Archive()
STATE = _State()
TEXT = _Whole(ERASED)
TASK = _Whole(_ERASED_TASK)
CONTEXT = _Whole(_ERASED_CONTEXT)
_SESSION: Parts = (
    ("context", CONTEXT),
    ("buffer", MESSAGES),
    ("archives", _Each(ARCHIVE)),
    ("state", STATE),
    ("task", TASK),
    ("extraction_summary", TEXT),
)
PARTS: dict[type[Any], Parts] = {
    Started: (("context", CONTEXT),),
    Restarted: (("context", CONTEXT),),
    Forked: _SESSION,
    MessageAdded: (("message", MESSAGE),),
    TailReplaced: (("messages", MESSAGES),),
    Committed: (("archive", ARCHIVE),),
    ArchiveMerged: (("archive", ARCHIVE),),
    StateChanged: (("changes", STATE),),
    TaskStateChanged: (("task", TASK),),
    ExtractionAdvanced: (("summary", TEXT),),
    Session.Snapshot: (("state", _Nested(_SESSION)),),
}
"""The content of each kind of stored payload; payloads of other kinds hold none."""


def row_aad(originator_id: UUID, topic: str) -> bytes:
    """The associated data of a stored row's ciphertext: its session and its kind (topic).

    Not its version: a row moved within its session is what the hash chain (events)
    and the replay check (snapshots) report, each in its own words."""
    return originator_id.bytes + _topic_bytes(topic)


@functools.lru_cache(maxsize=64)
def _topic_bytes(topic: str) -> bytes:
    return topic.encode()


def seal(parts: Parts, payload: dict[str, Any], key_id: str, cipher: AESGCM, aad: bytes) -> bool:
    """Take the content out of ``payload`` and add it back sealed; ``False`` if it had none."""
    secrets: list[Any] = []
    tokens: list[int] = []
    for field, kind in parts:
        kind.take(payload, field, secrets, tokens)
    if not secrets:
        return False
    nonce = os.urandom(_NONCE)
    plain = _encode_json(secrets).encode()
    sealed: dict[str, Any] = {
        "k": key_id,
        "c": base64.b64encode(nonce + cipher.encrypt(nonce, plain, aad)).decode(),
    }
    if tokens:
        sealed["t"] = tokens
    payload[SEALED] = sealed
    return True


def open_sealed(
    parts: Parts, payload: dict[str, Any], sealed: Any, ciphers: Ciphers, aad: bytes
) -> bool:
    """Put the content back into ``payload`` (``sealed`` popped from it): ``True``; or,
    without the key, every sealed value in its erased form: ``False``."""
    key_id, data, tokens = sealed["k"], sealed["c"], sealed.get("t", [])
    cipher = ciphers(str(key_id))
    if cipher is None:
        counts = iter(tokens)
        for field, kind in parts:
            kind.blank(payload, field, counts)
        return False
    raw = base64.b64decode(data)
    try:
        plain = cipher.decrypt(raw[:_NONCE], raw[_NONCE:], aad)
    except InvalidTag:
        raise ValueError(
            f"the sealed content does not open with key {key_id} (altered, or moved "
            "from another row)"
        ) from None
    secrets = iter(json.loads(plain))
    for field, kind in parts:
        kind.put(payload, field, secrets)
    return True


def seal_compact_message(
    payload: dict[str, Any], message: Message, key_id: str, cipher: AESGCM, aad: bytes
) -> None:
    """Seal a ``MessageAdded`` payload of stored form 2 (``chatledger.adapters.codec``): its
    text, name and item (``c``, ``n``, ``x``) go into the ciphertext; the role stays, always
    written out (``r``), since the item it might be read from is sealed."""
    for field in ("c", "n", "x"):
        payload.pop(field, None)
    payload["r"] = message.role
    nonce = os.urandom(_NONCE)
    plain = to_json([[message.content, message.name, message.item]])  # plain JSON (checked)
    data = base64.b64encode(nonce + cipher.encrypt(nonce, plain, aad)).decode()
    payload[SEALED] = {"k": key_id, "c": data, "t": [message.tokens]}


def open_compact_message(
    payload: dict[str, Any], sealed: Any, ciphers: Ciphers, aad: bytes
) -> bool:
    """Put a sealed form-2 ``MessageAdded`` payload's text, name and item back (``sealed``
    popped from it): ``True``; without the key, their erased form: ``False``."""
    cipher = ciphers(str(sealed["k"]))
    if cipher is None:
        payload["c"] = ERASED
        payload.pop("n", None)
        payload["x"] = erased_item(int(sealed.get("t", [1])[0]))
        return False
    raw = base64.b64decode(sealed["c"])
    try:
        plain = cipher.decrypt(raw[:_NONCE], raw[_NONCE:], aad)
    except InvalidTag:
        raise ValueError(
            f"the sealed content does not open with key {sealed['k']} (altered, or moved "
            "from another session)"
        ) from None
    ((content, name, item),) = json.loads(plain)
    payload["c"] = content
    if name is not None:
        payload["n"] = name
    if item is not None:
        payload["x"] = item
    return True


def holds_plain_content(parts: Parts | None, payload: dict[str, Any]) -> bool:
    """Whether an unsealed payload holds content in the clear (written unencrypted);
    ``parts`` None: a ``MessageAdded`` of stored form 2."""
    if SEALED in payload:
        return False
    if parts is None:
        return "c" in payload or "x" in payload
    copy = json.loads(json.dumps(payload))
    secrets: list[Any] = []
    for field, kind in parts:
        kind.take(copy, field, secrets, [])
    return bool(secrets)


def key_id_of(payload: dict[str, Any]) -> str | None:
    """The id of the key a stored payload is sealed with (``None``: not sealed)."""
    sealed = payload.get(SEALED)
    return str(sealed["k"]) if isinstance(sealed, dict) and "k" in sealed else None


def seal_body(body: ArchiveBody, key_id: str, cipher: AESGCM) -> ArchiveBody:
    """An archive body for an archive store: its erased form, with the whole body sealed in
    ``sealed`` (``<key id>:<base64>``; bound to the session and archive ids)."""
    nonce = os.urandom(_NONCE)
    plain = body.model_dump_json().encode()
    data = nonce + cipher.encrypt(nonce, plain, _body_aad(body))
    return body.model_copy(
        update={
            "messages": tuple(erased_message(m) for m in body.messages),
            "overview": ERASED if body.overview else "",
            "abstract": ERASED if body.abstract else "",
            "sealed": f"{key_id}:{base64.b64encode(data).decode()}",
        }
    )


def open_body(body: ArchiveBody, ciphers: Ciphers) -> ArchiveBody:
    """The body as it was sealed; without its key (erased), the body as stored."""
    if body.sealed is None:
        return body
    key_id, _, data = body.sealed.rpartition(":")
    cipher = ciphers(key_id)
    if cipher is None:
        return body
    raw = base64.b64decode(data)
    try:
        plain = cipher.decrypt(raw[:_NONCE], raw[_NONCE:], _body_aad(body))
    except InvalidTag:
        raise ValueError(
            f"archive body {body.archive_id} does not open with key {key_id} (altered?)"
        ) from None
    return ArchiveBody.model_validate_json(plain)


def _body_aad(body: ArchiveBody) -> bytes:
    return f"{body.session_id}/{body.archive_id}".encode()
