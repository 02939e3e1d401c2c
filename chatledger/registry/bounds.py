"""The registry's vocabulary: its bounds, its errors, session ids and a live session's state."""

from __future__ import annotations

import enum
import uuid
import warnings
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from chatledger.adapters.database import sqlite_in_memory
from chatledger.async_ledger import AsyncSessionLedger
from chatledger.domain.failures import (
    ChatLedgerError,
    InvalidInput,
    InvalidSettings,
    UnknownSession,
)
from chatledger.domain.values import ClientContext, Principal
from chatledger.ledger import SessionLedger


class LiveState(enum.Enum):
    """Where a live session is in its life in the registry."""

    LIVE = "live"  # registered
    LEAVING = "leaving"  # being evicted, closed or forgotten: new turns and outside writes refused
    GONE = "gone"  # let go


class UnknownSessionError(UnknownSession):
    """No live session under that id here: never issued, evicted, expired, closed or forgotten."""


class SessionBusyError(ChatLedgerError):
    """The session's turn queue is full (``max_queued``); the turn did not start."""


class SessionLimitError(ChatLedgerError):
    """The registry is at ``max_sessions`` and every session is busy; nothing was admitted."""


Retention = Literal["keep", "delete"]
"""What a registry does to a session's ledger state when the session leaves it."""


class RegistryConfig(BaseModel):
    """Bounds and retention of a ``SessionRegistry``; ``None`` means unbounded. Zero and
    negatives are invalid."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_sessions: Annotated[int, Field(ge=1, strict=True)] | None = None
    """Hard cap on registered sessions; admission evicts the least recently used idle one."""
    ttl: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    """Seconds a session may stay idle after its last turn ended before it expires."""
    max_queued: Annotated[int, Field(ge=1, strict=True)] | None = None
    """Turns that may wait behind the running one, per session."""
    on_close: Retention = "keep"
    """What ``close()`` records: ``keep`` a ``Closed`` event (the session can be adopted
    again, its history and buffer intact); ``delete`` a ``Deleted`` event (the session leaves
    the working set and its key starts afresh; the old history stays in the audit log)."""
    on_evict: Retention = "keep"
    """What an LRU or TTL eviction records: ``keep`` an ``Evicted`` event (adopting it brings
    the session back as it was); ``delete`` a ``Deleted`` event, as for ``on_close``."""


def registry_config(**settings: Any) -> RegistryConfig:
    """A ``RegistryConfig`` from keyword settings; ``InvalidSettings`` naming what is wrong."""
    try:
        return RegistryConfig(**settings)
    except ValidationError as error:
        problems = "; ".join(f"{e['loc'][0]}: {e['msg']}" for e in error.errors())
        raise InvalidSettings(
            f"Invalid registry settings ({problems}); use None for unbounded, and 'keep' "
            "or 'delete' for on_close and on_evict."
        ) from None


def checked_collaborators(ledger: Any, principal: Any, clock: Any) -> AsyncSessionLedger:
    """The registry's ledger as an ``AsyncSessionLedger``, after checking what it was given."""
    if isinstance(ledger, SessionLedger):
        ledger = AsyncSessionLedger(ledger)
    if not isinstance(ledger, AsyncSessionLedger):
        raise InvalidSettings("ledger must be a SessionLedger or an AsyncSessionLedger.")
    if not isinstance(principal, Principal):
        raise InvalidSettings("principal must be a chatledger Principal.")
    if not callable(clock):
        raise InvalidSettings("clock must be a callable returning monotonic seconds.")
    return ledger


def warn_if_history_dies_with_the_process(config: RegistryConfig, ledger_url: str) -> None:
    """Warn when a registry keeps history (on close or eviction) in in-memory SQLite."""
    if "keep" in (config.on_close, config.on_evict) and sqlite_in_memory(ledger_url):
        warnings.warn(
            "This registry keeps the history of the sessions it closes or evicts, but its "
            "ledger is in-memory SQLite: that history is lost when the process exits. Use "
            "a file or PostgreSQL URL for the ledger, or on_close/on_evict='delete'.",
            RuntimeWarning,
            stacklevel=4,
        )


def normalise_id(session_id: object) -> str | None:
    """The canonical hex form of a session id, or ``None`` if it is not a UUID."""
    if isinstance(session_id, uuid.UUID):
        return session_id.hex
    if not isinstance(session_id, str):
        return None
    try:
        return uuid.UUID(session_id).hex
    except ValueError:
        return None


def unknown(session_id: object) -> UnknownSessionError:
    return UnknownSessionError(
        f"No live session {session_id!s} in this registry (never issued, evicted, expired, "
        "closed or forgotten); call get_or_adopt(session_id) to bring back one the ledger holds."
    )


def client_context(
    cwd: str, additional_directories: Sequence[str], meta: Mapping[str, Any] | None
) -> ClientContext:
    """The client context a registry records when it starts or adopts a session."""
    if isinstance(additional_directories, str):
        raise InvalidInput("additional_directories must be a list of paths, not one string.")
    try:
        return ClientContext(
            cwd=cwd,
            additional_directories=tuple(additional_directories),
            meta=dict(meta) if meta is not None else {},
        )
    except (ValidationError, TypeError) as error:
        raise InvalidInput(f"Invalid client context: {error}; nothing was recorded.") from None
