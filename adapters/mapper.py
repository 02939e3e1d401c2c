"""Pydantic-aware mapper: domain events <-> stored events, exactly.

The library's default mapper rebuilds events with ``object.__new__`` and
``__dict__``, which would bypass pydantic validation; this one serialises with
pydantic's JSON encoder and rebuilds through the model, running the
``class_version`` / ``upcast_vN_vN+1`` convention on older records (which the
documented pydantic mapper recipe does not). The stored event also carries the
event's timestamp in its own column, so "as of time T" needs no decoding.

Session events are written in the compact stored form of
``chatledger.adapters.codec`` (format 2); rows written before it (a module
path as topic) and snapshots keep the pydantic JSON form (format 1), and
both are read. Given a sealing key, an event's (or snapshot's) content is
encrypted into its payload (``chatledger.adapters.sealing``); reading opens it
with the key the payload names (``ciphers``), or gives its erased form when
that key is destroyed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from eventsourcing.persistence import (
    Cipher,
    Compressor,
    Mapper,
    MapperDeserialisationError,
    Notification,
    StoredEvent,
    Transcoder,
)
from eventsourcing.utils import get_topic, resolve_topic
from pydantic import BaseModel, ValidationError

from chatledger.adapters.codec import (
    EVENTS_BY_NAME,
    Sealing,
    decode,
    encode,
    is_compact,
    message_added_of_row,
)
from chatledger.adapters.sealing import PARTS, SEALED, Ciphers, open_sealed, row_aad, seal
from chatledger.domain.timestamps import to_micros

_new_stored = object.__new__
_decode_json = json.JSONDecoder().decode  # str in: skips json.loads' encoding sniffing
_ORIGINATOR_FIELDS: set[str] = {"originator_id", "originator_version"}
# An event without an idempotency key stores no such field: the same bytes as
# before keys existed, and nothing to pay on the hot path.
_UNKEYED_FIELDS: set[str] = _ORIGINATOR_FIELDS | {"idempotency_key"}
_UNSEEN: Any = object()
_encode_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _no_ciphers(key_id: str) -> AESGCM | None:
    return None


@dataclass(frozen=True)
class TimedStoredEvent(StoredEvent):
    """A stored event that also knows when it happened (microseconds, UTC)."""

    timestamp_us: int = 0
    facts: tuple[object, ...] | None = None  # StoredFacts, set by the application on append


@dataclass(frozen=True)
class TimedNotification(Notification):
    """A row of the library's notification log that also knows when it happened."""

    timestamp_us: int = 0


