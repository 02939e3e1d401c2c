"""Storage errors the ``eventsourcing`` library has no type for, raised by both append paths."""

from __future__ import annotations

from eventsourcing.persistence import OperationalError


class OutcomeUnknown(OperationalError):
    """A write's COMMIT got no answer: it may or may not have been recorded."""
