"""Pydantic-aware mapper: domain events <-> stored events, exactly.

The library's default mapper rebuilds events with ``object.__new__`` and
``__dict__``, which would bypass pydantic validation; this one serialises with
pydantic's JSON encoder and rebuilds through the model, running the
``class_version`` / ``upcast_vN_vN+1`` convention on older records (which the
documented pydantic mapper recipe does not). The stored event also carries the
event's timestamp in its own column, so "as of time T" needs no decoding.

Given a sealing key, the content of an event is encrypted into its payload
(``chatledger.adapters.sealing``); reading opens it with the key the payload
names (``ciphers``), or gives its erased form when that key is destroyed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from eventsourcing.persistence import Mapper, MapperDeserialisationError, StoredEvent, Transcoder
from eventsourcing.utils import get_topic, resolve_topic
from pydantic import BaseModel, ValidationError

from chatledger.adapters.sealing import (
    PARTS,
    SEALED,
    Ciphers,
    open_sealed,
    row_aad,
    seal,
    seal_message_added,
)
from chatledger.domain.events import MessageAdded
from chatledger.domain.timestamps import to_micros

_new_stored = object.__new__
_decode_json = json.JSONDecoder().decode  # str in: skips json.loads' encoding sniffing
_encode_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_ORIGINATOR_FIELDS: set[str] = {"originator_id", "originator_version"}
# An event without an idempotency key stores no such field: the same bytes as
# before keys existed, and nothing to pay on the hot path.
_UNKEYED_FIELDS: set[str] = _ORIGINATOR_FIELDS | {"idempotency_key"}
_EXCLUDED = {id(f): dict.fromkeys(f, True) for f in (_ORIGINATOR_FIELDS, _UNKEYED_FIELDS)}


@dataclass(frozen=True)
class TimedStoredEvent(StoredEvent):
    """A stored event that also knows when it happened (microseconds, UTC)."""

    timestamp_us: int = 0
    facts: tuple[object, ...] | None = None  # StoredFacts, set by the application on append


class JSONBytesTranscoder(Transcoder):
    """Plain JSON bytes; the mapper below encodes pydantic models itself."""

    def encode(self, obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    def decode(self, data: bytes) -> Any:
        return json.loads(data)


def _no_ciphers(key_id: str) -> AESGCM | None:
    return None


class PydanticMapper(Mapper[UUID]):
    """Maps pydantic domain events to and from ``TimedStoredEvent`` records."""

    ciphers: Ciphers = staticmethod(_no_ciphers)  # set by the application: opens sealed content

    def to_stored_event(
        self, domain_event: Any, sealing: tuple[str, AESGCM] | None = None
    ) -> StoredEvent:
        """The stored form of an event (or snapshot); with ``sealing`` (key id and cipher)
        its content is encrypted."""
        model: BaseModel = domain_event
        cls = type(model)
        class_version: int = getattr(cls, "class_version", 1)
        exclude = (
            _UNKEYED_FIELDS
            if getattr(model, "idempotency_key", None) is None
            else _ORIGINATOR_FIELDS
        )
        topic = get_topic(cls)
        parts = PARTS.get(cls) if sealing is not None else None
        if cls is MessageAdded and sealing is not None:
            aad = row_aad(domain_event.originator_id, topic)
            data = seal_message_added(domain_event, _EXCLUDED[id(exclude)], *sealing, aad)
        elif parts is not None and sealing is not None:
            payload = model.model_dump(mode="json", exclude=exclude)
            aad = row_aad(domain_event.originator_id, topic)
            seal(parts, payload, sealing[0], sealing[1], aad)
            if class_version > 1:
                payload["class_version"] = class_version
            data = _encode_json(payload).encode()
        elif class_version > 1:
            payload = model.model_dump(mode="json", exclude=exclude)
            payload["class_version"] = class_version
            data = json.dumps(payload, separators=(",", ":")).encode()
        else:
            data = model.model_dump_json(exclude=exclude).encode()
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

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        data = stored_event.state
        try:
            if self.cipher:
                data = self.cipher.decrypt(data)
            if self.compressor:
                data = self.compressor.decompress(data)
            state: dict[str, Any] = _decode_json(data.decode())
            cls = resolve_topic(stored_event.topic)
            sealed = state.pop(SEALED, None)
            if sealed is not None:
                originator = stored_event.originator_id
                aad = row_aad(
                    originator if isinstance(originator, UUID) else UUID(str(originator)),
                    stored_event.topic,
                )
                open_sealed(PARTS.get(cls, ()), state, sealed, self.ciphers, aad)
            from_version = state.pop("class_version", 1)
            class_version = getattr(cls, "class_version", 1)
            while from_version < class_version:
                getattr(cls, f"upcast_v{from_version}_v{from_version + 1}")(state)
                from_version += 1
            originator_id = stored_event.originator_id
            if not isinstance(originator_id, UUID):
                originator_id = UUID(str(originator_id))
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
