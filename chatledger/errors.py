"""The exceptions of chatledger's public API (defined in ``chatledger.domain.failures``).

Catch ``ChatLedgerError`` for anything chatledger raises on purpose; no
SQLAlchemy, psycopg or pydantic exception crosses the public API.
"""

from chatledger.domain.failures import (
    AccessDenied,
    ChatLedgerError,
    ConcurrencyConflict,
    InvalidInput,
    InvalidSettings,
    LedgerNotFound,
    ProjectionTimeout,
    SessionErased,
    StoreUnavailable,
    UnknownSession,
    WriteOutcomeUnknown,
)

__all__ = [
    "AccessDenied",
    "ChatLedgerError",
    "ConcurrencyConflict",
    "InvalidInput",
    "InvalidSettings",
    "LedgerNotFound",
    "ProjectionTimeout",
    "SessionErased",
    "StoreUnavailable",
    "UnknownSession",
    "WriteOutcomeUnknown",
]
