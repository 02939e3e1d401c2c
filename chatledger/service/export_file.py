"""The export file: a header line, then one line per event (with its data key, if it brings one).

``header`` and ``event_line`` write the lines ``chatledger export`` prints;
``read`` reads them back for ``import``, strictly: every line must be a JSON
object of the shape its format version gives it, every value of the type and
range the ledger could have written (positions, versions and times as
integers a stored row holds, ids in their form, text that is Unicode, a
hash of 32 bytes, a data key of 32 bytes), or the file is refused with
``InvalidInput`` naming the line -- before anything is recorded. Whether the
events are *right* (chains, replay, identities) is ``transfer``'s to check.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn
from uuid import UUID

from pydantic import ValidationError

from chatledger.adapters.chain import ChainRow
from chatledger.adapters.sealing import key_id_of
from chatledger.domain.failures import InvalidInput
from chatledger.domain.ports import KeyRecord
from chatledger.domain.timestamps import from_micros

EXPORT_FORMAT = "chatledger/export"
EXPORT_FORMAT_VERSION = 4
"""4: each line is the event as every output shows it (``LedgerEvent.as_json``), its stored
payload beside it (``stored``); 3: events carry the data keys (``data_key``); 2: payloads
as JSON objects (``event``) where exact; 1: payloads as text (``state``)."""
READABLE_FORMAT_VERSIONS = (1, 2, 3, 4)

_MAX_INT = 2**63 - 1  # what a stored BIGINT holds
_MIN_MICROS = -62_135_596_800_000_000  # 0001-01-01, the first moment a datetime holds
_MAX_MICROS = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999
_TOPIC = re.compile(r"[A-Za-z0-9_.:]{1,200}")  # an event type's name, or its module:class
_KEY_ID = re.compile(r"[A-Za-z0-9._:/-]{1,128}")  # as KeyRing accepts them
_KEY_BYTES = 32  # AES-256
SHOWN = ("key", "version", "type", "timestamp", "actor", "summary", "event")
"""The fields of ``LedgerEvent.as_json``: what a format 4 line shows of its event."""
_PAYLOADS = ("stored", "state", "state_base64")  # the stored payload's three forms
_PAYLOADS_BEFORE_4 = ("event", "state", "state_base64")
NOTHING = "nothing was imported"


@dataclass(frozen=True)
class ExportedKey:
    """A data key a line of the file brings: what is known of it, and its material (``None``:
    destroyed in the source, its content erased)."""

    line: int
    key_id: str
    record: KeyRecord | None
    material: bytes | None


@dataclass(frozen=True)
class ExportedEvent:
    """One event line: the stored row it stands for, and the data key its payload is
    sealed with (``None``: not sealed)."""

    line: int
    row: ChainRow
    key_id: str | None
    shown: dict[str, Any] | None = None  # format 4: the event as the line shows it (SHOWN)


@dataclass
class ExportFile:
    """What ``read`` found in a file: its format version, events and data keys by id."""

    version: int = 0
    events: list[ExportedEvent] = field(default_factory=list)
    keys: dict[str, ExportedKey] = field(default_factory=dict)


# ---------------------------------------------------------------- writing
def header(keyed_chain: bool) -> str:
    """The first line of an export."""
    return json.dumps(
        {
            "format": EXPORT_FORMAT,
            "format_version": EXPORT_FORMAT_VERSION,
            "keyed_chain": keyed_chain,
        }
    )


def unreadable(key: str | None, version: int, topic: str, timestamp_us: int) -> dict[str, Any]:
    """What a line shows of an event this version cannot read: where it is, no content."""
    return {
        "key": key,
        "version": version,
        "type": topic.rsplit(":", 1)[-1],
        "timestamp": from_micros(timestamp_us).isoformat().replace("+00:00", "Z"),
        "actor": None,
        "summary": None,
        "event": None,
    }


def payload(state: bytes) -> dict[str, Any]:
    """The stored payload as an export carries it: ``{"stored": <JSON object>}`` when
    re-encoding that object gives back the exact stored bytes (the hash covers
    them), else the stored text as it is (``{"state": "..."}``), or its bytes in
    base64 if they are not even text (``{"state_base64": "..."}``)."""
    try:
        text = state.decode()
    except UnicodeDecodeError:  # not text at all (edited by hand?): keep every byte
        return {"state_base64": base64.b64encode(state).decode()}
    try:
        event = json.loads(text)
    except ValueError:
        return {"state": text}
    if isinstance(event, dict) and encode_payload(event) == state:
        return {"stored": event}
    return {"state": text}


def encode_payload(event: dict[str, Any]) -> bytes:
    """The stored bytes of an exported ``event`` object (the inverse of ``payload``)."""
    return json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode()


# ---------------------------------------------------------------- reading
def read(lines: Iterable[str]) -> ExportFile:
    """The events and data keys of an export's ``lines``; ``InvalidInput`` naming the line
    for anything an export cannot hold."""
    try:
        numbered = enumerate(lines, start=1)
    except TypeError:
        raise InvalidInput(
            f"Import takes the lines of an export file (an iterable of str); {NOTHING}."
        ) from None
    found = ExportFile()
    for number, line in numbered:
        text = _text_of(line, number)
        if not text.strip():
            continue
        record = _json_object(text, number)
        if not found.version:
            found.version = _header_version(record, number)
            continue
        event = _event(record, number, found.version)
        found.events.append(event)
        if "data_key" in record:
            key = _key(record["data_key"], number)
            if key.key_id != event.key_id:
                _refuse(
                    number,
                    f"brings data key {key.key_id!r}, but its event is "
                    + ("not sealed" if event.key_id is None else f"sealed with {event.key_id!r}")
                    + " (an export gives each key with the first event sealed with it)",
                )
            if key.key_id in found.keys:
                _refuse(
                    number,
                    f"brings data key {key.key_id!r} a second time (line "
                    f"{found.keys[key.key_id].line} brought it first)",
                )
            found.keys[key.key_id] = key
    if not found.version:
        raise InvalidInput(f"The file is empty: no chatledger export header; {NOTHING}.")
    return found


def _json_type(value: object) -> str:
    """The JSON name of a parsed value's type."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    names = {dict: "object", list: "array", str: "string", int: "number", float: "number"}
    return names.get(type(value), type(value).__name__)


