"""Runs of stored messages whose ``Message`` values are built only when they are read.

Loading a session replays its events; a long live buffer of uncommitted
messages is most of that work, and most of it is building one ``Message``
per stored row. A prompt context reads only the newest messages that fit its
budget, so a load takes such a run as a ``MessageRun`` -- what the counters
need (ids, tokens, user turns) counted up front, each message built when
something reads it -- and ``Session`` keeps it unbuilt until then. The store
(``chatledger.adapters``) makes runs from its rows; this module only says
what a run must offer. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from chatledger.domain.values import Message


class MessageRun(Protocol):
    """Consecutive ``MessageAdded`` events replayed together: their messages, in order,
    each built on request; equal to the messages those events carry."""

    @property
    def ids(self) -> Sequence[str]:
        """The id of each message, in order."""
        ...

    @property
    def tokens(self) -> int:
        """The sum of their ``Message.tokens``."""
        ...

    @property
    def user_turns(self) -> int:
        """How many have the role ``"user"``."""
        ...

    def __len__(self) -> int: ...

    def message(self, index: int) -> Message:
        """The ``index``-th message of the run (a new object on every call)."""
        ...

    def messages(self) -> list[Message]:
        """Every message of the run, in order."""
        ...
