"""Timestamps as the store records them: integer microseconds since the epoch, UTC.

Exact in both directions (no float rounding), so a stored time and the
event's own timestamp always agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(moment: datetime) -> int:
    """Microseconds since the epoch (UTC) of an aware datetime."""
    return (moment - _EPOCH) // _MICROSECOND  # timedelta // timedelta: an exact int


def from_micros(micros: int) -> datetime:
    """The aware UTC datetime of ``micros`` since the epoch."""
    return _EPOCH + _MICROSECOND * micros  # exact: a timedelta times an int stays integral


def from_micros_all(stamps: Sequence[int]) -> list[datetime]:
    """``from_micros`` of each of ``stamps``, in passes of C code, one datetime per
    distinct value (rows written together share their time)."""
    distinct = set(stamps)
    times = dict(
        zip(distinct, map(_EPOCH.__add__, map(_MICROSECOND.__mul__, distinct)), strict=True)
    )
    return list(map(times.__getitem__, stamps))