def _refuse(number: int, why: str) -> NoReturn:
    raise InvalidInput(f"Line {number} {why}; {NOTHING}.")


def _text_of(line: object, number: int) -> str:
    if isinstance(line, str):
        return line
    if isinstance(line, bytes | bytearray):
        try:
            return bytes(line).decode()
        except UnicodeDecodeError:
            _refuse(number, "is not UTF-8 text")
    _refuse(number, f"is a {type(line).__name__}, not a line of text")


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _json_object(text: str, number: int) -> dict[str, Any]:
    try:
        record = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        _refuse(number, "nests JSON deeper than an export does")
    except ValueError as error:
        _refuse(number, f"is not JSON ({error})")
    if not isinstance(record, dict):
        _refuse(number, f"is a JSON {_json_type(record)}, not an object")
    return record


def _header_version(record: dict[str, Any], number: int) -> int:
    if record.get("format") != EXPORT_FORMAT:
        _refuse(number, "is not a chatledger export header")
    version = record.get("format_version")
    if type(version) is not int or version not in READABLE_FORMAT_VERSIONS:
        raise InvalidInput(
            f"Line {number}: unsupported export format version {_shown(version)}; this "
            f"chatledger version reads {READABLE_FORMAT_VERSIONS}. {NOTHING.capitalize()}."
        )
    return version


def _int(record: dict[str, Any], name: str, number: int, low: int, high: int = _MAX_INT) -> int:
    value = record.get(name)
    if type(value) is not int or not low <= value <= high:
        rule = f"{name}s start at 1" if low == 1 else f"an export gives an integer {low}-{high}"
        _refuse(number, f"has {name} {_shown(value)} ({rule}, up to {high})")
    return value


