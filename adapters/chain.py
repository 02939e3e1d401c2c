"""Tamper evidence: every event of a session carries a hash chained to its predecessor.

An event's hash covers its whole stored row -- global position, session id,
version, topic (the event type), timestamp and the serialised payload (which
holds the actor) -- plus the hash of the session's previous event (32 zero
bytes before the first). Changing, deleting, reordering or inserting a row
breaks the chain from that row on. With a secret ``key`` the hash is an
HMAC, so even someone who knows the scheme cannot forge a consistent chain
without the key. What a chain cannot show on its own -- the newest events of
a session being cut off -- needs the head hashes anchored elsewhere
(docs/audit.md).
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict

GENESIS = bytes(32)
_HEADER = struct.Struct(">q16sqqI")
_LENGTH = struct.Struct(">Q")
_sha256 = hashlib.sha256
# A fresh SHA-256 state as a copy of an empty one: hashlib.sha256() looks the digest up
# by name in OpenSSL on every call, which costs about a third of hashing a row.
_fresh_sha256 = hashlib.sha256().copy


def chain_hash(
    previous: bytes,
    *,
    position: int,
    originator_id: UUID,
    version: int,
    topic: str,
    timestamp_us: int,
    state: bytes,
    key: bytes | None = None,
) -> bytes:
    """The hash of one stored event, given the hash of the event before it."""
    return link_hash(
        previous, position, originator_id.bytes, version, timestamp_us, topic.encode(), state, key
    )


def link_hash(
    previous: bytes,
    position: int,
    originator_id: bytes,
    version: int,
    timestamp_us: int,
    topic: bytes,
    state: bytes,
    key: bytes | None,
) -> bytes:
    """``chain_hash`` on values already in bytes (the session id's 16, the topic encoded),
    positionally: the form the append paths and ``verify`` call once per event."""
    message = b"".join(
        (
            previous,
            _HEADER.pack(position, originator_id, version, timestamp_us, len(topic)),
            topic,
            _LENGTH.pack(len(state)),
            state,
        )
    )
    if key:
        return hmac.new(key, message, _sha256).digest()
    digest = _fresh_sha256()
    digest.update(message)
    return digest.digest()


@dataclass(frozen=True)
class ChainRow:
    """One stored event row as the chain sees it."""

    position: int
    originator_id: UUID
    version: int
    topic: str
    state: bytes
    timestamp_us: int
    hash: bytes
    facts: tuple[object, ...] | None = None  # the stored facts, when read from a store


class BrokenLink(BaseModel):
    """The first place where a session's chain does not hold."""

    model_config = ConfigDict(frozen=True)

    session_id: UUID
    version: int
    position: int | None
    reason: str
    expected: str
    found: str


def first_breaks(rows: Iterable[ChainRow], key: bytes | None = None) -> Iterator[BrokenLink]:
    """The first broken link of each session, for rows ordered by (session, version)."""
    current: UUID | None = None
    previous = GENESIS
    expected_version = 1
    broken = False
    for row in rows:
        if row.originator_id != current:
            current, previous, expected_version, broken = row.originator_id, GENESIS, 1, False
        if broken:
            continue
        if row.version != expected_version:
            broken = True
            reason = "missing event" if row.version > expected_version else "repeated version"
            yield BrokenLink(
                session_id=row.originator_id,
                version=expected_version,
                position=row.position,
                reason=reason,
                expected=f"version {expected_version}",
                found=f"version {row.version}",
            )
            continue
        recomputed = chain_hash(
            previous,
            position=row.position,
            originator_id=row.originator_id,
            version=row.version,
            topic=row.topic,
            timestamp_us=row.timestamp_us,
            state=row.state,
            key=key,
        )
        if not hmac.compare_digest(recomputed, row.hash):
            broken = True
            yield BrokenLink(
                session_id=row.originator_id,
                version=row.version,
                position=row.position,
                reason="hash mismatch",
                expected=recomputed.hex(),
                found=row.hash.hex(),
            )
            continue
        previous = row.hash
        expected_version += 1


def first_break(
    session_id: UUID, rows: Sequence[tuple[Any, ...]], key: bytes | None = None
) -> BrokenLink | None:
    """The first broken link of one session's stored rows, as a store returns them.

    ``rows`` are the session's rows in version order, each a tuple starting
    with position, session id, version, topic, state, timestamp and hash (more
    may follow); ``session_id`` is the session's id. The same verdict as
    ``first_breaks`` over the same rows as ``ChainRow`` objects, without
    building one per row: ``verify`` runs this over every stored event.
    """
    try:
        return _first_break(session_id, rows, key)
    except (TypeError, ValueError, AttributeError, OverflowError, struct.error):
        # A value of another type than the columns hold (a row edited by hand):
        # the careful way, which makes it an impossible value instead.
        careful = [stored_chain_row(*row[:7]) for row in rows]
        return next(first_breaks(careful, key), None)


def _first_break(
    session_id: UUID, rows: Sequence[tuple[Any, ...]], key: bytes | None
) -> BrokenLink | None:
    oid = session_id.bytes
    topics: dict[str, bytes] = {}
    previous = GENESIS
    expected = 1
    for row in rows:
        position, _, version, topic, state, timestamp_us, digest = row[:7]
        if version != expected:
            reason = "missing event" if version > expected else "repeated version"
            return BrokenLink(
                session_id=session_id, version=expected, position=position, reason=reason,
                expected=f"version {expected}", found=f"version {version}",
            )  # fmt: skip
        encoded = topics.get(topic)
        if encoded is None:
            encoded = topics[topic] = topic.encode()
        recomputed = link_hash(previous, position, oid, version, timestamp_us, encoded, state, key)
        if not hmac.compare_digest(recomputed, digest):
            return BrokenLink(
                session_id=session_id, version=version, position=position,
                reason="hash mismatch", expected=recomputed.hex(), found=bytes(digest).hex(),
            )  # fmt: skip
        previous = digest
        expected += 1
    return None


def as_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    return bytes(value) if value is not None else b""


def as_int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def as_uuid(value: Any) -> UUID:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        return UUID(int=0)


def stored_chain_row(
    position: Any,
    oid: Any,
    version: Any,
    topic: Any,
    state: Any,
    timestamp_us: Any,
    digest: Any,
    *,
    facts: tuple[Any, ...] | None = None,
) -> ChainRow:
    """A stored row as the chain sees it; values of the wrong type become impossible ones."""
    return ChainRow(
        position=as_int(position),
        originator_id=as_uuid(oid),
        version=as_int(version),
        topic=str(topic),
        state=as_bytes(state),
        timestamp_us=as_int(timestamp_us),
        hash=as_bytes(digest),
        facts=facts,
    )
