"""The session domain (``chatledger.domain``): aggregate, events, value objects, ports.

Pure: no SQL, no files, no clock reads. Imports nothing else of chatledger.
"""

from chatledger.domain.events import (
    EVENT_TYPES,
    ArchiveMerged,
    Closed,
    CommitFailed,
    Committed,
    Evicted,
    Forked,
    ItemsRemoved,
    MessageAdded,
    Reactivated,
    Started,
    StateChanged,
    TailReplaced,
)
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.failures import (
    AccessDenied,
    ChatLedgerError,
    ConcurrencyConflict,
    InvalidInput,
    InvalidSettings,
    LedgerNotFound,
    ProjectionTimeout,
    StoreUnavailable,
    UnknownSession,
    WriteOutcomeUnknown,
)
from chatledger.domain.identity import session_id, validate_key
from chatledger.domain.ports import ArchiveBody, ArchiveStore, Clock, Summarizer, Summary
from chatledger.domain.session import Session, SessionState
from chatledger.domain.values import (
    ArchiveSummary,
    ClientContext,
    Message,
    Principal,
    ToolCall,
    estimate_tokens,
)

__all__ = [
    "EVENT_TYPES",
    "AccessDenied",
    "ArchiveBody",
    "ArchiveMerged",
    "ArchiveStore",
    "ArchiveSummary",
    "ChatLedgerError",
    "ClientContext",
    "Clock",
    "Closed",
    "CommitFailed",
    "Committed",
    "ConcurrencyConflict",
    "Evicted",
    "Forked",
    "InvalidInput",
    "InvalidSettings",
    "ItemsRemoved",
    "LedgerNotFound",
    "Message",
    "MessageAdded",
    "Principal",
    "ProjectionTimeout",
    "Reactivated",
    "Session",
    "SessionEvent",
    "SessionState",
    "Started",
    "StateChanged",
    "StoreUnavailable",
    "Summarizer",
    "Summary",
    "TailReplaced",
    "ToolCall",
    "UnknownSession",
    "WriteOutcomeUnknown",
    "estimate_tokens",
    "session_id",
    "validate_key",
]
