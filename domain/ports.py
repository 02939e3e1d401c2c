"""Ports the session service depends on: a summarizer, an archive store, a clock.

Each is small and owned here; ``chatledger.adapters`` ships a deterministic or
in-memory implementation of every one, so embedders can test against them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from pydantic import Field

from chatledger.domain.values import ArchiveSummary, Message, Value

Clock = Callable[[], datetime]
"""Returns the current moment as a timezone-aware datetime."""


class Summary(Value):
    """What a summarizer produces: an overview, a one-line abstract, metadata."""

    overview: str
    abstract: str
    metadata: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class Summarizer(Protocol):
    """Turns messages into a summary, and several summaries into one."""

    def summarize(self, messages: Sequence[Message]) -> Summary: ...

    def merge(self, archives: Sequence[ArchiveSummary]) -> Summary: ...


class ArchiveBody(Value):
    """The full content of an archive, kept outside the event log if a store is set."""

    archive_id: str
    session_id: str
    tenant: str
    key: str
    messages: tuple[Message, ...]
    overview: str
    abstract: str


@runtime_checkable
class ArchiveStore(Protocol):
    """Keeps archive bodies; raise ``StoreUnavailable`` when it cannot."""

    def put(self, body: ArchiveBody) -> None: ...

    def get(self, archive_id: str) -> ArchiveBody | None: ...
