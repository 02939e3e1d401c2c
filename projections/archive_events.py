"""Events that carry archives, as the archive-history read model sees them.

The persisted archive history needs what the stored facts do not hold -- the
archive ids, covered message ids, tokens and times of each archive -- so it
decodes just the events that carry archives: ``Committed``, ``ArchiveMerged``
and ``Forked``. It needs no content (overviews and abstracts are read from
these events when asked for), so it reads the same whether content is
encrypted, erased or neither.
``archive_event_from_json`` reads the stored JSON form straight into a small
slotted record (several times cheaper than validating the pydantic event);
``archive_event_from_event`` builds the very same record from a domain event
(for anything the fast path cannot read, and for the tests that pin the two
paths equal). ``archive_changes`` is the fold: what one such event does to
its session's archive history. Pure: no I/O; timestamps are microseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from chatledger.domain.events import ArchiveMerged, Committed, Deleted, Forked
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.identity import unpacked_ids
from chatledger.domain.timestamps import to_micros
from chatledger.domain.values import ArchiveSummary

ARCHIVE_EVENT_TYPES: tuple[str, ...] = ("Committed", "ArchiveMerged", "Forked", "Deleted")
"""Events that change a session's archives (a deletion leaves it none live)."""


@dataclass(frozen=True, slots=True)
class ArchiveFacts:
    """One archive summary, as recorded by a ``Committed``, ``ArchiveMerged`` or fork."""

    archive_id: str
    message_ids: tuple[str, ...]
    tokens: int
    created_at_us: int


@dataclass(frozen=True, slots=True)
class ArchiveEvent:
    """A stored event that carries archives, with where it sits and whose session it is."""

    position: int
    session_id: UUID
    version: int
    type: str
    tenant: str
    key: str
    archives: tuple[ArchiveFacts, ...]  # the new archive, or a fork's copied live archives
    sources: tuple[str, ...] = ()  # ArchiveMerged: the archives it replaces
    origin_id: UUID | None = None  # Forked: the session it was copied from


# ---------------------------------------------------------------- from JSON
def _archive_from_json(data: dict[str, Any], session_id: UUID) -> ArchiveFacts:
    return ArchiveFacts(
        data["archive_id"],
        unpacked_ids(session_id, data["message_ids"]),
        data["tokens"],
        to_micros(datetime.fromisoformat(data["created_at"])),
    )


def archive_event_from_json(
    position: int,
    session_id: UUID,
    version: int,
    type_name: str,
    tenant: str,
    key: str,
    state: dict[str, Any],
) -> ArchiveEvent:
    """The record of a stored archive-carrying event from its decoded JSON state.

    Raises ``KeyError``/``TypeError``/``ValueError`` on a state it does not
    understand; the caller then falls back to the full mapper.
    """
    base = (position, session_id, version, type_name, tenant, key)
    if type_name == "Committed":
        return ArchiveEvent(*base, (_archive_from_json(state["archive"], session_id),))
    if type_name == "ArchiveMerged":
        return ArchiveEvent(
            *base,
            (_archive_from_json(state["archive"], session_id),),
            sources=tuple(state["source_archive_ids"]),
        )
    if type_name == "Forked":
        return ArchiveEvent(
            *base,
            tuple(_archive_from_json(a, session_id) for a in state["archives"]),
            origin_id=UUID(state["origin_session_id"]),
        )
    if type_name == "Deleted":
        return ArchiveEvent(*base, ())
    raise ValueError(f"{type_name} carries no archives")


# --------------------------------------------------------------- from events
def _archive_facts(archive: ArchiveSummary) -> ArchiveFacts:
    return ArchiveFacts(
        archive.archive_id,
        tuple(archive.message_ids),
        archive.tokens,
        to_micros(archive.created_at),
    )


def archive_event_from_event(
    event: SessionEvent, position: int, tenant: str, key: str
) -> ArchiveEvent:
    """The record of a domain event recorded at ``position`` (equal to the JSON path's)."""
    base = (position, event.originator_id, event.originator_version, type(event).__name__)
    if isinstance(event, Committed):
        return ArchiveEvent(*base, tenant, key, (_archive_facts(event.archive),))
    if isinstance(event, ArchiveMerged):
        return ArchiveEvent(
            *base,
            tenant,
            key,
            (_archive_facts(event.archive),),
            sources=tuple(event.source_archive_ids),
        )
    if isinstance(event, Forked):
        return ArchiveEvent(
            *base,
            tenant,
            key,
            tuple(_archive_facts(a) for a in event.archives),
            origin_id=event.origin_session_id,
        )
    if isinstance(event, Deleted):
        return ArchiveEvent(*base, tenant, key, ())
    raise ValueError(f"{type(event).__name__} carries no archives")


# ---------------------------------------------------------------------- fold
@dataclass(frozen=True, slots=True)
class ArchiveCreated:
    """An archive entered the history (``merged_from`` names what it replaced)."""

    archive: ArchiveFacts
    position: int
    version: int
    merged_from: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ArchivesMerged:
    """These archives left the live set, merged into ``merged_into``."""

    archive_ids: tuple[str, ...]
    merged_into: str


@dataclass(frozen=True, slots=True)
class ArchivesRetired:
    """The session was deleted: none of its archives is live any more (they stay listed)."""


ArchiveChange = ArchiveCreated | ArchivesMerged | ArchivesRetired


def archive_changes(event: ArchiveEvent) -> list[ArchiveChange]:
    """What ``event`` does to its session's archive history, in order."""
    if event.type == "Deleted":
        return [ArchivesRetired()]
    if event.type == "ArchiveMerged":
        merged = event.archives[0]
        return [
            ArchivesMerged(tuple(dict.fromkeys(event.sources)), merged.archive_id),
            ArchiveCreated(merged, event.position, event.version, event.sources),
        ]
    return [ArchiveCreated(a, event.position, event.version) for a in event.archives]
