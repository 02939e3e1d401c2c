"""Timestamps as the store records them: integer microseconds since the epoch, UTC.

Exact in both directions (no float rounding), so a stored time and the
event's own timestamp always agree.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(moment: datetime) -> int:
    """Microseconds since the epoch (UTC) of an aware datetime."""
    return (moment - _EPOCH) // _MICROSECOND  # timedelta // timedelta: an exact int


def from_micros(micros: int) -> datetime:
    """The aware UTC datetime of ``micros`` since the epoch."""
    return _EPOCH + timedelta(microseconds=micros)  # exact, and one object built, not two