class JSONBytesTranscoder(Transcoder):
    """Plain JSON bytes; the mapper below encodes pydantic models itself."""

    def encode(self, obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    def decode(self, data: bytes) -> Any:
        return json.loads(data)


class PydanticMapper(Mapper[UUID]):
    """Maps pydantic domain events to and from ``TimedStoredEvent`` records."""

    ciphers: Ciphers = staticmethod(_no_ciphers)  # set by the application: opens sealed content

    def __init__(
        self,
        transcoder: Transcoder,
        compressor: Compressor | None = None,
        cipher: Cipher | None = None,
    ) -> None:
        super().__init__(transcoder, compressor, cipher)
        # Per topic: the event class whose stored payloads event_of_row() parses in one
        # pass, or None where it cannot (not a pydantic class, an older class_version).
        self._fast_classes: dict[str, type[BaseModel] | None] = {}
        self._last_id: tuple[UUID | None, bytes] = (None, b"")  # and its JSON text

    def to_stored_event(self, domain_event: Any, sealing: Sealing | None = None) -> StoredEvent:
        """The stored form of an event (or snapshot); with ``sealing`` (key id and cipher)
        its content is encrypted."""
        model: BaseModel = domain_event
        cls = type(model)
        if EVENTS_BY_NAME.get(cls.__name__) is cls:
            topic, data = encode(domain_event, sealing)
        else:
            topic = get_topic(cls)
            parts = PARTS.get(cls) if sealing is not None else None
            if parts is not None and sealing is not None:
                data = self._sealed_format_1(model, parts, sealing, topic)
            else:
                data = self._format_1(model)
        if self.compressor:
            data = self.compressor.compress(data)
        if self.cipher:
            data = self.cipher.encrypt(data)
        # Built without the frozen dataclass __init__ (one object.__setattr__
        # per field): this runs for every event appended.
        stored = _new_stored(TimedStoredEvent)
        stored.__dict__.update(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=topic,
            state=data,
            timestamp_us=to_micros(domain_event.timestamp),
        )
        return stored

    @staticmethod
    def _format_1(model: BaseModel) -> bytes:
        """The pydantic JSON form: every field but the ids (snapshots, and rows before 0006)."""
        class_version: int = getattr(type(model), "class_version", 1)
        exclude = (
            _UNKEYED_FIELDS
            if getattr(model, "idempotency_key", None) is None
            else _ORIGINATOR_FIELDS
        )
        if class_version > 1:
            payload = model.model_dump(mode="json", exclude=exclude)
            payload["class_version"] = class_version
            return json.dumps(payload, separators=(",", ":")).encode()
        # The serializer itself: model_dump_json() is a Python wrapper around it.
        data: bytes = type(model).__pydantic_serializer__.to_json(model, exclude=exclude)
        return data

    @staticmethod
    def _sealed_format_1(model: BaseModel, parts: Any, sealing: Sealing, topic: str) -> bytes:
        """The pydantic JSON form with its content sealed (snapshots)."""
        class_version: int = getattr(type(model), "class_version", 1)
        exclude = (
            _UNKEYED_FIELDS
            if getattr(model, "idempotency_key", None) is None
            else _ORIGINATOR_FIELDS
        )
        payload = model.model_dump(mode="json", exclude=exclude)
        seal(parts, payload, *sealing, row_aad(model.originator_id, topic))  # type: ignore[attr-defined]
        if class_version > 1:
            payload["class_version"] = class_version
        return _encode_json(payload).encode()

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        data = stored_event.state
        try:
            if self.cipher:
                data = self.cipher.decrypt(data)
            if self.compressor:
                data = self.compressor.decompress(data)
            originator_id = stored_event.originator_id
            if not isinstance(originator_id, UUID):
                originator_id = UUID(str(originator_id))
            if is_compact(stored_event.topic):
                timestamp_us = getattr(stored_event, "timestamp_us", None)
                if timestamp_us is None:
                    raise ValueError("a row of format 2 is read with its timestamp_us")
                return decode(
                    stored_event.topic, data, originator_id,
                    stored_event.originator_version, timestamp_us, self.ciphers,
                )  # fmt: skip
            state: dict[str, Any] = _decode_json(data.decode())
            cls = resolve_topic(stored_event.topic)
            sealed = state.pop(SEALED, None)
            if sealed is not None:
                aad = row_aad(originator_id, stored_event.topic)
                open_sealed(PARTS.get(cls, ()), state, sealed, self.ciphers, aad)
            from_version = state.pop("class_version", 1)
            class_version = getattr(cls, "class_version", 1)
            while from_version < class_version:
                getattr(cls, f"upcast_v{from_version}_v{from_version + 1}")(state)
                from_version += 1
            return cls(
                originator_id=originator_id,
                originator_version=stored_event.originator_version,
                **state,
            )
        except (ValueError, TypeError, KeyError, AttributeError, ValidationError) as error:
            raise MapperDeserialisationError(
                f"Cannot rebuild stored event {stored_event.topic} "
                f"v{stored_event.originator_version} of {stored_event.originator_id}: {error}"
            ) from error

    def event_of_row(
        self, originator_id: UUID, version: int, topic: str, state: bytes, timestamp_us: int
    ) -> Any:
        """``to_domain_event`` of a stored row given by its values, the same event, faster
        for the usual payload: pydantic parses and validates its JSON in one pass (its
        stream fields spliced in) instead of ``json`` building a dict to validate. A
        payload that pass does not take as it stands -- an older ``class_version``, an
        encrypted or compressed one, anything it refuses -- goes the usual way, so the
        outcome, errors included, is ``to_domain_event``'s. For readers of many rows."""
        if is_compact(topic):  # format 2 is decoded by the codec, with the row's timestamp
            if topic == "MessageAdded" and type(state) is bytes and not self.plain_bytes_changed:
                event = message_added_of_row(state, originator_id, version, timestamp_us)
                if event is not None:
                    return event
            return self.to_domain_event(
                TimedStoredEvent(
                    originator_id=originator_id, originator_version=version, topic=topic,
                    state=state, timestamp_us=timestamp_us,
                )
            )  # fmt: skip
        cls = self._fast_classes.get(topic, _UNSEEN)
        if cls is _UNSEEN:
            cls = self._fast_classes[topic] = self._fast_class(topic)
        if (
            cls is not None
            and not self.cipher
            and not self.compressor
            and type(state) is bytes
            and state[:1] == b"{"
            and len(state) > 2
            and b'"originator_' not in state  # would clash with the spliced fields
        ):
            last = self._last_id  # rows come session by session: its text once each
            if last[0] is not originator_id:
                last = self._last_id = (originator_id, str(originator_id).encode())
            data = b'{"originator_id":"%s","originator_version":%d,%s' % (
                last[1], version, state[1:],
            )  # fmt: skip
            try:
                return cls.__pydantic_validator__.validate_json(data)
            except ValidationError:
                pass  # the usual way says what is wrong with it
        stored = TimedStoredEvent(
            originator_id=originator_id, originator_version=version, topic=topic, state=state,
            timestamp_us=timestamp_us,
        )  # fmt: skip
        return self.to_domain_event(stored)

    @property
    def plain_bytes_changed(self) -> bool:
        """Whether stored payloads pass through the library's cipher or compressor."""
        return bool(self.cipher or self.compressor)

    @staticmethod
    def _fast_class(topic: str) -> type[BaseModel] | None:
        try:
            cls = resolve_topic(topic)
        except Exception:  # the usual way reports an unknown topic
            return None
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
            return None
        return cls if getattr(cls, "class_version", 1) == 1 else None
