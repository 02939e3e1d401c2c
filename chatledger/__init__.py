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
    Forked,
    MessageAdded,
    Reactivated,
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
    LedgerNotFound,
    StoreUnavailable,
    UnknownSession,
    WriteOutcomeUnknown,
)
from chatledger.ledger import SessionLedger
from chatledger.read_models import (
    ArchiveEntry,
    AuditEntry,
    ForkEntry,
    ProjectionTimeout,
    ReadModels,
    SkippedEvent,
    TimelineEntry,
    ToolUsage,
    WorkingSetEntry,
)
from chatledger.registry import (
    LiveSession,
    RegistryConfig,
    SessionBusyError,
    SessionLimitError,
    SessionRegistry,
    UnknownSessionError,
)
from chatledger.results import (
    AddedMessage,
    ChainHead,
    CommitResult,
    CommitTask,
    ContextView,
    Counters,
    FailedCommit,
    ImportResult,
    LedgerEvent,
    MergeRecord,
    MergeResult,
    SessionDiff,
    SessionView,
    VerifyIssue,
    VerifyReport,
)
from chatledger.settings import LedgerSettings

__version__ = "0.1.0"

__all__ = [
    "AccessDenied",
    "AddedMessage",
    "ArchiveBody",
    "ArchiveEntry",
    "ArchiveMerged",
    "ArchiveStore",
    "ArchiveSummary",
    "AsyncSessionLedger",
    "AuditEntry",
    "ChainHead",
    "ChatLedgerError",
    "ClientContext",
    "Closed",
    "CommitFailed",
    "CommitResult",
    "CommitTask",
    "Committed",
    "ConcurrencyConflict",
    "ContextView",
    "Counters",
    "Evicted",
    "ExtractiveSummarizer",
    "FailedCommit",
    "ForkEntry",
    "Forked",
    "ImportResult",
    "InMemoryArchiveStore",
    "InvalidInput",
    "InvalidSettings",
    "LedgerEvent",
    "LedgerNotFound",
    "LedgerSettings",
    "LiveSession",
    "MergeRecord",
    "MergeResult",
    "Message",
    "MessageAdded",
    "Principal",
    "ProjectionTimeout",
    "Reactivated",
    "ReadModels",
    "RegistryConfig",
    "SessionBusyError",
    "SessionDiff",
    "SessionEvent",
    "SessionLedger",
    "SessionLimitError",
    "SessionRegistry",
    "SessionView",
    "SkippedEvent",
    "SqlArchiveStore",
    "Started",
    "StoreUnavailable",
    "Summarizer",
    "Summary",
    "TimelineEntry",
    "ToolCall",
    "ToolUsage",
    "UnknownSession",
    "UnknownSessionError",
    "VerifyIssue",
    "VerifyReport",
    "WorkingSetEntry",
    "WriteOutcomeUnknown",
    "__version__",
    "estimate_tokens",
]
