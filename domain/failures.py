"""The error vocabulary of chatledger.

Every exception that crosses the public API is one of these. They live in the
domain (the innermost layer) so that adapters can translate driver errors
without reaching upward; the package face re-exports them as
``chatledger.errors``. Each message should tell the caller what to do next.
"""

from __future__ import annotations


class ChatLedgerError(Exception):
    """Base class of every error chatledger raises on purpose."""


class InvalidInput(ChatLedgerError, ValueError):
    """The caller passed something chatledger cannot record; nothing was recorded."""


class InvalidSettings(InvalidInput):
    """A setting (argument, environment variable or file) has an invalid value."""


class UnknownSession(ChatLedgerError, LookupError):
    """No session exists under that tenant and key (or not at that version/time)."""


class LedgerNotFound(ChatLedgerError, LookupError):
    """No chatledger database at that URL (opened with ``create_tables=False``, which never
    creates one): a missing SQLite file, or a database without chatledger's tables."""


class AccessDenied(ChatLedgerError, PermissionError):
    """The principal may not touch that session (another tenant, not an admin)."""


class SessionErased(ChatLedgerError):
    """The session's content was erased: it takes no more writes (and cannot be forked).

    Its history stays -- event types, actors, times, counters, the hash chain --
    with the content reading as erased. Start a new session under another key.
    """


class ConcurrencyConflict(ChatLedgerError):
    """Another writer changed the session in a way that makes retrying wrong."""


class StoreUnavailable(ChatLedgerError):
    """The event store or an archive store could not be reached or used."""


class ProjectionTimeout(StoreUnavailable):
    """The read models did not reach the requested position in time."""


class WriteOutcomeUnknown(StoreUnavailable):
    """The database went away while a write was committing: it may or may not be recorded.

    Retry the same call with the same ``idempotency_key``: if the first write
    landed, the retry records nothing and returns its result.
    """
