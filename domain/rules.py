"""Pure list rules shared by the aggregate and the projection folds.

Keeping them in one place guarantees that the aggregate's own state and the
folds in ``chatledger.projections`` can never disagree on what an event means.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from chatledger.domain.values import ArchiveSummary, Message

T = TypeVar("T")


def without_messages(buffer: Iterable[Message], covered: Iterable[str]) -> list[Message]:
    """The buffer minus the messages a commit covered, order kept."""
    gone = set(covered)
    return [m for m in buffer if m.id not in gone]


def with_merge(
    archives: Sequence[ArchiveSummary], merged: ArchiveSummary, sources: Iterable[str]
) -> list[ArchiveSummary]:
    """Live archives after a merge: the sources replaced, in place, by the merge."""
    source_ids = set(sources)
    kept: list[ArchiveSummary] = []
    placed = False
    for archive in archives:
        if archive.archive_id in source_ids:
            if not placed:
                kept.append(merged)
                placed = True
        else:
            kept.append(archive)
    if not placed:
        kept.append(merged)
    return kept


def merged_refs(
    archives: Sequence[ArchiveSummary],
    refs: Sequence[T],
    merged: T,
    sources: Iterable[str],
) -> list[T]:
    """What ``with_merge`` does to the archives, done to a list kept in step with them."""
    source_ids = set(sources)
    kept: list[T] = []
    placed = False
    for archive, ref in zip(archives, refs, strict=True):
        if archive.archive_id in source_ids:
            if not placed:
                kept.append(merged)
                placed = True
        else:
            kept.append(ref)
    if not placed:
        kept.append(merged)
    return kept
