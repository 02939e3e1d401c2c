"""The ``Session`` aggregate: the live buffer, the live archives and counters.

State is kept small on purpose: committed message bodies leave the aggregate
(they stay in the event log), so snapshots and cache copies stay bounded by
the live buffer and the archive summaries, not by the length of history.
Commands validate and then trigger exactly one event each; nothing here reads
a clock (timestamps are passed in) or touches storage.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from functools import partial
from itertools import compress
from typing import Any, ClassVar, Final, Literal, NamedTuple, Self
from uuid import UUID

from eventsourcing.domain import BaseAggregate, CanInitAggregate, CanSnapshotAggregate
from eventsourcing.utils import get_topic, resolve_topic
from pydantic import BaseModel, ConfigDict, Field

from chatledger.domain.events import (
    ArchiveMerged,
    Closed,
    CommitFailed,
    Committed,
    CompactionCleared,
    CompactionPrepared,
    Deleted,
    Erased,
    Evicted,
    ExtractionAdvanced,
    Forked,
    ItemsRemoved,
    MessageAdded,
    Reactivated,
    Restarted,
    Started,
    StateChanged,
    TailReplaced,
    TaskStateChanged,
    UsageImported,
    drop_built,
    new_id,
)
from chatledger.domain.eventsourced import DomainEvent
from chatledger.domain.failures import (
    ConcurrencyConflict,
    InvalidInput,
    SessionErased,
    UnknownSession,
)
from chatledger.domain.identity import message_id_at, session_id, version_named
from chatledger.domain.message_runs import MessageRun, newest_that_fit
from chatledger.domain.values import (
    ArchiveSummary,
    ClientContext,
    CompactionToken,
    EvictionReason,
    Message,
    Principal,
    TaskState,
    assemble,
)

DEFAULT_COMPRESS_THRESHOLD = 10
SNAPSHOT_ITEMS_PER_INTERVAL = 50
"""A snapshot holds a session's live messages and lists its live archives: one holding
more items than this waits that many times the interval (``Session.should_snapshot``)."""
SessionStatus = Literal["live", "evicted", "closed", "deleted", "erased"]
LIVE: Final = "live"
EVICTED: Final = "evicted"
CLOSED: Final = "closed"
DELETED: Final = "deleted"
ERASED_STATUS: Final = "erased"
ErasureScope = Literal["session", "user", "tenant", "incarnation"]


class SessionCounters(NamedTuple):
    """A session's counters and status right after one of its events."""

    message_count: int
    pending_tokens: int
    turn_count: int
    commit_count: int
    archive_count: int  # live archives
    last_commit_at: datetime | None
    status: SessionStatus  # LIVE, EVICTED (idle, LRU, admin) or CLOSED (by its client)


counters_of = partial(tuple.__new__, SessionCounters)
"""A ``SessionCounters`` of a tuple of its seven values as it stands: ``tuple.__new__``
itself (C code), not ``_make``'s Python -- for what runs once per event."""
ArchiveRef = tuple[int, int]
"""Where a live archive was recorded: (version of the event, index among its archives)."""