def _shown(value: object) -> str:
    """A value from the file, as an error message names it (short)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _unicode(value: str, what: str, number: int) -> bytes:
    try:
        return value.encode()
    except UnicodeEncodeError:
        _refuse(number, f"holds {what} that is not Unicode text (a lone surrogate)")


def _event(record: dict[str, Any], number: int, format_version: int) -> ExportedEvent:
    position = _int(record, "position", number, 1)
    version = _int(record, "version", number, 1)
    timestamp_us = _int(record, "timestamp_us", number, _MIN_MICROS, _MAX_MICROS)
    sid = record.get("session_id")
    try:
        session_id = UUID(sid) if isinstance(sid, str) else None
    except ValueError:
        session_id = None
    if session_id is None:
        _refuse(number, f"has session_id {_shown(sid)}; an export gives 32 hex digits")
    topic = record.get("topic")
    if not isinstance(topic, str) or not _TOPIC.fullmatch(topic):
        _refuse(number, f"has topic {_shown(topic)}; an export gives an event type")
    digest = record.get("hash")
    if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
        _refuse(number, f"has hash {_shown(digest)}; an export gives 64 hex digits")
    names = _PAYLOADS if format_version >= 4 else _PAYLOADS_BEFORE_4
    given = [name for name in names if name in record]
    if len(given) != 1:
        _refuse(number, f"has {' and '.join(given) or 'none'} of {', '.join(names)}; one")
    state, key_id = _state(record, given[0], number)
    shown = {name: record.get(name) for name in SHOWN} if format_version >= 4 else None
    row = ChainRow(
        position=position, originator_id=session_id, version=version, topic=topic,
        state=state, timestamp_us=timestamp_us, hash=bytes.fromhex(digest),
    )  # fmt: skip
    return ExportedEvent(number, row, key_id, shown)


def _state(record: dict[str, Any], name: str, number: int) -> tuple[bytes, str | None]:
    """The stored bytes a line's payload stands for, and the key id it is sealed with."""
    value = record[name]
    if name in ("event", "stored"):
        if not isinstance(value, dict):
            _refuse(number, f"has an event that is a JSON {_json_type(value)}, not an object")
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        except RecursionError:
            _refuse(number, "nests its event deeper than an export does")
        sealed = value.get("sealed")
        key_id = key_id_of(value)
        if sealed is not None and (key_id is None or not _KEY_ID.fullmatch(key_id)):
            _refuse(number, f"has an event sealed with key {_shown(key_id)}, not a key id")
        return _unicode(text, "an event", number), key_id
    if not isinstance(value, str):
        _refuse(number, f"has {name} {_shown(value)}; an export gives a string")
    if name == "state":
        return _unicode(value, "a payload", number), None
    try:
        return base64.b64decode(value, validate=True), None
    except ValueError:  # binascii.Error, or text that is not even ASCII
        _refuse(number, "has state_base64 that is not base64")


def _key(line: object, number: int) -> ExportedKey:
    """A ``data_key`` object: its id, what is known of it, its material."""
    if not isinstance(line, dict):
        _refuse(number, f"has a data_key that is a JSON {_json_type(line)}, not an object")
    key_id = line.get("key_id")
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
        _refuse(number, f"has a data key id {_shown(key_id)}; 1-128 letters, digits or ._:/-")
    encoded = line.get("material")
    material = None
    if encoded is not None:
        try:
            material = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else b""
        except ValueError:  # binascii.Error, or text that is not even ASCII
            material = b""
        if len(material) != _KEY_BYTES:  # (the message never shows what the file holds)
            _refuse(number, f"has data key {key_id!r} whose material is not 32 bytes in base64")
    known = {k: v for k, v in line.items() if k != "material"}
    record = None
    if "scope" in known:
        try:
            record = KeyRecord.model_validate_json(json.dumps(known), strict=True)
        except (ValidationError, ValueError) as error:
            _refuse(number, f"has data key {key_id!r} with an invalid record ({_errors(error)})")
        for what, value in (("tenant", record.tenant), ("user_id", record.user_id)):
            _unicode(value, f"a data key's {what}", number)
            if "\x00" in value or len(value) > 256:
                _refuse(number, f"has data key {key_id!r} whose {what} is not an id")
        if (record.destroyed_at is None) != (material is not None):
            _refuse(
                number,
                f"has data key {key_id!r} "
                + ("destroyed, yet with material" if material is not None else
                   "with neither material nor a time of destruction"),
            )  # fmt: skip
    return ExportedKey(number, key_id, record, material)


def _errors(error: Exception) -> str:
    """A validation error's gist: the fields and what is wrong, never the values."""
    if isinstance(error, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'record'}: {e['msg']}" for e in error.errors()
        )
    return type(error).__name__
