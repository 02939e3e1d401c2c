"""chatledger: an embeddable, event-sourced ledger for LLM agent sessions.

The public API is what ``__all__`` lists; everything else is internal.
"""

from chatledger.adapters.archive_store import InMemoryArchiveStore, SqlArchiveStore
from chatledger.adapters.summarizer import ExtractiveSummarizer
from chatledger.async_ledger import AsyncSessionLedger
from chatledger.domain.events import (
    ArchiveMerged,
    Closed,
    CommitFailed,
    Committed,
    Evicted,
    MessageAdded,
    Started,
)
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.ports import ArchiveBody, ArchiveStore, Summarizer, Summary
from chatledger.domain.values import (
    ArchiveSummary,
    ClientContext,
    Message,
    Principal,
    ToolCall,
    estimate_tokens,
)
from chatledger.errors import (
    AccessDenied,
    ChatLedgerError,
    ConcurrencyConflict,
    InvalidInput,
    InvalidSettings,
    StoreUnavailable,
    UnknownSession,
)
from chatledger.ledger import SessionLedger
from chatledger.results import (
    AddedMessage,
    CommitResult,
    CommitTask,
    ContextView,
    LedgerEvent,
    MergeResult,
    SessionView,
)
from chatledger.settings import LedgerSettings

__version__ = "0.1.0"

__all__ = [
    "AccessDenied",
    "AddedMessage",
    "ArchiveBody",
    "ArchiveMerged",
    "ArchiveStore",
    "ArchiveSummary",
    "AsyncSessionLedger",
    "ChatLedgerError",
    "ClientContext",
    "Closed",
    "CommitFailed",
    "CommitResult",
    "CommitTask",
    "Committed",
    "ConcurrencyConflict",
    "ContextView",
    "Evicted",
    "ExtractiveSummarizer",
    "InMemoryArchiveStore",
    "InvalidInput",
    "InvalidSettings",
    "LedgerEvent",
    "LedgerSettings",
    "MergeResult",
    "Message",
    "MessageAdded",
    "Principal",
    "SessionEvent",
    "SessionLedger",
    "SessionView",
    "SqlArchiveStore",
    "Started",
    "StoreUnavailable",
    "Summarizer",
    "Summary",
    "ToolCall",
    "UnknownSession",
    "__version__",
    "estimate_tokens",
]
