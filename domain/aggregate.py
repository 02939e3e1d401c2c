"""What an event may change in a session: the aggregate's mutable fields, as a protocol.

Events (``chatledger.domain.events``) apply themselves to a session; typing
them against this protocol instead of the ``Session`` class keeps the two
modules from importing each other (``Session`` imports the events it
triggers). ``Session`` satisfies it structurally.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from chatledger.domain.values import (
    ArchiveSummary,
    ClientContext,
    CompactionToken,
    Message,
    Principal,
    TaskState,
)


class SessionFields(Protocol):
    """The state a session's events change (see ``chatledger.domain.session.Session``)."""

    tenant: str
    key: str
    context: ClientContext
    started_by: Principal
    buffer: dict[str, Message]  # live messages by id, oldest first
    pending_tokens: int
    turn_count: int
    archives: list[ArchiveSummary]
    # Where each live archive was recorded, in step with ``archives``: (version of the
    # event, index among the archives it carries); None if not known (see Session).
    archive_refs: list[tuple[int, int]] | None
    message_count: int
    commit_count: int
    last_commit_at: datetime | None
    updated_at: datetime
    evicted: bool
    closed: bool
    deleted: bool
    # The version that began the current incarnation: a Restarted (or, while deleted, the
    # Deleted); 0 if never deleted. Members read only the events from here on.
    incarnation: int
    erased: bool  # its content was erased (Erased): it takes no more writes
    task: TaskState
    watermark: int  # live items (oldest first) a background extractor has read
    extraction_summary: str
    pending_compaction: CompactionToken | None
    state: dict[str, Any]  # the session's key-value state (JSON values)

    def set_buffer(self, messages: Sequence[Message]) -> None: ...

    def drop_messages(self, message_ids: Sequence[str]) -> None:
        """Take these messages out of the live buffer, with their tokens and user turns
        (ids not live are passed over)."""
        ...
