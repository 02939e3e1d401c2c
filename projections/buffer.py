"""Fold: the live buffer (uncommitted messages), pending tokens and turn count."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from chatledger.domain.events import (
    Committed,
    Deleted,
    Forked,
    ItemsRemoved,
    MessageAdded,
    TailReplaced,
)
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.rules import without_messages
from chatledger.domain.values import Message


class Buffer(BaseModel):
    """The messages not yet folded into an archive, oldest first."""

    model_config = ConfigDict(frozen=True)

    messages: tuple[Message, ...] = ()

    @property
    def pending_tokens(self) -> int:
        return sum(m.tokens for m in self.messages)

    @property
    def turn_count(self) -> int:
        return sum(1 for m in self.messages if m.role == "user")

    @property
    def message_ids(self) -> tuple[str, ...]:
        return tuple(m.id for m in self.messages)


def fold_buffer(state: Buffer, event: SessionEvent) -> Buffer:
    """The buffer after ``event``."""
    if isinstance(event, Forked):
        return Buffer(messages=event.buffer)
    if isinstance(event, MessageAdded):
        return Buffer(messages=(*state.messages, event.message))
    if isinstance(event, Committed):
        return Buffer(messages=tuple(without_messages(state.messages, event.archive.message_ids)))
    if isinstance(event, Deleted):
        return Buffer()
    if isinstance(event, ItemsRemoved):
        return Buffer(messages=tuple(without_messages(state.messages, event.message_ids)))
    if isinstance(event, TailReplaced):
        kept = without_messages(state.messages, event.removed_ids)
        return Buffer(messages=(*kept, *event.messages))
    return state
