"""One short human line per event: what it did, with a preview of message content (for
history views; the audit log has its own, content-free summary in ``facts.summarize``)."""

from __future__ import annotations

from chatledger.domain.events import (
    ArchiveMerged,
    Closed,
    CommitFailed,
    Committed,
    Deleted,
    Erased,
    Evicted,
    Forked,
    ItemsRemoved,
    MessageAdded,
    Reactivated,
    Restarted,
    Started,
    StateChanged,
    TailReplaced,
)
from chatledger.domain.eventsourced import SessionEvent


def _short(identifier: str) -> str:
    return identifier[:8]


def _clip(text: str, width: int = 48) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def describe_event(event: SessionEvent) -> str:
    """A one-line, human summary of ``event``."""
    if isinstance(event, Started):
        return f"started {event.key!r} for tenant {event.tenant!r}"
    if isinstance(event, Forked):
        return (
            f"forked from {event.origin_key!r} at version {event.origin_version} "
            f"({len(event.buffer)} live messages, {len(event.archives)} archives)"
        )
    if isinstance(event, MessageAdded):
        message = event.message
        tool = f" [{message.tool_call.tool_name}]" if message.tool_call else ""
        return f"{message.role}{tool}: {_clip(message.content)}"
    if isinstance(event, Committed):
        return f"archive {_short(event.archive.archive_id)} ← {len(event.message_ids)} messages"
    if isinstance(event, CommitFailed):
        return f"commit failed: {_clip(event.error)}; {event.message_count} messages stay live"
    if isinstance(event, ArchiveMerged):
        return (
            f"archive {_short(event.archive.archive_id)} ← "
            f"{len(event.source_archive_ids)} archives merged"
        )
    if isinstance(event, Evicted):
        idle = f", idle {event.idle_seconds:.0f}s" if event.idle_seconds is not None else ""
        return f"left the working set ({event.reason}{idle})"
    if isinstance(event, Closed):
        return "closed by the client"
    if isinstance(event, Reactivated):
        return f"back in the working set (was {event.previous_status})"
    if isinstance(event, Deleted):
        return "deleted: the key starts afresh (history kept)"
    if isinstance(event, Restarted):
        return "started afresh after a deletion"
    if isinstance(event, Erased):
        return f"content erased ({event.scope}): keys destroyed, history kept"
    if isinstance(event, ItemsRemoved):
        return f"{event.reason}: {len(event.message_ids)} items left the buffer (not archived)"
    if isinstance(event, TailReplaced):
        return f"tail of {len(event.removed_ids)} items replaced by {len(event.messages)}" + (
            f": {_clip(event.messages[0].content)}" if event.messages else ""
        )
    if isinstance(event, StateChanged):
        return "state: " + _clip(", ".join([*event.changes, *(f"-{k}" for k in event.removed)]))
    return type(event).__name__
