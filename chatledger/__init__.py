"""chatledger: an embeddable, event-sourced ledger for LLM agent sessions.

The public API is what ``__all__`` lists; everything else is internal. Each name is
imported on first use (PEP 562 ``__getattr__``), so that ``import chatledger`` -- and
with it the ``chatledger`` command's ``--help`` -- does not load SQLAlchemy, pydantic
models or eventsourcing until something needs them. Type checkers see the plain imports
below.
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from chatledger.adapters.archive_store import InMemoryArchiveStore, SqlArchiveStore
    from chatledger.adapters.key_store import InMemoryKeyStore, SqlKeyStore
    from chatledger.adapters.summarizer import ExtractiveSummarizer
    from chatledger.async_ledger import AsyncSessionLedger
    from chatledger.domain.events import (
        ArchiveMerged,
        Closed,
        CommitFailed,
        Committed,
        Erased,
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
    from chatledger.domain.ports import (
        ArchiveBody,
        ArchiveStore,
        DataKey,
        KeyOwner,
        KeyRecord,
        KeyStore,
        Summarizer,
        Summary,
    )
    from chatledger.domain.values import (
        ERASED,
        ArchiveSummary,
        ClientContext,
        CompactionToken,
        Message,
        Principal,
        TaskState,
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
        ProjectionTimeout,
        SessionErased,
        StoreUnavailable,
        UnknownSession,
        WriteOutcomeUnknown,
    )
    from chatledger.ledger import SessionLedger
    from chatledger.read_models import ReadModels
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
        ArchiveEntry,
        AuditEntry,
        ChainHead,
        CommitResult,
        CommitTask,
        ContextView,
        Counters,
        ErasureResult,
        FailedCommit,
        ForkEntry,
        ImportResult,
        LedgerEvent,
        MergeRecord,
        MergeResult,
        SessionDiff,
        SessionView,
        SkippedEvent,
        StateView,
        TimelineEntry,
        ToolUsage,
        VerifyIssue,
        VerifyReport,
        WorkingSetEntry,
    )
    from chatledger.settings import LedgerSettings

__version__ = "0.1.0"

# Public name -> the module that defines it (tests/test_cli_startup.py checks that this
# matches the imports above and ``__all__``).
_EXPORTS: dict[str, str] = {
    "AccessDenied": "chatledger.errors",
    "AddedMessage": "chatledger.results",
    "ArchiveBody": "chatledger.domain.ports",
    "ArchiveEntry": "chatledger.results",
    "ArchiveMerged": "chatledger.domain.events",
    "ArchiveStore": "chatledger.domain.ports",
    "ArchiveSummary": "chatledger.domain.values",
    "AsyncSessionLedger": "chatledger.async_ledger",
    "AuditEntry": "chatledger.results",
    "ChainHead": "chatledger.results",
    "ChatLedgerError": "chatledger.errors",
    "ClientContext": "chatledger.domain.values",
    "Closed": "chatledger.domain.events",
    "CommitFailed": "chatledger.domain.events",
    "CommitResult": "chatledger.results",
    "CommitTask": "chatledger.results",
    "Committed": "chatledger.domain.events",
    "ConcurrencyConflict": "chatledger.errors",
    "ContextView": "chatledger.results",
    "Counters": "chatledger.results",
    "DataKey": "chatledger.domain.ports",
    "ERASED": "chatledger.domain.values",
    "Erased": "chatledger.domain.events",
    "ErasureResult": "chatledger.results",
    "InMemoryKeyStore": "chatledger.adapters.key_store",
    "KeyOwner": "chatledger.domain.ports",
    "KeyRecord": "chatledger.domain.ports",
    "KeyStore": "chatledger.domain.ports",
    "SessionErased": "chatledger.errors",
    "SqlKeyStore": "chatledger.adapters.key_store",
    "Evicted": "chatledger.domain.events",
    "ExtractiveSummarizer": "chatledger.adapters.summarizer",
    "FailedCommit": "chatledger.results",
    "ForkEntry": "chatledger.results",
    "Forked": "chatledger.domain.events",
    "ItemsRemoved": "chatledger.domain.events",
    "ImportResult": "chatledger.results",
    "InMemoryArchiveStore": "chatledger.adapters.archive_store",
    "InvalidInput": "chatledger.errors",
    "InvalidSettings": "chatledger.errors",
    "LedgerEvent": "chatledger.results",
    "LedgerNotFound": "chatledger.errors",
    "LedgerSettings": "chatledger.settings",
    "LiveSession": "chatledger.registry",
    "MergeRecord": "chatledger.results",
    "MergeResult": "chatledger.results",
    "Message": "chatledger.domain.values",
    "MessageAdded": "chatledger.domain.events",
    "Principal": "chatledger.domain.values",
    "ProjectionTimeout": "chatledger.errors",
    "Reactivated": "chatledger.domain.events",
    "ReadModels": "chatledger.read_models",
    "RegistryConfig": "chatledger.registry",
    "SessionBusyError": "chatledger.registry",
    "SessionDiff": "chatledger.results",
    "SessionEvent": "chatledger.domain.eventsourced",
    "SessionLedger": "chatledger.ledger",
    "SessionLimitError": "chatledger.registry",
    "SessionRegistry": "chatledger.registry",
    "SessionView": "chatledger.results",
    "SkippedEvent": "chatledger.results",
    "SqlArchiveStore": "chatledger.adapters.archive_store",
    "Started": "chatledger.domain.events",
    "StateChanged": "chatledger.domain.events",
    "StateView": "chatledger.results",
    "TailReplaced": "chatledger.domain.events",
    "TaskState": "chatledger.domain.values",
    "CompactionToken": "chatledger.domain.values",
    "StoreUnavailable": "chatledger.errors",
    "Summarizer": "chatledger.domain.ports",
    "Summary": "chatledger.domain.ports",
    "TimelineEntry": "chatledger.results",
    "ToolCall": "chatledger.domain.values",
    "ToolUsage": "chatledger.results",
    "UnknownSession": "chatledger.errors",
    "UnknownSessionError": "chatledger.registry",
    "VerifyIssue": "chatledger.results",
    "VerifyReport": "chatledger.results",
    "WorkingSetEntry": "chatledger.results",
    "WriteOutcomeUnknown": "chatledger.errors",
    "estimate_tokens": "chatledger.domain.values",
}


# Hidden from type checkers, so that a misspelt name is still an error for them.
if not _typing.TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'chatledger' has no attribute {name!r}")
        value = getattr(_importlib.import_module(module), name)
        globals()[name] = value  # later look-ups skip this function
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "ERASED",
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
    "CompactionToken",
    "ConcurrencyConflict",
    "ContextView",
    "Counters",
    "DataKey",
    "Erased",
    "ErasureResult",
    "Evicted",
    "ExtractiveSummarizer",
    "FailedCommit",
    "ForkEntry",
    "Forked",
    "ImportResult",
    "InMemoryArchiveStore",
    "InMemoryKeyStore",
    "InvalidInput",
    "InvalidSettings",
    "ItemsRemoved",
    "KeyOwner",
    "KeyRecord",
    "KeyStore",
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
    "SessionErased",
    "SessionEvent",
    "SessionLedger",
    "SessionLimitError",
    "SessionRegistry",
    "SessionView",
    "SkippedEvent",
    "SqlArchiveStore",
    "SqlKeyStore",
    "Started",
    "StateChanged",
    "StateView",
    "StoreUnavailable",
    "Summarizer",
    "Summary",
    "TailReplaced",
    "TaskState",
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
