"""Runs of stored messages whose ``Message`` values are built only when they are read.

Loading a session replays its events; a long live buffer of uncommitted
messages is most of that work, and most of it is building one ``Message``
per stored row. A prompt context reads only the newest messages that fit its
budget, so a load takes such a run as a ``MessageRun`` -- what the counters
need (ids, tokens, user turns) counted up front, each message built when
something reads it -- and ``Session`` keeps it unbuilt until then; a context
asks the run for just its newest messages that fit (``MessageRun.newest``).
The store (``chatledger.adapters``) makes runs from its rows; this module
says what a run must offer, and how the newest that fit are found. Pure: no
I/O.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate
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

    def newest(self, budget: int) -> tuple[list[Message], int]:
        """The newest messages of the run that fit in ``budget`` tokens, oldest first, and
        the tokens they take: taken newest first, up to the first that does not fit
        (``newest_that_fit`` of the run's messages, newest first)."""
        ...


def newest_that_fit(newest_first: Iterable[Message], budget: int) -> tuple[list[Message], int]:
    """The messages of ``newest_first`` that fit in ``budget`` tokens -- taken in that
    order, up to the first that does not fit -- oldest first, and the tokens they take:
    what a prompt context keeps of a live buffer."""
    kept: list[Message] = []
    remaining = budget
    for message in newest_first:
        tokens = message.tokens
        if tokens > remaining:
            break
        kept.append(message)
        remaining -= tokens
    kept.reverse()
    return kept, budget - remaining


def newest_fitting(
    count: int, total: int, tokens_of: Callable[[int, int], Sequence[int]], budget: int
) -> tuple[int, int]:
    """How many of the last of ``count`` messages (of ``total`` tokens) fit in ``budget``
    tokens, taken newest first up to the first that does not fit, and the tokens they
    take -- what ``newest_that_fit`` keeps, counted without building a message.

    ``tokens_of(start, end)`` gives the tokens of messages ``start`` to ``end``, each
    at least one (so running sums only grow: a bisection finds where they pass the
    budget). Nothing is counted when all of them fit; else they are asked for in
    stretches from the end, the first a little longer than the messages of an average
    size that fit, each next one four times longer: a long run whose newest few fill
    the budget is not counted whole.
    """
    if total <= budget:
        return count, total
    start, remaining = count, budget
    stretch = budget * count // max(total, 1) * 9 // 8 + 64
    while start > 0 and remaining > 0:
        low = max(0, start - min(stretch, remaining))  # each message takes one token or more
        sums = list(accumulate(reversed(tokens_of(low, start))))
        fit = bisect_right(sums, remaining)
        if fit:
            remaining -= sums[fit - 1]
            start -= fit
        if fit < len(sums):
            break
        stretch *= 4
    return count - start, budget - remaining