class SessionState(BaseModel):
    """Everything a ``Session`` holds, as one serialisable value (for copies and snapshots).

    A stored snapshot references its live archives instead of embedding them:
    ``archives`` is empty and ``archive_refs`` says which events recorded them
    (see ``Session.Snapshot``). A snapshot stored before archive references
    existed embeds them and has ``archive_refs`` None.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    created_on: datetime
    modified_on: datetime
    tenant: str
    key: str
    context: ClientContext
    started_by: Principal
    buffer: tuple[Message, ...]
    archives: tuple[ArchiveSummary, ...]
    message_count: int
    commit_count: int
    last_commit_at: datetime | None
    updated_at: datetime
    evicted: bool
    closed: bool = False
    state: dict[str, Any] = Field(default_factory=dict)
    deleted: bool = False
    incarnation: int = 0
    task: TaskState = TaskState()
    watermark: int = 0
    extraction_summary: str = ""
    pending_compaction: CompactionToken | None = None
    archive_refs: tuple[ArchiveRef, ...] | None = None
    erased: bool = False


class Session(BaseAggregate[UUID]):
    """One conversation of one tenant, rebuilt from its events."""

    def __init__(self) -> None:
        # Filled in by ``Started.apply``; defaults keep the shape total.
        self.tenant = ""
        self.key = ""
        self.context = ClientContext()
        self.started_by: Principal = Principal(account_id="-")
        self._buffer: dict[str, Message] = {}  # live messages by id, oldest first
        # Runs of messages replayed after those of _buffer, not built yet (see buffer).
        self._unbuilt: list[MessageRun] = []
        self.pending_tokens = 0
        self.turn_count = 0
        self.archives: list[ArchiveSummary] = []
        # In step with archives: the event that recorded each one (a snapshot stores
        # these, not the archives). None when rebuilt from an old snapshot that
        # embedded its archives without saying where they came from.
        self.archive_refs: list[ArchiveRef] | None = []
        self.message_count = 0
        self.commit_count = 0
        self.last_commit_at: datetime | None = None
        self.updated_at: datetime = self.created_on
        self.evicted = False
        self.closed = False  # evicted because its client closed it
        self.state: dict[str, Any] = {}  # the key-value state (StateChanged)
        self.deleted = False  # Deleted: the key starts afresh (Restarted)
        self.incarnation = 0  # the version that began the current incarnation (0: never deleted)
        self.erased = False  # Erased: its content is gone; no more writes
        self.task = TaskState()  # the agent's working state (TaskStateChanged)
        self.watermark = 0  # live items a background extractor has read (ExtractionAdvanced)
        self.extraction_summary = ""
        self.pending_compaction: CompactionToken | None = None  # CompactionPrepared
        # The counters after each pending event, in step with _pending_events.
        self._pending_counters: list[SessionCounters] = []
        # An idempotency key for the next event triggered (see key_write).
        self._write_key: str | None = None
        # (version, live items) of the state this object was rebuilt from: a
        # snapshot, or nothing at version 0. Not part of the state: it only
        # tells the store what a new snapshot would save (see should_snapshot).
        self.rebuilt_from: tuple[int, int] = (0, 0)

    # ----------------------------------------------------------------- commands
    @classmethod
    def start(
        cls,
        *,
        tenant: str,
        key: str,
        actor: Principal,
        timestamp: datetime,
        context: ClientContext | None = None,
    ) -> Session:
        return cls._create(
            Started,
            id=session_id(tenant, key),
            tenant=tenant,
            key=key,
            context=context or ClientContext(),
            actor=actor,
            timestamp=timestamp,
        )

    @classmethod
    def fork(
        cls,
        origin: Session,
        *,
        key: str,
        actor: Principal,
        timestamp: datetime,
    ) -> Session:
        """A new session in the origin's tenant carrying the origin's current state."""
        if origin.erased:
            raise SessionErased(
                f"Session {origin.key!r} was erased: there is no content left to fork. "
                "Nothing was recorded."
            )
        return cls._create(
            Forked,
            id=session_id(origin.tenant, key),
            tenant=origin.tenant,
            key=key,
            context=origin.context,
            origin_session_id=origin.id,
            origin_key=origin.key,
            origin_version=origin.version,
            buffer=tuple(origin.buffer.values()),
            archives=tuple(origin.archives),
            message_count=origin.message_count,
            commit_count=origin.commit_count,
            last_commit_at=origin.last_commit_at,
            state=dict(origin.state),
            task=origin.task,
            watermark=origin.watermark,
            extraction_summary=origin.extraction_summary,
            actor=actor,
            timestamp=timestamp,
        )

    @classmethod
    def _create(
        cls,
        event_class: type[CanInitAggregate[UUID]],
        *,
        id: UUID | None = None,
        **kwargs: Any,
    ) -> Self:
        """The library's creation, plus the counters after the creation event (as
        ``trigger_event`` keeps them for every later event)."""
        session = super()._create(event_class, id=id, **kwargs)
        session._pending_counters.append(session.counters())
        return session

    def delete(
        self,
        *,
        actor: Principal,
        timestamp: datetime,
        erased_key_ids: Sequence[str] | None = None,
    ) -> None:
        """Delete the session: its key starts afresh; its history stays. With
        ``erased_key_ids`` (the keys of this incarnation, destroyed by the caller) an
        ``Erased`` of scope ``incarnation`` is recorded first, in the same write."""
        self.require_present()
        if erased_key_ids is not None:
            self.trigger_event(
                Erased, scope="incarnation", key_ids=tuple(erased_key_ids), actor=actor,
                timestamp=timestamp,
            )  # fmt: skip
        self.trigger_event(Deleted, actor=actor, timestamp=timestamp)

    def restart_if_deleted(
        self, context: ClientContext | None, *, actor: Principal, timestamp: datetime
    ) -> None:
        """Before a write that may start a session: a deleted one starts afresh here."""
        if self.deleted:
            self.trigger_event(
                Restarted, context=context or ClientContext(), actor=actor, timestamp=timestamp
            )

    def erase(
        self,
        scope: ErasureScope,
        key_ids: Sequence[str],
        *,
        actor: Principal,
        timestamp: datetime,
    ) -> bool:
        """Record that the session's content was erased (its keys destroyed by the caller);
        ``False`` if it was erased already (then nothing is recorded)."""
        if self.erased:
            return False
        self.trigger_event(
            Erased, scope=scope, key_ids=tuple(key_ids), actor=actor, timestamp=timestamp
        )
        return True

    def require_writable(self) -> None:
        """``SessionErased`` for an erased session (it takes no more writes)."""
        if self.erased:
            raise SessionErased(
                f"Session {self.key!r} was erased: its content is gone; it takes no more writes "
                "and cannot be forked. Start a new session under another key. Nothing was "
                "recorded."
            )

    def require_present(self) -> None:
        """``UnknownSession`` for a deleted session (a write that cannot start one)."""
        if self.deleted:
            raise UnknownSession(
                f"Session {self.key!r} was deleted; add a message to start it afresh."
            )

    def add_message(self, message: Message, *, actor: Principal, timestamp: datetime) -> str:
        """Record ``message``; its id, which the ledger gives it (``message_id_at`` its
        version) if it has none."""
        if self.deleted:
            self.restart_if_deleted(None, actor=actor, timestamp=timestamp)
        own = message.id
        if own and own in self.buffer:
            raise InvalidInput(
                f"A message with id {own!r} is already in the live buffer; "
                "use a fresh id (or omit it to get one)."
            )
        place = self._version + 1 + self.evicted  # (a Reactivated first, if evicted)
        if own and version_named(self._id, own) not in (None, place):
            raise InvalidInput(
                f"The message id {own!r} has the form of the ids this ledger gives the "
                "session's messages, for another place in it; use another id (or omit it "
                "to get one)."
            )
        if self.evicted:  # the message brings the session back: record that first
            self.trigger_event(
                Reactivated, previous_status=self.status, actor=actor, timestamp=timestamp
            )
        if self.erased:
            self.require_writable()
        version = self._version + 1
        if not own:
            message = message.named(message_id_at(self._id, version))
        write_key, self._write_key = self._write_key, None
        # The hottest event: built from a validated message and principal without a second
        # validation (``trigger_event`` builds every other kind).
        self._take(assemble(MessageAdded, {
            "originator_id": self._id, "originator_version": version,
            "timestamp": timestamp, "actor": actor, "idempotency_key": write_key,
            "message": message,
        }))  # fmt: skip
        return message.id

    def commit(
        self,
        archive: ArchiveSummary,
        *,
        actor: Principal,
        timestamp: datetime,
        kept: bool = False,
    ) -> None:
        self.require_present()
        if any(a.archive_id == archive.archive_id for a in self.archives):
            raise InvalidInput(
                f"Session {self.key!r} already has a live archive {archive.archive_id!r}; "
                "choose another archive id."
            )
        missing = self.missing_ids(archive.message_ids)
        if missing:
            raise InvalidInput(
                f"Messages {sorted(missing)} are not in the live buffer of session "
                f"{self.key!r}; pass ids of live (uncommitted) messages only."
            )
        if not archive.message_ids:
            raise InvalidInput("A commit must cover at least one message.")
        self.trigger_event(Committed, archive=archive, kept=kept, actor=actor, timestamp=timestamp)

    def record_commit_failure(
        self,
        *,
        attempt_id: str,
        error: str,
        message_count: int,
        actor: Principal,
        timestamp: datetime,
    ) -> None:
        self.trigger_event(
            CommitFailed,
            attempt_id=attempt_id,
            error=error,
            message_count=message_count,
            actor=actor,
            timestamp=timestamp,
        )

    def merge_archives(
        self,
        archive: ArchiveSummary,
        source_archive_ids: Sequence[str],
        *,
        actor: Principal,
        timestamp: datetime,
    ) -> None:
        self.require_present()
        live = {a.archive_id for a in self.archives}
        unknown = [s for s in source_archive_ids if s not in live]
        if unknown or len(set(source_archive_ids)) < 2:
            raise InvalidInput(
                f"A merge needs at least two distinct live archives; not live: {unknown}."
            )
        self.trigger_event(
            ArchiveMerged,
            archive=archive,
            source_archive_ids=tuple(source_archive_ids),
            actor=actor,
            timestamp=timestamp,
        )

    def remove_items(
        self,
        message_ids: Sequence[str],
        *,
        reason: Literal["remove", "pop", "clear"],
        actor: Principal,
        timestamp: datetime,
    ) -> None:
        """Take live items out of the buffer without archiving them."""
        self.require_present()
        missing = self.missing_ids(message_ids)
        if missing:
            raise InvalidInput(
                f"Items {sorted(missing)} are not in the live buffer of session {self.key!r}; "
                "pass ids of live items only."
            )
        if not message_ids:
            raise InvalidInput("Name at least one item to remove.")
        self.trigger_event(
            ItemsRemoved,
            message_ids=tuple(message_ids),
            reason=reason,
            actor=actor,
            timestamp=timestamp,
        )

    def replace_tail(
        self,
        expected_ids: Sequence[str],
        messages: Sequence[Message],
        *,
        actor: Principal,
        timestamp: datetime,
    ) -> list[str]:
        """Replace the newest live items, which must be exactly ``expected_ids`` (oldest
        first), by ``messages``; ``ConcurrencyConflict`` if the tail moved on. The ids of
        the new items (a random one for each that had none)."""
        self.require_present()
        tail = list(self.buffer)[-len(expected_ids) :] if expected_ids else []
        if tail != list(expected_ids):
            raise ConcurrencyConflict(
                f"The newest items of session {self.key!r} are no longer the ones read "
                "(another writer changed the buffer); read the tail again. Nothing was recorded."
            )
        kept = set(self.buffer) - set(expected_ids)
        # One event holds them all: a message without an id gets a random one, not one
        # of the ids of the stream's places (each names a single message).
        messages = [m if m.id else m.named(new_id()) for m in messages]
        clash = [m.id for m in messages if m.id in kept]
        if clash or len({m.id for m in messages}) != len(messages):
            raise InvalidInput(f"Item ids {clash} are already live; use fresh ids.")
        self.trigger_event(
            TailReplaced,
            removed_ids=tuple(expected_ids),
            messages=tuple(messages),
            actor=actor,
            timestamp=timestamp,
        )
        return [m.id for m in messages]

    def change_state(
        self,
        changes: dict[str, Any],
        removed: Sequence[str] = (),
        *,
        actor: Principal,
        timestamp: datetime,
        keep_empty: bool = False,
    ) -> None:
        """Set state keys to new JSON values and remove others, in one event. With
        ``keep_empty`` an empty change is recorded too: a keyed write that changed only
        shared state scopes leaves it in the session's own stream, where its key is kept."""
        if not changes and not removed and not keep_empty:
            return
        self.restart_if_deleted(None, actor=actor, timestamp=timestamp)
        self.trigger_event(
            StateChanged,
            changes=changes,
            removed=tuple(removed),
            actor=actor,
            timestamp=timestamp,
        )

    def set_task(self, task: TaskState, *, actor: Principal, timestamp: datetime) -> None:
        """Record the agent's working state (the whole of it)."""
        self.require_present()
        if task != self.task:
            self.trigger_event(TaskStateChanged, task=task, actor=actor, timestamp=timestamp)

    def advance_extraction(
        self, watermark: int, summary: str, *, actor: Principal, timestamp: datetime
    ) -> None:
        """Record how far a background extractor has read the live buffer (oldest first)."""
        self.require_present()
        if not 0 <= watermark <= len(self.buffer):
            raise InvalidInput(
                f"The watermark must be from 0 to the {len(self.buffer)} live items of "
                f"session {self.key!r}, not {watermark}."
            )
        self.trigger_event(
            ExtractionAdvanced,
            watermark=watermark,
            summary=summary,
            actor=actor,
            timestamp=timestamp,
        )

    def prepare_compaction(
        self, token: str, expires_at: datetime, *, actor: Principal, timestamp: datetime
    ) -> None:
        """Hand a compactor a token (a pending one that expired is cleared first)."""
        self.require_present()
        pending = self.pending_compaction
        if pending is not None:
            if timestamp < pending.expires_at:
                raise ConcurrencyConflict(
                    f"A compaction of session {self.key!r} is pending until "
                    f"{pending.expires_at.isoformat()}; complete it, or wait for it to expire."
                )
            self.trigger_event(
                CompactionCleared,
                token=pending.token,
                reason="expired",
                actor=actor,
                timestamp=timestamp,
            )
        self.trigger_event(
            CompactionPrepared,
            token=token,
            expires_at=expires_at,
            message_count=len(self.buffer),
            watermark=self.watermark,
            actor=actor,
            timestamp=timestamp,
        )

    def consume_compaction(
        self, token: str, *, actor: Principal, timestamp: datetime
    ) -> Literal["completed", "expired", "unknown"]:
        """Consume the pending token (``"completed"``). A pending token that expired is
        cleared whichever token is presented: ``"expired"`` if it was this one,
        ``"unknown"`` if another (nothing is recorded for an unknown token when none is
        pending, or the pending one is live)."""
        pending = self.pending_compaction
        if pending is None:
            return "unknown"
        expired = timestamp >= pending.expires_at
        if pending.token != token and not expired:
            return "unknown"
        self.trigger_event(
            CompactionCleared,
            token=pending.token,
            reason="expired" if expired else "completed",
            actor=actor,
            timestamp=timestamp,
        )
        if pending.token != token:
            return "unknown"
        return "expired" if expired else "completed"

    def import_usage(
        self,
        totals: Sequence[dict[str, Any]],
        *,
        source: str,
        actor: Principal,
        timestamp: datetime,
    ) -> None:
        """Merge tool usage totals of an earlier system (one event per tool)."""
        self.require_present()
        for total in totals:
            self.trigger_event(
                UsageImported, **total, source=source, actor=actor, timestamp=timestamp
            )

    def close(self, *, actor: Principal, timestamp: datetime) -> None:
        self.require_present()
        self.trigger_event(Closed, actor=actor, timestamp=timestamp)

    def evict(
        self,
        reason: EvictionReason,
        *,
        idle_seconds: float | None,
        actor: Principal,
        timestamp: datetime,
    ) -> None:
        self.require_present()
        self.trigger_event(
            Evicted, reason=reason, idle_seconds=idle_seconds, actor=actor, timestamp=timestamp
        )

    def trigger_event(self, event_class: type[Any], **kwargs: Any) -> None:
        """Build the next event (validated by pydantic), apply it, queue it for recording.

        The same steps as the library's version without its per-call dictionary
        copies and topic checks, on the ledger's hottest path. Every command
        passes ``timestamp`` (time is injected, never read here). An erased session
        refuses every event (``SessionErased``).
        """
        if self.erased:
            self.require_writable()
        if self._write_key is not None:
            kwargs["idempotency_key"], self._write_key = self._write_key, None
        self._take(
            event_class(originator_id=self._id, originator_version=self._version + 1, **kwargs)
        )

    def _take(self, event: Any) -> None:
        """Apply the next event and queue it, with the counters after it, for recording:
        the library's mutate() less its checks, which hold by construction here (this
        session's id, the next version)."""
        event.apply(self)
        self._version = event.originator_version
        self._modified_on = event.timestamp
        self._pending_events.append(event)
        self._pending_counters.append(self.counters())

    def key_write(self, idempotency_key: str) -> None:
        """Mark the write in progress with the caller's idempotency key: its first event
        (pending already, as a creation, or the next one triggered) carries it."""
        if self._pending_events:
            first: Any = self._pending_events[0]  # a SessionEvent (a frozen pydantic model)
            self._pending_events[0] = first.model_copy(update={"idempotency_key": idempotency_key})
        else:
            self._write_key = idempotency_key

    def collect_events(self) -> list[Any]:
        """Hand over the pending events (oldest first) and forget them."""
        return [event for event, _ in self.collect_changes()]

    def collect_changes(self) -> list[tuple[Any, SessionCounters]]:
        """Hand over each pending event with the counters right after it, and forget them."""
        events, self._pending_events = self._pending_events, []
        counters, self._pending_counters = self._pending_counters, []
        self._write_key = None
        return list(zip(events, counters, strict=True))

    # ---------------------------------------------------------------- queries
    def missing_ids(self, message_ids: Sequence[str]) -> set[str]:
        return {i for i in message_ids if i not in self.buffer}

    def set_buffer(self, messages: Sequence[Message]) -> None:
        """Replace the live buffer (when rebuilding state), with its derived counters."""
        self.buffer = {m.id: m for m in messages}
        self.pending_tokens = sum(m.tokens for m in messages)
        self.turn_count = sum(1 for m in messages if m.role == "user")

    def drop_messages(self, message_ids: Sequence[str]) -> None:
        """Take these messages out of the live buffer, with their tokens and user turns
        (ids not live are passed over). A run replayed unbuilt that leaves whole -- a
        commit of the buffer, the usual case -- leaves unbuilt: it counted its tokens and
        user turns already, and nothing will read its messages."""
        if self._unbuilt and not self.watermark:  # a watermark counts built items
            gone = set(message_ids)
            runs = self._unbuilt
            # A run's ids are distinct and live nowhere else (replay_run): a run all of
            # whose ids leave takes away its own counts.
            whole = [gone.issuperset(run.ids) for run in runs]
            if any(whole):
                left = [run for run, out in zip(runs, whole, strict=True) if not out]
                self._unbuilt = left
                for run in compress(runs, whole):
                    self.pending_tokens -= run.tokens
                    self.turn_count -= run.user_turns
                if not self._buffer and not left:
                    return
        drop_built(self, message_ids)

    def replay_messages(
        self, messages: Sequence[Message], version: int, timestamp: datetime
    ) -> None:
        """Replay ``MessageAdded`` events of ``messages``, the last at ``version`` and
        ``timestamp``: the same state as applying them one by one, in one step (a load
        reads long runs of messages; see ``chatledger.adapters``)."""
        self._check_run(len(messages), version)
        if not messages:
            return
        buffer = self.buffer
        tokens = turns = 0
        for message in messages:
            buffer[message.id] = message
            tokens += message.tokens
            if message.role == "user":
                turns += 1
        self._ran(len(messages), tokens, turns, version, timestamp)

    def replay_run(self, run: MessageRun, version: int, timestamp: datetime) -> None:
        """``replay_messages`` of a run whose messages are built only when read: the same
        state, its messages kept unbuilt until something reads the buffer (a prompt
        context reads only the newest: ``newest_messages``)."""
        count = len(run)
        self._check_run(count, version)
        if not count:
            return
        if not self._new_ids(run):  # one by one, a repeated id keeps its first place
            self.replay_messages(run.messages(), version, timestamp)
            return
        self._unbuilt.append(run)
        self._ran(count, run.tokens, run.user_turns, version, timestamp)

    def _check_run(self, count: int, version: int) -> None:
        if version != self.version + count:
            raise ValueError(
                f"{count} messages after version {self.version} end at "
                f"{self.version + count}, not {version}"
            )

    def _new_ids(self, run: MessageRun) -> bool:
        """Whether the run's ids are distinct and none is live already."""
        ids = set(run.ids)  # a set, not dict keys: built in less than half the time
        if len(ids) != len(run) or not ids.isdisjoint(self._buffer):
            return False
        return all(ids.isdisjoint(other.ids) for other in self._unbuilt)

    def _ran(self, count: int, tokens: int, turns: int, version: int, when: datetime) -> None:
        """What a run of ``count`` messages changes besides the buffer."""
        self.pending_tokens += tokens
        self.turn_count += turns
        self.message_count += count
        self.evicted = self.closed = False
        self.updated_at = when
        self.version = version
        self.modified_on = when

    @property
    def buffer(self) -> dict[str, Message]:
        """The live messages by id, oldest first (runs replayed unbuilt are built now)."""
        if self._unbuilt:
            self._build()
        return self._buffer

    @buffer.setter
    def buffer(self, messages: dict[str, Message]) -> None:
        self._buffer = messages
        self._unbuilt = []

    def _build(self) -> None:
        buffer = self._buffer
        for run in self._unbuilt:
            buffer.update(zip(run.ids, run.messages(), strict=True))
        self._unbuilt = []

    def buffer_parts(self) -> tuple[list[Message], list[MessageRun]]:
        """The live messages as held, none built: those built already, then the runs
        replayed unbuilt, oldest first (``buffer`` is their messages in that order)."""
        return list(self._buffer.values()), list(self._unbuilt)

    @property
    def buffer_size(self) -> int:
        """How many messages are live (``len(buffer)``, without building any)."""
        return len(self._buffer) + sum(len(run) for run in self._unbuilt)

    def newest_messages(self) -> Iterator[Message]:
        """The live messages, newest first, each built as it is read (an unbuilt run's
        messages are built again by a later full read; a context reads a few)."""
        for run in reversed(self._unbuilt):
            for index in range(len(run) - 1, -1, -1):
                yield run.message(index)
        yield from reversed(self._buffer.values())

    def newest_within(self, budget: int) -> tuple[list[Message], int]:
        """The live messages that fit in ``budget`` tokens, oldest first, and the tokens
        they take: taken newest first, up to the first that does not fit (what a prompt
        context keeps; ``newest_that_fit`` of ``newest_messages``). An unbuilt run builds
        only those of its messages, at once (``MessageRun.newest``)."""
        parts: list[list[Message]] = []
        remaining = budget
        for run in reversed(self._unbuilt):
            kept, used = run.newest(remaining)
            parts.append(kept)
            remaining -= used
            if len(kept) < len(run):
                break
        else:
            kept, used = newest_that_fit(reversed(self._buffer.values()), remaining)
            parts.append(kept)
            remaining -= used
        if len(parts) == 1:
            return parts[0], budget - remaining
        return [m for part in reversed(parts) for m in part], budget - remaining

    def __eq__(self, other: object) -> bool:
        """Equal state (the library compares attributes; unbuilt runs are built first)."""
        if isinstance(other, Session):
            self._build()
            other._build()
        return super().__eq__(other)

    @property
    def status(self) -> SessionStatus:
        """LIVE, or why it left the working set: EVICTED or CLOSED (or DELETED, ERASED)."""
        if self.erased:
            return ERASED_STATUS
        if self.deleted:
            return DELETED
        if not self.evicted:
            return LIVE
        return CLOSED if self.closed else EVICTED

    def counters(self) -> SessionCounters:
        """The counters and status now."""
        # A tuple as it stands (the generated __new__ binds seven arguments): this runs
        # after every event.
        return counters_of((
            self.message_count, self.pending_tokens, self.turn_count, self.commit_count,
            len(self.archives), self.last_commit_at, self.status,
        ))  # fmt: skip

    @property
    def live_messages(self) -> list[Message]:
        return list(self.buffer.values())

    @property
    def state_items(self) -> int:
        """Live messages plus live archives: what a snapshot of this state holds."""
        return self.buffer_size + len(self.archives)

    def should_snapshot(self, interval: int) -> bool:
        """Whether a snapshot now would make loading this session markedly cheaper.

        A load decodes the state it starts from and replays every event after
        it. At least ``interval`` events after the last snapshot, a new one
        pays when it drops at least half of what a load now goes through:
        events that changed no state (failures, evictions) and messages folded
        away by commits and merges. A session that only grows its buffer is
        not snapshotted again and again: each snapshot would be as big as the
        replay it replaces. Nor is one that holds many items: a snapshot holds
        every live message and lists every live archive, so one holding more
        than ``SNAPSHOT_ITEMS_PER_INTERVAL`` items waits ``interval`` events for
        each that many (by default 4 events an item) -- snapshots then take
        bytes linear in the events (one every ``interval`` events, each listing
        every archive so far, would take bytes growing with their square), they
        fall right after commits, when the buffer is short, and a load replays
        at most a few events for each item it reads from the snapshot anyway.
        """
        since, items = self.rebuilt_from
        events = self.version - since
        if events * SNAPSHOT_ITEMS_PER_INTERVAL < interval * max(
            SNAPSHOT_ITEMS_PER_INTERVAL, self.state_items
        ):
            return False
        saved = items + events - self.state_items
        return 2 * saved >= events

    def should_compress(self, threshold: int = DEFAULT_COMPRESS_THRESHOLD) -> bool:
        return self.turn_count >= threshold

    def to_state(self, *, buffer: bool = True) -> SessionState:
        """The session's state as one value; without its ``buffer`` (an empty one, none of
        its messages built) if ``buffer`` is False."""
        return SessionState(
            created_on=self.created_on,
            modified_on=self.modified_on,
            tenant=self.tenant,
            key=self.key,
            context=self.context,
            started_by=self.started_by,
            buffer=tuple(self.buffer.values()) if buffer else (),
            archives=tuple(self.archives),
            message_count=self.message_count,
            commit_count=self.commit_count,
            last_commit_at=self.last_commit_at,
            updated_at=self.updated_at,
            evicted=self.evicted,
            closed=self.closed,
            state=dict(self.state),
            deleted=self.deleted,
            incarnation=self.incarnation,
            task=self.task,
            watermark=self.watermark,
            extraction_summary=self.extraction_summary,
            pending_compaction=self.pending_compaction,
            archive_refs=None if self.archive_refs is None else tuple(self.archive_refs),
            erased=self.erased,
        )

    @classmethod
    def from_state(
        cls,
        id_: UUID,
        version: int,
        state: SessionState,
        archives: Sequence[ArchiveSummary] | None = None,
    ) -> Session:
        """A session holding ``state`` at ``version``; ``archives`` (if given) stand for
        ``state.archives`` -- a snapshot's referenced archives, read from their events."""
        session = cls.__new__(cls)
        session._id = id_
        session._version = version
        session._created_on = state.created_on
        session._modified_on = state.modified_on
        session._pending_events = []
        session._pending_counters = []
        session._write_key = None
        session.tenant = state.tenant
        session.key = state.key
        session.context = state.context
        session.started_by = state.started_by
        session.set_buffer(state.buffer)
        session.archives = list(state.archives if archives is None else archives)
        refs = state.archive_refs
        session.archive_refs = None if refs is None else list(refs)
        if refs is not None and len(refs) != len(session.archives):
            raise ValueError(f"{len(refs)} archive references but {len(session.archives)} archives")
        session.message_count = state.message_count
        session.commit_count = state.commit_count
        session.last_commit_at = state.last_commit_at
        session.updated_at = state.updated_at
        session.evicted = state.evicted
        session.closed = state.closed
        session.state = dict(state.state)
        session.deleted = state.deleted
        session.incarnation = state.incarnation
        session.task = state.task
        session.watermark = state.watermark
        session.extraction_summary = state.extraction_summary
        session.pending_compaction = state.pending_compaction
        session.erased = state.erased
        session.rebuilt_from = (version, session.state_items)
        return session

    class Snapshot(DomainEvent, CanSnapshotAggregate[UUID]):
        """The state of a session at one version, as a pydantic value.

        Bounded by the live state: the live buffer and counters are embedded,
        the live archives only referenced (``archive_refs``: the events that
        recorded them, which loading reads back; see ``rebuild``). Embedding
        them made every snapshot carry every archive so far, so snapshots grew
        with the square of the commits.
        """

        class_version: ClassVar[int] = 1

        topic: str
        state: SessionState

        @classmethod
        def take(cls, aggregate: Any) -> Session.Snapshot:
            session: Session = aggregate
            return cls(
                originator_id=session.id,
                originator_version=session.version,
                timestamp=session.modified_on,
                topic=get_topic(type(session)),
                state=cls.state_of(session),
            )

        @classmethod
        def without_buffer(cls, session: Session) -> Session.Snapshot:
            """``take`` with an empty buffer, none of its messages built: the frame a check
            that writes the buffer's messages itself puts them in (``verify(deep=True)``)."""
            return cls(
                originator_id=session.id,
                originator_version=session.version,
                timestamp=session.modified_on,
                topic=get_topic(type(session)),
                state=cls.state_of(session, buffer=False),
            )

        @staticmethod
        def state_of(session: Session, *, buffer: bool = True) -> SessionState:
            """The state a snapshot of ``session`` stores (archives referenced if known);
            with an empty buffer if ``buffer`` is False (see ``without_buffer``)."""
            state = session.to_state(buffer=buffer)
            if state.archive_refs is None:
                return state
            return state.model_copy(update={"archives": ()})

        def archive_versions(self) -> list[int]:
            """The versions of the events whose archives ``rebuild`` needs, ascending."""
            return sorted({version for version, _ in self.state.archive_refs or ()})

        def rebuild(self, recorded: Mapping[int, Any]) -> Session:
            """The session this snapshot holds, its archives taken from the events that
            recorded them (``recorded``: version -> event, see ``archive_versions``)."""
            archives = [_recorded_archive(recorded.get(v), v, i) for v, i in self.archive_refs]
            session_class: type[Session] = resolve_topic(self.topic)
            return session_class.from_state(
                self.originator_id, self.originator_version, self.state, archives or None
            )

        @property
        def archive_refs(self) -> tuple[ArchiveRef, ...]:
            return self.state.archive_refs or ()

        def matches(self, session: Session) -> bool:
            """Whether this (stored) snapshot holds the state of ``session`` (same version)."""
            if self.state.archive_refs is None:  # an old snapshot: archives embedded
                return self.state == session.to_state().model_copy(update={"archive_refs": None})
            return self.state == self.state_of(session)

        def mutate(self, _: None) -> Any:
            """The library's way in; a snapshot referencing archives needs ``rebuild``."""
            return self.rebuild({})


def _recorded_archive(event: Any, version: int, index: int) -> ArchiveSummary:
    """The ``index``-th archive recorded by ``event`` (at ``version``)."""
    if isinstance(event, Committed | ArchiveMerged) and index == 0:
        return event.archive
    if isinstance(event, Forked) and 0 <= index < len(event.archives):
        return event.archives[index]
    found = "no event" if event is None else type(event).__name__
    raise ValueError(f"archive {index} of version {version} is referenced, but it is {found}")


def replay(session: Session | None, events: Iterable[Any]) -> Session | None:
    """Apply stored events (a snapshot first, if any) in order; the projector for loads.

    The library's default projector asserts a runtime-checkable protocol on
    every event, which costs more than applying it; these events are ours.
    """
    for event in events:
        session = event.mutate(session)
    return session
