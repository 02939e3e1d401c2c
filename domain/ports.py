"""Ports the session service depends on: a summarizer, an archive store, a key store, a clock.

Each is small and owned here; ``chatledger.adapters`` ships a deterministic or
in-memory implementation of every one, so embedders can test against them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable
from uuid import UUID

from pydantic import Field

from chatledger.domain.values import ArchiveSummary, Message, Value

Clock = Callable[[], datetime]
"""Returns the current moment as a timezone-aware datetime."""


class Summary(Value):
    """What a summarizer produces: an overview, a one-line abstract, metadata."""

    overview: str
    abstract: str
    metadata: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class Summarizer(Protocol):
    """Turns messages into a summary, and several summaries into one."""

    def summarize(self, messages: Sequence[Message]) -> Summary: ...

    def merge(self, archives: Sequence[ArchiveSummary]) -> Summary: ...


class ArchiveBody(Value):
    """The full content of an archive, kept outside the event log if a store is set."""

    archive_id: str
    session_id: str
    tenant: str
    key: str
    messages: tuple[Message, ...]
    overview: str
    abstract: str
    # Set when the body's content is encrypted (chatledger.adapters.sealing): the
    # messages, overview and abstract then hold their erased form, and this their content.
    sealed: str | None = None


@runtime_checkable
class ArchiveStore(Protocol):
    """Keeps archive bodies; raise ``StoreUnavailable`` when it cannot."""

    def put(self, body: ArchiveBody) -> None: ...

    def get(self, archive_id: str) -> ArchiveBody | None: ...


KeyScope = Literal["session", "user"]
"""Whose content one data key encrypts: one session's, or that of every session a user
started (setting ``key_scope``)."""


class KeyOwner(Value):
    """What a data key is for: a session (``scope="session"``), or a user of an account."""

    scope: KeyScope
    tenant: str
    user_id: str = ""
    session_id: UUID | None = None  # scope "session"


class DataKey(Value):
    """A data key: its id (named by everything encrypted with it) and 32 bytes of AES key."""

    key_id: str
    material: bytes = Field(repr=False)


class KeyRecord(Value):
    """What a key store knows of a key, without its material."""

    key_id: str
    scope: KeyScope
    tenant: str
    user_id: str
    session_id: UUID | None
    created_at: datetime
    destroyed_at: datetime | None = None


@runtime_checkable
class KeyStore(Protocol):
    """Holds the data keys content is encrypted with; destroying a key erases that content.

    The default keeps them in a table of the ledger's own database
    (``chatledger.adapters.key_store.SqlKeyStore``); a key management service can
    stand in by implementing these six methods. Raise ``StoreUnavailable`` when
    the store cannot be used.
    """

    def key_for(self, owner: KeyOwner, at: datetime) -> DataKey:
        """The owner's live key, made and kept first if it has none. A session's key is
        never made again once destroyed: then ``SessionErased``."""
        ...

    def get(self, key_id: str) -> bytes | None:
        """A key's material; ``None`` once destroyed (or for a key this store never held)."""
        ...

    def records(
        self,
        *,
        key_ids: Sequence[str] | None = None,
        tenant: str | None = None,
        user_id: str | None = None,
        session_id: UUID | None = None,
    ) -> list[KeyRecord]:
        """Records of the keys matching every given filter (destroyed ones too)."""
        ...

    def destroy(self, key_ids: Sequence[str], at: datetime) -> None:
        """Destroy these keys for good (a destroyed or unknown one is skipped)."""
        ...

    def restore(self, record: KeyRecord, material: bytes | None) -> None:
        """Take over a key from an export (``material`` ``None``: destroyed there)."""
        ...

    def purge(self) -> bool:
        """Make destroyed keys unrecoverable from the storage itself (free pages, old row
        versions, logs), as far as the store can; ``False`` if that could not be finished
        now (it is tried again by the next erasure)."""
        ...
