"""Bridge between the ``eventsourcing`` library and pydantic v2 models.

``eventsourcing`` 9.5 ships no pydantic support, so the base classes here make
every domain event (and the session snapshot) a frozen pydantic model that
also speaks the library's protocols (``CanMutateAggregate``,
``CanInitAggregate``, ``CanSnapshotAggregate``). The mapper in
``chatledger.adapters`` turns them into stored events and back, exactly.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.domain import CanInitAggregate, CanMutateAggregate
from pydantic import BaseModel, ConfigDict

from chatledger.domain.values import Principal


class DomainEvent(BaseModel):
    """Fields every stored event has: whose, which version, when."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Raised by one whenever an event's stored form changes; the mapper then runs
    # ``upcast_v{n}_v{n+1}(state)`` static methods on older records.
    class_version: ClassVar[int] = 1

    originator_id: UUID
    originator_version: int
    timestamp: datetime


class SessionEvent(DomainEvent, CanMutateAggregate[UUID]):
    """An event of a session; every one records the principal that caused it.

    ``idempotency_key`` is the caller's key of the write this event is the
    first of (``None`` for most events, and then not stored at all): a retry
    with the same key finds that write instead of recording it again.
    """

    actor: Principal
    idempotency_key: str | None = None

    def apply(self, aggregate: Any) -> None:
        raise NotImplementedError


class SessionCreationEvent(SessionEvent, CanInitAggregate[UUID]):
    """The first event of a session's stream."""

    originator_topic: str
