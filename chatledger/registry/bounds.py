"""The registry's vocabulary: its bounds, its errors, session ids and a live session's state."""

from __future__ import annotations

import enum
import uuid
import warnings
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

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


Retention = Literal["keep", "delete", "erase"]
"""What a registry does to a session's ledger state when the session leaves it: ``keep`` it
(``Closed``/``Evicted``), ``delete`` it (``Deleted``: members no longer see it; with
encryption on its content is destroyed too), or ``erase`` it (a deletion that must destroy
the content: needs encryption on and ``key_scope = "session"``)."""


class RegistryConfig(BaseModel):
    """Bounds and retention of a ``SessionRegistry``; ``None`` means unbounded. Zero and
    negatives are invalid.

    Retention follows AG2's ACP ``SessionStore``: by default a session's history goes
    when the session is closed, evicted, expires or the registry shuts down;
    ``retain_history=True`` (the same as ``on_evict="keep"``) keeps it when it is let go
    -- evicted, expired, shut down -- while a close still drops it (a close says the
    conversation is over), unless ``on_close="keep"`` says otherwise.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_sessions: Annotated[int, Field(ge=1, strict=True)] | None = None
    """Hard cap on registered sessions; admission evicts the least recently used idle one."""
    ttl: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    """Seconds a session may stay idle after its last turn ended before it expires."""
    max_queued: Annotated[int, Field(ge=1, strict=True)] | None = None
    """Turns that may wait behind the running one, per session."""
    retain_history: Annotated[bool, Field(strict=True)] = False
    """Keep the history of sessions that are let go (evicted, expired, shut down): the same
    as ``on_evict="keep"``; a close drops it all the same (see ``on_close``)."""
    on_close: Retention = "delete"
    """What ``close()`` records: ``delete`` (the default) a ``Deleted`` event -- the session
    leaves the working set, its key starts afresh and members see only what comes after
    (admins keep the audit trail; with encryption on its content is destroyed); ``erase``
    the same, destroying its content for sure (encryption on, ``key_scope = "session"``);
    ``keep`` a ``Closed`` event (adopting the id brings the session back as it was)."""
    on_evict: Retention = "delete"
    """What an LRU or TTL eviction, and ``aclose()``, do: as for ``on_close``; ``keep``
    records ``Evicted`` (``aclose()``: nothing), and adopting brings the session back.
    Defaults to ``keep`` with ``retain_history=True``, else ``delete``."""

    @model_validator(mode="before")
    @classmethod
    def _retention(cls, data: Any) -> Any:
        """``retain_history`` and ``on_evict`` say one thing: fill one in from the other,
        and refuse them contradicting each other."""
        if not isinstance(data, dict):
            return data
        retain, evict = data.get("retain_history"), data.get("on_evict")
        if evict is None:
            data = {k: v for k, v in data.items() if k != "on_evict"}
            if retain is True:
                data["on_evict"] = "keep"
        elif retain is True and evict != "keep":
            raise ValueError(
                f"retain_history=True keeps history on eviction, but on_evict={evict!r} drops "
                "it; pass one of them"
            )
        elif retain is False and evict == "keep":
            raise ValueError(
                "retain_history=False drops history on eviction, but on_evict='keep' keeps it; "
                "pass one of them"
            )
        elif retain is None and evict == "keep":
            data = {**data, "retain_history": True}
        return data


_OPTIONAL = frozenset({"retain_history", "on_evict"})  # None: derived from the other


def registry_config(**settings: Any) -> RegistryConfig:
    """A ``RegistryConfig`` from keyword settings; ``InvalidSettings`` naming what is wrong."""
    given = {k: v for k, v in settings.items() if k not in _OPTIONAL or v is not None}
    try:
        return RegistryConfig(**given)
    except ValidationError as error:
        problems = "; ".join(
            f"{e['loc'][0]}: {e['msg']}" if e["loc"] else e["msg"] for e in error.errors()
        )
        raise InvalidSettings(
            f"Invalid registry settings ({problems}); use None for unbounded, 'keep', "
            "'delete' or 'erase' for on_close and on_evict, and True or False for "
            "retain_history."
        ) from None


def check_erasable(config: RegistryConfig, ledger: SessionLedger) -> None:
    """``InvalidSettings`` if the registry is to erase sessions its ledger cannot erase."""
    if "erase" not in (config.on_close, config.on_evict):
        return
    settings = ledger.settings
    if not settings.encryption or settings.key_scope != "session":
        raise InvalidSettings(
            "on_close/on_evict='erase' destroys a session's content as it is deleted, which "
            "needs the ledger's setting encryption on and key_scope 'session' (this one has "
            f"encryption={settings.encryption}, key_scope={settings.key_scope!r}). Turn "
            "encryption on, or use 'delete'."
        )


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
