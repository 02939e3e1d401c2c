"""``SessionLedger``: the application service every caller goes through.

It resolves principals to sessions (tenant checks), validates input before
anything is recorded, keeps recently used sessions loaded, and runs the
commit protocol of DESIGN.md: snapshot the live ids, summarise outside the
aggregate, optionally store the archive body, then record one ``Committed``
covering exactly those ids (or a ``CommitFailed`` that changes nothing).
Every write is one transaction; a version conflict with another writer
reloads the session and re-applies the same change.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import IntegrityError

from chatledger import audit, timetravel
from chatledger.boundary import public as _public
from chatledger.boundary import translated_errors as _translated_errors

if TYPE_CHECKING:
    from chatledger.read_models import (
        ArchiveEntry,
        AuditEntry,
        ReadModels,
        ToolUsage,
        WorkingSetEntry,
        WorkingSetOrder,
    )
from chatledger.adapters.database import SQLAlchemyError, create_store_engine, sqlite_file
from chatledger.adapters.eventstore import (
    EventStoreApplication,
    KeyedRow,
    check_chain_key,
    create_tables,
    require_tables,
)
from chatledger.adapters.summarizer import ExtractiveSummarizer
from chatledger.domain.errors import (
    AccessDenied,
    ConcurrencyConflict,
    InvalidInput,
    InvalidSettings,
    LedgerNotFound,
    StoreUnavailable,
    UnknownSession,
)
from chatledger.domain.events import (
    ArchiveMerged,
    Closed,
    Committed,
    Evicted,
    MessageAdded,
    new_id,
)
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.identity import session_id, validate_key
from chatledger.domain.limits import (
    Limits,
    check_aware,
    check_context,
    check_int,
    check_message,
    check_seconds,
    check_summary,
    error_text,
)
from chatledger.domain.ports import ArchiveBody, ArchiveStore, Clock, Summarizer, Summary
from chatledger.domain.quality import entity_retention_ratio
from chatledger.domain.session import Session
from chatledger.domain.timestamps import to_micros
from chatledger.domain.values import (
    ROLES,
    ArchiveSummary,
    ClientContext,
    EvictionReason,
    Message,
    Principal,
    ToolCall,
    estimate_tokens,
)
from chatledger.results import (
    AddedMessage,
    ChainHead,
    CommitResult,
    CommitTask,
    ContextView,
    ImportResult,
    LedgerEvent,
    MergeResult,
    SessionDiff,
    SessionView,
    VerifyReport,
)
from chatledger.settings import LedgerSettings, load_settings

R = TypeVar("R")

_MIN_WRITE_ATTEMPTS = 5
_MESSAGE_FIELDS = frozenset(
    ("role", "content", "name", "tool_call", "message_id", "id", "created_at")
)
_KEPT_TASKS = 10_000  # finished async commit tasks remembered for task()


def utc_now() -> datetime:
    """The default clock."""
    return datetime.now(UTC)


class _SessionLock:
    """A per-session lock (a context manager); weakly held so idle sessions cost nothing."""

    __slots__ = ("__weakref__", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()


class _PendingCommit:
    """What phase 1 of a commit captured: the exact messages to archive."""

    def __init__(
        self,
        sid: UUID,
        tenant: str,
        key: str,
        messages: list[Message],
        attempt_id: str,
        idempotency_key: str | None = None,
    ) -> None:
        self.sid = sid
        self.tenant = tenant
        self.key = key
        self.messages = messages
        self.attempt_id = attempt_id
        self.idempotency_key = idempotency_key


class _AlreadyRecorded(Exception):
    """The write was recorded before with the same idempotency key (its rows attached)."""

    def __init__(self, rows: list[KeyedRow]) -> None:
        super().__init__("already recorded")
        self.rows = rows


_KEY_REUSED = (
    "That idempotency key was already used for a different write in this session; use a "
    "fresh key for each distinct write (and the same key only to retry the same call)."
)


def _idempotency(key: object) -> str | None:
    """A caller's idempotency key, checked (``None``: the write is not keyed)."""
    return None if key is None else validate_key(key, what="idempotency key")


def _same_message(recorded: Message, asked: Message) -> bool:
    """Whether a retry asks for the message that was recorded (ids aside when generated)."""
    return (recorded.role, recorded.content, recorded.name, recorded.tool_call) == (
        asked.role,
        asked.content,
        asked.name,
        asked.tool_call,
    )


class SessionLedger:
    """An event-sourced ledger of agent sessions on SQLite (default) or PostgreSQL."""

    def __init__(
        self,
        url: str | None = None,
        *,
        settings: LedgerSettings | None = None,
        summarizer: Summarizer | None = None,
        archive_store: ArchiveStore | None = None,
        clock: Clock | None = None,
        snapshot_interval: int | None = None,
        **options: Any,
    ) -> None:
        self.settings = load_settings(
            settings, url=url, snapshot_interval=snapshot_interval, **options
        )
        if summarizer is not None and not isinstance(summarizer, Summarizer):
            raise InvalidSettings("summarizer must have summarize() and merge() methods.")
        if archive_store is not None and not isinstance(archive_store, ArchiveStore):
            raise InvalidSettings("archive_store must have put() and get() methods.")
        self.summarizer: Summarizer = summarizer or ExtractiveSummarizer()
        self.archive_store = archive_store
        self._clock: Clock = clock or utc_now
        self.limits = Limits(
            max_content_chars=self.settings.max_content_chars,
            max_meta_bytes=self.settings.max_meta_bytes,
            max_event_bytes=self.settings.max_event_bytes,
        )
        path = sqlite_file(self.settings.url)
        if not self.settings.create_tables and path is not None and not Path(path).is_file():
            raise LedgerNotFound(
                f"No chatledger database at {path} (the file does not exist). Check the URL; "
                "a new ledger is created only with table creation on (create_tables=True)."
            )
        engine = create_store_engine(
            self.settings.url,
            synchronous=self.settings.sqlite_synchronous,
            busy_timeout=self.settings.busy_timeout,
        )
        try:
            if self.settings.create_tables:
                create_tables(engine)
            else:
                require_tables(engine)
            chain_key = self.settings.chain_key
            key_bytes = chain_key.get_secret_value().encode() if chain_key else None
            check_chain_key(engine, key_bytes, record=self.settings.create_tables)
            self._app = EventStoreApplication(
                engine,
                snapshot_interval=self.settings.snapshot_interval,
                chain_key=key_bytes,
                max_event_bytes=self.settings.max_event_bytes,
            )
        except (LedgerNotFound, InvalidSettings, StoreUnavailable):
            engine.dispose()
            raise
        except SQLAlchemyError as error:
            engine.dispose()
            raise StoreUnavailable(
                f"Cannot open the event store at {engine.url!r}: {error}. Check the URL "
                "and that the database is running."
            ) from error
        # Loaded sessions, least recently used first, each with its lock: the
        # strong reference keeps the (weakly held) lock alive while cached.
        # Keyed by UUID.int: hashing an int skips UUID.__hash__ (Python code) on the hot path.
        self._cache: OrderedDict[int, tuple[Session, _SessionLock | None]] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._locks: weakref.WeakValueDictionary[int, _SessionLock] = weakref.WeakValueDictionary()
        self._locks_guard = threading.Lock()
        self._inflight: set[UUID] = set()
        self._inflight_lock = threading.Lock()
        # Async commit tasks by id, oldest first; finished ones beyond
        # _KEPT_TASKS are forgotten so a long-running server does not grow.
        self._tasks: dict[str, CommitTask] = {}
        self._finished: deque[str] = deque()
        self._executor: ThreadPoolExecutor | None = None
        self._read_models: ReadModels | None = None
        self._read_models_lock = threading.Lock()
        self._closed = False

    # ------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Finish running commits, then release the database."""
        if self._closed:
            return
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        if self._read_models is not None:
            self._read_models.close()
        self._app.close()

    def __enter__(self) -> SessionLedger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --------------------------------------------------------------- writes
    @_public
    def add_message(
        self,
        principal: Principal,
        key: str,
        role: str,
        content: str,
        *,
        name: str | None = None,
        tool_call: ToolCall | Mapping[str, Any] | None = None,
        message_id: str | None = None,
        account_id: str | None = None,
        context: ClientContext | None = None,
        idempotency_key: str | None = None,
    ) -> AddedMessage:
        """Record one message (creating the session on first use).

        With ``idempotency_key``, a retry of the same call (e.g. after
        ``WriteOutcomeUnknown``) records nothing twice: it returns the result
        of the write that landed.
        """
        tenant, key, sid = self._target(principal, key, account_id)
        context = self._context(context)
        idempotency_key = _idempotency(idempotency_key)
        now = self._now()
        message = self._make_message(role, content, name, tool_call, message_id, None, now)
        return self._record_messages(
            principal, tenant, key, sid, [message], now, context, idempotency_key
        )[0]

    @_public
    def add_messages(
        self,
        principal: Principal,
        key: str,
        messages: Sequence[Mapping[str, Any] | Message],
        *,
        account_id: str | None = None,
        context: ClientContext | None = None,
        idempotency_key: str | None = None,
    ) -> list[AddedMessage]:
        """Record several messages in one transaction: all of them, or none (a retry with
        the same ``idempotency_key`` returns the recorded write, see ``add_message``)."""
        tenant, key, sid = self._target(principal, key, account_id)
        context = self._context(context)
        idempotency_key = _idempotency(idempotency_key)
        if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
            raise InvalidInput("messages must be a list of message dicts or Message objects.")
        if not messages:
            raise InvalidInput("add_messages needs at least one message.")
        now = self._now()
        built = [self._message_from_spec(spec, now) for spec in messages]
        ids = [m.id for m in built]
        if len(set(ids)) != len(ids):
            raise InvalidInput("Message ids within one call must be distinct.")
        return self._record_messages(
            principal, tenant, key, sid, built, now, context, idempotency_key
        )

    def _record_messages(
        self,
        principal: Principal,
        tenant: str,
        key: str,
        sid: UUID,
        built: list[Message],
        now: datetime,
        context: ClientContext | None,
        idempotency_key: str | None,
    ) -> list[AddedMessage]:
        def apply(session: Session) -> list[int]:
            versions = []
            for message in built:
                session.add_message(message, actor=principal, timestamp=now)
                versions.append(session.version)
            return versions

        def create() -> Session:
            return Session.start(
                tenant=tenant, key=key, actor=principal, timestamp=now, context=context
            )

        try:
            versions, positions, session_after = self._write(
                sid,
                apply,
                create=create,
                idempotency_key=idempotency_key,
                reach=len(built) + 2,  # a Started and a Reactivated may come first
            )
        except _AlreadyRecorded as done:
            return self._messages_recorded(done.rows, built)
        pending = session_after.pending_tokens
        offset = len(positions) - len(built)
        return [
            AddedMessage(
                message_id=message.id,
                version=version,
                pending_tokens=pending,
                position=positions[offset + i],
            )
            for i, (message, version) in enumerate(zip(built, versions, strict=True))
        ]

    def _messages_recorded(self, rows: list[KeyedRow], asked: list[Message]) -> list[AddedMessage]:
        """What a keyed add_message(s) returned the first time, from the write's stored rows."""
        added: list[AddedMessage] = []
        for row in rows:
            event = self._app.mapper.to_domain_event(row.stored)
            if isinstance(event, MessageAdded) and len(added) < len(asked):
                added.append(
                    AddedMessage(
                        message_id=event.message.id,
                        version=row.version,
                        pending_tokens=row.pending_tokens,
                        position=row.position,
                    )
                )
                wanted = asked[len(added) - 1]
                if not _same_message(event.message, wanted):
                    raise InvalidInput(_KEY_REUSED)
        if len(added) != len(asked):
            raise InvalidInput(_KEY_REUSED)
        pending = added[-1].pending_tokens  # the session's, right after the write
        return [a.model_copy(update={"pending_tokens": pending}) for a in added]

    @_public
    def commit(
        self,
        principal: Principal,
        key: str,
        *,
        wait: bool = True,
        account_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> CommitResult:
        """Fold the whole live buffer into a new archive (a retry with the same
        ``idempotency_key`` returns the recorded commit instead of committing again)."""
        return self._commit(
            principal, key, None, wait=wait, account_id=account_id, idempotency_key=idempotency_key
        )

    @_public
    def commit_snapshot(
        self,
        principal: Principal,
        key: str,
        message_ids: Sequence[str],
        *,
        wait: bool = True,
        account_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> CommitResult:
        """Fold exactly ``message_ids`` into a new archive; the rest stays live."""
        if isinstance(message_ids, str) or not isinstance(message_ids, Sequence):
            raise InvalidInput("message_ids must be a list of message id strings.")
        if not message_ids:
            raise InvalidInput("commit_snapshot needs at least one message id.")
        if not all(isinstance(i, str) for i in message_ids):
            raise InvalidInput("message_ids must all be strings.")
        if len(set(message_ids)) != len(message_ids):
            raise InvalidInput("message_ids contains duplicates; name each message once.")
        return self._commit(
            principal,
            key,
            list(message_ids),
            wait=wait,
            account_id=account_id,
            idempotency_key=idempotency_key,
        )

    @_public
    def merge_archives(
        self,
        principal: Principal,
        key: str,
        *,
        threshold: int | None = None,
        max_count: int | None = None,
        account_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> MergeResult:
        """Merge the oldest live archives into one when there are more than ``threshold``."""
        _, key, sid = self._target(principal, key, account_id)
        idempotency_key = _idempotency(idempotency_key)
        if idempotency_key is not None:
            rows = self._app.event_recorder.keyed_rows(sid, idempotency_key, 1)
            if rows:
                return self._merge_recorded(rows)
        threshold = self.settings.merge_threshold if threshold is None else threshold
        max_count = self.settings.merge_max_count if max_count is None else max_count
        check_int(threshold, "threshold", minimum=1)
        check_int(max_count, "max_count", minimum=2)
        with self._session_lock(sid):
            session = self._require(sid, key)
            live = list(session.archives)
        if len(live) < 2:
            return MergeResult(merged=False, reason="too_few_archives")
        if len(live) <= threshold:
            return MergeResult(merged=False, reason="below_threshold")
        count = max(2, min(max_count, len(live) - threshold + 1))
        sources = live[:count]
        source_ids = tuple(a.archive_id for a in sources)
        try:
            summary = check_summary(
                self._summarizer_call(self.summarizer.merge, sources),
                self.limits,
                source="The summarizer's merge",
            )
            now = self._now()
            archive = ArchiveSummary(
                archive_id=new_id(),
                overview=summary.overview,
                abstract=summary.abstract,
                # The covered ids stay with the source archives (ArchiveMerged
                # names them; see ArchiveHistory.message_ids): repeating them
                # here would make the state grow with the whole history.
                message_ids=(),
                tokens=estimate_tokens(summary.overview + summary.abstract),
                created_at=now,
                metadata={
                    **summary.metadata,
                    "merged_from": list(source_ids),
                    "message_count": sum(a.covered_count for a in sources),
                },
            )

            def apply(session: Session) -> None:
                if any(a not in {x.archive_id for x in session.archives} for a in source_ids):
                    raise ConcurrencyConflict(
                        "Another writer merged these archives meanwhile; call merge again."
                    )
                session.merge_archives(archive, source_ids, actor=principal, timestamp=now)

            self._write(sid, apply, idempotency_key=idempotency_key)
        except _AlreadyRecorded as done:
            return self._merge_recorded(done.rows)
        except Exception as error:
            return MergeResult(merged=False, reason="failed", error=error_text(error))
        return MergeResult(
            merged=True, archive_id=archive.archive_id, source_archive_ids=source_ids
        )

    def _merge_recorded(self, rows: list[KeyedRow]) -> MergeResult:
        event = self._app.mapper.to_domain_event(rows[0].stored)
        if not isinstance(event, ArchiveMerged):
            raise InvalidInput(_KEY_REUSED)
        return MergeResult(
            merged=True,
            archive_id=event.archive.archive_id,
            source_archive_ids=tuple(event.source_archive_ids),
        )

    @_public
    def get_or_create(
        self,
        principal: Principal,
        key: str,
        *,
        context: ClientContext | None = None,
        account_id: str | None = None,
    ) -> tuple[SessionView, bool]:
        """The session under ``key``, starting it (with ``context``) if it does not exist.

        Returns the view and whether this call created it. Concurrent callers,
        in this process or others, end up with one session: the loser of a
        creation race sees a version conflict and returns the winner's session.
        """
        tenant, key, sid = self._target(principal, key, account_id)
        context = self._context(context)
        with self._session_lock(sid):
            existing = self._load(sid)
            if existing is not None:
                return self._view(existing), False
        now = self._now()
        created = False

        def apply(session: Session) -> None:
            nonlocal created
            created = session.version == 1 and bool(session.pending_events)

        def create() -> Session:
            return Session.start(
                tenant=tenant, key=key, actor=principal, timestamp=now, context=context
            )

        _, _, session = self._write(sid, apply, create=create)
        return self._view(session), created

    @_public
    def close_session(
        self,
        principal: Principal,
        key: str,
        *,
        account_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> SessionView:
        """Record that the client closed the session (it leaves the working set)."""
        _, key, sid = self._target(principal, key, account_id)
        idempotency_key = _idempotency(idempotency_key)
        now = self._now()

        def apply(session: Session) -> None:
            session.close(actor=principal, timestamp=now)

        try:
            _, _, session = self._write(sid, apply, idempotency_key=idempotency_key)
        except _AlreadyRecorded as done:
            return self._view_recorded(sid, done.rows, Closed)
        self._forget(sid)
        return self._view(session)

    @_public
    def evict(
        self,
        principal: Principal,
        key: str,
        *,
        reason: EvictionReason = "admin",
        idle_seconds: float | None = None,
        account_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> SessionView:
        """Record that the session left the working set; its history stays."""
        if reason not in ("idle", "lru", "admin"):
            raise InvalidInput("reason must be 'idle', 'lru' or 'admin'.")
        if idle_seconds is not None:
            idle_seconds = check_seconds(idle_seconds, "idle_seconds")
        _, key, sid = self._target(principal, key, account_id)
        idempotency_key = _idempotency(idempotency_key)
        now = self._now()

        def apply(session: Session) -> None:
            session.evict(reason, idle_seconds=idle_seconds, actor=principal, timestamp=now)

        try:
            _, _, session = self._write(sid, apply, idempotency_key=idempotency_key)
        except _AlreadyRecorded as done:
            return self._view_recorded(sid, done.rows, Evicted)
        self._forget(sid)  # eviction is about memory: drop the cached copy too
        return self._view(session)

    def _view_recorded(
        self, sid: UUID, rows: list[KeyedRow], kind: type[SessionEvent]
    ) -> SessionView:
        """The view a keyed write returned the first time: the session as of its event."""
        event = self._app.mapper.to_domain_event(rows[0].stored)
        if not isinstance(event, kind):
            raise InvalidInput(_KEY_REUSED)
        return self._view(self._app.load(sid, rows[0].version))

    # ---------------------------------------------------------------- reads
    @_public
    def session(
        self,
        principal: Principal,
        key: str,
        *,
        at_version: int | None = None,
        at_time: datetime | None = None,
        account_id: str | None = None,
    ) -> SessionView:
        """The session now, or as it was at a version or a moment."""
        _, key, sid = self._target(principal, key, account_id)
        return self._view(self._load_as_of(sid, key, at_version, at_time))

    @_public
    def context(
        self,
        principal: Principal,
        key: str,
        token_budget: int = 128_000,
        *,
        at_version: int | None = None,
        at_time: datetime | None = None,
        account_id: str | None = None,
    ) -> ContextView:
        """The prompt context: latest archive summary plus the newest live messages that fit."""
        check_int(token_budget, "token_budget")
        _, key, sid = self._target(principal, key, account_id)
        session = self._load_as_of(sid, key, at_version, at_time)
        remaining = token_budget
        archive = session.archives[-1] if session.archives else None
        overview = abstract = ""
        if archive is not None:
            cost = estimate_tokens(archive.overview + archive.abstract)
            if cost <= remaining:
                overview, abstract = archive.overview, archive.abstract
                remaining -= cost
            else:
                archive = None
        kept: list[Message] = []
        for message in reversed(session.live_messages):
            if message.tokens > remaining:
                break
            kept.append(message)
            remaining -= message.tokens
        kept.reverse()
        return ContextView(
            key=key,
            version=session.version,
            token_budget=token_budget,
            archive_id=archive.archive_id if archive else None,
            overview=overview,
            abstract=abstract,
            messages=tuple(kept),
            tokens=token_budget - remaining,
            dropped_messages=len(session.buffer) - len(kept),
        )

    @_public
    def history(
        self,
        principal: Principal,
        key: str,
        *,
        after_version: int = 0,
        limit: int | None = None,
        account_id: str | None = None,
    ) -> list[LedgerEvent]:
        """The session's recorded events after ``after_version``, oldest first (at most
        ``limit`` of them: page through a long session by passing the last version seen)."""
        check_int(after_version, "after_version")
        if limit is not None:
            check_int(limit, "limit (or None for no limit)", minimum=1)
        _, key, sid = self._target(principal, key, account_id)
        events: list[SessionEvent] = list(
            self._app.events.get(sid, gt=after_version or None, limit=limit)  # type: ignore[arg-type]
        )
        if not events and (after_version == 0 or not self._exists(sid)):
            raise UnknownSession(self._unknown(key))
        return [
            LedgerEvent(
                key=key,
                version=e.originator_version,
                type=type(e).__name__,
                timestamp=e.timestamp,
                actor=e.actor,
                event=e,
            )
            for e in events
        ]

    @_public
    def diff(
        self,
        principal: Principal,
        key: str,
        from_version: int,
        to_version: int,
        *,
        account_id: str | None = None,
    ) -> SessionDiff:
        """What changed between two versions: messages, commits, merges, counters."""
        return timetravel.diff(self, principal, key, from_version, to_version, account_id)

    @_public
    def fork(
        self,
        principal: Principal,
        key: str,
        at_version: int,
        new_key: str,
        *,
        account_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> SessionView:
        """Start ``new_key`` as a copy of ``key`` at ``at_version``; the origin is untouched."""
        return timetravel.fork(
            self, principal, key, at_version, new_key, account_id, _idempotency(idempotency_key)
        )

    @_public
    def verify(
        self,
        principal: Principal,
        key: str | None = None,
        *,
        anchors: Iterable[ChainHead] = (),
        account_id: str | None = None,
    ) -> VerifyReport:
        """Recompute the hash chains (one session, or every session the principal sees).

        ``anchors`` are heads from an earlier report kept outside the database;
        each must still be part of its chain, which catches cut-off endings.
        ``account_id`` names the account of ``key`` (or, without a key, the only
        account to check); naming another account than the principal's is for admins.
        """
        if not isinstance(principal, Principal):
            raise InvalidInput("principal must be a chatledger Principal.")
        return audit.verify(self, principal, key, anchors, account_id)

    def export(self, principal: Principal, key: str | None = None) -> Iterator[str]:
        """Events as self-describing JSON lines (a header line first), with their hashes."""
        if not isinstance(principal, Principal):
            raise InvalidInput("principal must be a chatledger Principal.")
        if key is not None:
            self._target(principal, key, None)
        lines = audit.export(self, principal, key)
        while True:
            with _translated_errors():
                line = next(lines, None)
            if line is None:
                return
            yield line

    @_public
    def import_(
        self,
        lines: Iterable[str],
        *,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> ImportResult:
        """Import an export into this (empty) ledger; a broken file imports nothing.

        ``progress`` is called with (phase, done, total) as the phases ``read``,
        ``verify`` (every event replayed and checked) and ``write`` advance.
        """
        result = audit.import_(self, lines, progress)
        with self._cache_lock:
            self._cache.clear()
        return result

    @_public
    def task(self, task_id: str) -> CommitTask | None:
        """A commit started with ``wait=False``; ``None`` for an unknown id."""
        return self._tasks.get(task_id)

    # ---------------------------------------------------------- read models
    @property
    def read_models(self) -> ReadModels:
        """The persisted read models (working set, archives, audit, usage), opened on first use."""
        with self._read_models_lock:
            if self._read_models is None:
                if self._closed:
                    raise StoreUnavailable("This ledger is closed; open a new SessionLedger.")
                from chatledger.read_models import ReadModels

                self._read_models = ReadModels(self)
            return self._read_models

    def working_set(
        self,
        principal: Principal,
        *,
        order: WorkingSetOrder = "last_activity",
        limit: int = 100,
        offset: int = 0,
        include_evicted: bool = False,
        account_id: str | None = None,
    ) -> list[WorkingSetEntry]:
        """Live sessions, most recently active first (members: their account; admins: all)."""
        return self.read_models.working_set(
            principal,
            order=order,
            limit=limit,
            offset=offset,
            include_evicted=include_evicted,
            account_id=account_id,
        )

    def archives(
        self,
        principal: Principal,
        key: str,
        *,
        include_merged: bool = False,
        account_id: str | None = None,
    ) -> list[ArchiveEntry]:
        """Every archive of the session with its lineage (merged ones with ``include_merged``)."""
        return self.read_models.archives(
            principal, key, include_merged=include_merged, account_id=account_id
        )

    def audit(
        self,
        principal: Principal,
        *,
        session: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        types: Iterable[str] | None = None,
        limit: int = 100,
        offset: int = 0,
        account_id: str | None = None,
    ) -> list[AuditEntry]:
        """One page of the audit log (one row per event, in log order), filtered."""
        return self.read_models.audit(
            principal,
            session=session,
            since=since,
            until=until,
            types=types,
            limit=limit,
            offset=offset,
            account_id=account_id,
        )

    def usage(
        self, principal: Principal, key: str | None = None, *, account_id: str | None = None
    ) -> list[ToolUsage]:
        """Tool-call counts and tokens per session and tool."""
        return self.read_models.usage(principal, key, account_id=account_id)

    def evict_idle(
        self,
        principal: Principal,
        max_idle_seconds: float,
        now: datetime | None = None,
        *,
        skip_pending: bool = True,
        account_id: str | None = None,
    ) -> list[str]:
        """Record ``Evicted(reason="idle")`` for sessions idle longer than the limit."""
        return self.read_models.evict_idle(
            principal, max_idle_seconds, now, skip_pending=skip_pending, account_id=account_id
        )

    def wait_for_projections(self, position: int, timeout: float = 5.0) -> None:
        """Return once the read models have applied ``position`` (``AddedMessage.position``)."""
        self.read_models.wait_for_projections(position, timeout)

    # ------------------------------------------------------------ internals
    def _now(self) -> datetime:
        moment = self._clock()
        if not isinstance(moment, datetime) or moment.utcoffset() is None:
            raise InvalidSettings("The clock must return timezone-aware datetimes.")
        return moment

    def _target(
        self, principal: Principal, key: str, account_id: str | None
    ) -> tuple[str, str, UUID]:
        if not isinstance(principal, Principal):
            raise InvalidInput("principal must be a chatledger Principal.")
        if self._closed:
            raise StoreUnavailable("This ledger is closed; open a new SessionLedger.")
        tenant = principal.account_id if account_id is None else account_id
        try:
            sid = session_id(tenant, key)  # validates both (results are cached)
        except TypeError:  # unhashable: not a str; say so in chatledger's words
            validate_key(tenant, what="account id")
            validate_key(key)
            raise
        if tenant != principal.account_id and not principal.is_admin:
            raise AccessDenied(
                f"Principal of account {principal.account_id!r} may not touch sessions of "
                f"account {tenant!r}; only admins may name another account."
            )
        return tenant, key, sid

    def _message_from_spec(self, spec: Mapping[str, Any] | Message, now: datetime) -> Message:
        if isinstance(spec, Message):
            fields: dict[str, Any] = spec.model_dump()
            fields["message_id"] = fields.pop("id")
        elif isinstance(spec, Mapping):
            fields = dict(spec)
        else:
            raise InvalidInput("Each message must be a dict or a Message.")
        unknown = fields.keys() - _MESSAGE_FIELDS
        if unknown:
            raise InvalidInput(f"Unknown message fields {sorted(unknown)}.")
        return self._make_message(
            fields.get("role"),
            fields.get("content"),
            fields.get("name"),
            fields.get("tool_call"),
            fields.get("message_id") or fields.get("id"),
            fields.get("created_at"),
            now,
        )

    def _make_message(
        self,
        role: Any,
        content: Any,
        name: Any,
        tool_call: Any,
        message_id: Any,
        created_at: Any,
        now: datetime,
    ) -> Message:
        if role not in ROLES:
            raise InvalidInput(f"Unknown role {role!r}; use one of {', '.join(ROLES)}.")
        if not isinstance(content, str):
            raise InvalidInput(f"Message content must be a str, not {type(content).__name__}.")
        if len(content) > self.limits.max_content_chars:  # before building a huge message
            raise InvalidInput(
                f"Message content has {len(content)} characters; the limit is "
                f"{self.limits.max_content_chars} (setting max_content_chars)."
            )
        if not message_id:
            message_id = new_id()
        else:
            validate_key(message_id, what="message id")
        if tool_call is not None and not isinstance(tool_call, ToolCall):
            tool_call = ToolCall.model_validate(tool_call)
        message = Message(
            id=message_id,
            role=role,
            content=content,
            created_at=created_at or now,
            name=name,
            tool_call=tool_call,
        )
        return check_message(message, self.limits)

    def _context(self, context: ClientContext | Mapping[str, Any] | None) -> ClientContext | None:
        """The client context to record with a new session, checked against the limits."""
        if context is None:
            return None
        if not isinstance(context, ClientContext):
            if not isinstance(context, Mapping):
                raise InvalidInput("context must be a ClientContext (or a dict of its fields).")
            context = ClientContext.model_validate(context)
        return check_context(context, self.limits)

    def _session_lock(self, sid: UUID) -> _SessionLock:
        """The lock serialising this process's writes (and loads) of one session."""
        with self._locks_guard:
            holder = self._locks.get(sid.int)
            if holder is None:
                holder = _SessionLock()
                self._locks[sid.int] = holder
        return holder

    def _cached(self, sid: UUID) -> Session | None:
        with self._cache_lock:
            entry = self._cache.get(sid.int)
            if entry is None:
                return None
            self._cache.move_to_end(sid.int)
            return entry[0]

    def _remember(self, sid: UUID, session: Session) -> None:
        if self.settings.cache_size == 0:
            return
        with self._cache_lock:
            entry = self._cache.get(sid.int)
            if entry is not None and entry[0] is session:
                return  # the cached object itself was changed (and _cached refreshed it)
            self._cache[sid.int] = (session, self._locks.get(sid.int))
            self._cache.move_to_end(sid.int)
            while len(self._cache) > self.settings.cache_size:
                self._cache.popitem(last=False)

    def _forget(self, sid: UUID) -> None:
        with self._cache_lock:
            self._cache.pop(sid.int, None)

    def _load(self, sid: UUID, *, fresh: bool = True) -> Session | None:
        """The session (caller holds its lock), from the cache or the store.

        With ``fresh`` a cached session is fast-forwarded past events other
        processes appended. Writes pass ``fresh=False``: a stale copy cannot
        be recorded anyway (the append conflicts on its version, and the write
        is re-applied to a reloaded session).
        """
        session = self._cached(sid)
        if session is None:
            try:
                session = self._app.load(sid)
            except AggregateNotFoundError:
                return None
            self._remember(sid, session)
            return session
        if fresh:
            for event in self._app.events.get(sid, gt=session.version):
                event.mutate(session)  # type: ignore[attr-defined]
        return session

    def _require(self, sid: UUID, key: str) -> Session:
        session = self._load(sid)
        if session is None:
            raise UnknownSession(self._unknown(key))
        return session

    def _unknown(self, key: str) -> str:
        return f"No session {key!r} in this account; add a message to start it."

    def _load_as_of(
        self, sid: UUID, key: str, at_version: int | None, at_time: datetime | None
    ) -> Session:
        if at_version is not None and at_time is not None:
            raise InvalidInput("Pass at_version or at_time, not both.")
        if at_time is not None:
            check_aware(at_time, "at_time")
            at_version = self._app.event_recorder.version_at(sid, to_micros(at_time))
            if at_version is None:
                raise UnknownSession(f"Session {key!r} did not exist yet at {at_time}.")
        if at_version is not None:
            check_int(at_version, "at_version", minimum=1)
            try:
                session = self._app.load(sid, at_version)
            except AggregateNotFoundError:
                raise UnknownSession(self._unknown(key)) from None
            if session.version < at_version:
                raise InvalidInput(
                    f"Session {key!r} has only {session.version} versions; "
                    f"at_version {at_version} does not exist yet."
                )
            return session
        with self._session_lock(sid):
            session = self._require(sid, key)
            return Session.from_state(session.id, session.version, session.to_state())

    def _exists(self, sid: UUID) -> bool:
        return bool(list(self._app.events.get(sid, limit=1)))

    def _write(
        self,
        sid: UUID,
        apply: Callable[[Session], R],
        *,
        create: Callable[[], Session] | None = None,
        idempotency_key: str | None = None,
        reach: int = 1,
    ) -> tuple[R, list[int], Session]:
        """Apply a change and record its events atomically, re-applying on conflicts.

        A version conflict means another writer (thread of another ledger, or
        process) appended first: reload and re-apply, after a short random
        back-off that grows with each conflict, until ``busy_timeout`` runs out.
        With ``idempotency_key``, each attempt first looks for a write recorded
        with that key (a retry after an unknown outcome, or a racing duplicate,
        whose insert collides on the key's unique index) and raises
        ``_AlreadyRecorded`` with its first ``reach`` rows instead of writing.
        """
        deadline = time.monotonic() + self.settings.busy_timeout
        attempts = 0
        with self._session_lock(sid):
            while attempts < _MIN_WRITE_ATTEMPTS or time.monotonic() < deadline:
                attempts += 1
                if idempotency_key is not None:
                    recorded = self._app.event_recorder.keyed_rows(sid, idempotency_key, reach)
                    if recorded:
                        raise _AlreadyRecorded(recorded)
                session = self._load(sid, fresh=False)
                if session is None:
                    if create is None:
                        raise UnknownSession(
                            "That session does not exist; add a message to start it."
                        )
                    session = create()
                try:
                    if idempotency_key is not None:
                        session.key_write(idempotency_key)
                    outcome = apply(session)
                    positions = self._app.record(session)
                except IntegrityError:
                    self._forget(sid)  # another writer got there first: reload, re-apply
                    time.sleep(random.uniform(0, min(0.05, 0.0005 * 2**attempts)))
                    continue
                except BaseException:
                    self._forget(sid)  # the object may hold unrecorded changes
                    raise
                self._remember(sid, session)
                return outcome, positions, session
        raise ConcurrencyConflict(
            f"Gave up after {attempts} version conflicts with other writers in "
            f"{self.settings.busy_timeout:g}s (setting busy_timeout); retry later."
        )

    # --------------------------------------------------------- commit protocol
    def _commit(
        self,
        principal: Principal,
        key: str,
        message_ids: list[str] | None,
        *,
        wait: bool,
        account_id: str | None,
        idempotency_key: str | None,
    ) -> CommitResult:
        tenant, key, sid = self._target(principal, key, account_id)
        idempotency_key = _idempotency(idempotency_key)
        if idempotency_key is not None:  # recorded already: never summarise again
            rows = self._app.event_recorder.keyed_rows(sid, idempotency_key, 1)
            if rows:
                return self._commit_recorded(rows)
        with self._session_lock(sid):
            session = self._require(sid, key)
            if message_ids is not None:
                missing = session.missing_ids(message_ids)
                if missing:
                    raise InvalidInput(
                        f"Messages {sorted(missing)} are not in the live buffer of {key!r}; "
                        "pass ids of uncommitted messages. Nothing was recorded."
                    )
            with self._inflight_lock:
                if sid in self._inflight:
                    return CommitResult(
                        status="skipped", archived=False, reason="commit_in_progress"
                    )
                if not session.buffer:
                    return CommitResult(status="skipped", archived=False, reason="empty_buffer")
                self._inflight.add(sid)
            chosen = set(message_ids) if message_ids is not None else None
            messages = [m for m in session.buffer.values() if chosen is None or m.id in chosen]
        pending = _PendingCommit(
            sid, tenant, key, messages, attempt_id=new_id(), idempotency_key=idempotency_key
        )
        if wait:
            return self._finish_commit(principal, pending)
        task_id = new_id()
        self._tasks[task_id] = CommitTask(task_id=task_id, key=key, status="processing")
        try:
            self._executor_for_commits().submit(self._run_task, task_id, principal, pending)
        except RuntimeError as error:  # executor shut down
            with self._inflight_lock:
                self._inflight.discard(sid)
            del self._tasks[task_id]
            raise StoreUnavailable("This ledger is closing; commit not started.") from error
        return CommitResult(status="processing", task_id=task_id)

    def _commit_recorded(self, rows: list[KeyedRow]) -> CommitResult:
        """What a keyed commit returned the first time, from its recorded ``Committed``."""
        event = self._app.mapper.to_domain_event(rows[0].stored)
        if not isinstance(event, Committed):
            raise InvalidInput(_KEY_REUSED)
        return CommitResult(
            status="completed",
            archived=True,
            archive_id=event.archive.archive_id,
            message_ids=event.archive.message_ids,
        )

    def _executor_for_commits(self) -> ThreadPoolExecutor:
        with self._inflight_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self.settings.commit_workers, thread_name_prefix="chatledger-commit"
                )
            return self._executor

    def _run_task(self, task_id: str, principal: Principal, pending: _PendingCommit) -> None:
        result = self._finish_commit(principal, pending)
        result = result.model_copy(update={"task_id": task_id})
        status = "completed" if result.status == "completed" else "failed"
        with self._inflight_lock:
            self._tasks[task_id] = CommitTask(
                task_id=task_id, key=pending.key, status=status, result=result
            )
            self._finished.append(task_id)
            if len(self._finished) > _KEPT_TASKS:
                self._tasks.pop(self._finished.popleft(), None)

    def _finish_commit(self, principal: Principal, pending: _PendingCommit) -> CommitResult:
        try:
            try:
                archive = self._summarise(pending)
                self._record_commit(principal, pending, archive)
            except _AlreadyRecorded as done:  # a racing retry with the same key landed first
                return self._commit_recorded(done.rows)
            except Exception as error:
                text = error_text(error)
                self._record_failure(principal, pending, text)
                return CommitResult(
                    status="failed",
                    archived=False,
                    reason="commit_failed",
                    error=text,
                    message_ids=tuple(m.id for m in pending.messages),
                )
            return CommitResult(
                status="completed",
                archived=True,
                archive_id=archive.archive_id,
                message_ids=archive.message_ids,
            )
        finally:
            with self._inflight_lock:
                self._inflight.discard(pending.sid)

    def _summarise(self, pending: _PendingCommit) -> ArchiveSummary:
        summary = check_summary(
            self._summarizer_call(self.summarizer.summarize, tuple(pending.messages)),
            self.limits,
            source="The summarizer",
        )
        metadata = dict(summary.metadata)
        metadata["source_tokens"] = sum(m.tokens for m in pending.messages)
        if self.settings.entity_retention:
            metadata["entity_retention_ratio"] = entity_retention_ratio(
                (m.content for m in pending.messages), summary.overview
            )
        archive = ArchiveSummary(
            archive_id=new_id(),
            overview=summary.overview,
            abstract=summary.abstract,
            message_ids=tuple(m.id for m in pending.messages),
            tokens=estimate_tokens(summary.overview + summary.abstract),
            created_at=self._now(),
            metadata=metadata,
        )
        if self.archive_store is not None:
            self.archive_store.put(
                ArchiveBody(
                    archive_id=archive.archive_id,
                    session_id=pending.sid.hex,
                    tenant=pending.tenant,
                    key=pending.key,
                    messages=tuple(pending.messages),
                    overview=archive.overview,
                    abstract=archive.abstract,
                )
            )
        elif self.settings.require_archive_store:
            raise StoreUnavailable("archive store unavailable")
        return archive

    def _summarizer_call(self, method: Callable[[Any], Summary], argument: Any) -> Summary:
        """``method(argument)`` in a thread of its own, waited for at most
        ``summarizer_timeout`` seconds: a summarizer that hangs fails the commit
        instead of hanging it (and ``close()``) forever. Python cannot stop a
        thread, so a hung call is abandoned (a daemon thread), not killed."""
        outcome: list[Any] = []

        def run() -> None:
            try:
                outcome.append((True, method(argument)))
            except BaseException as error:
                outcome.append((False, error))

        worker = threading.Thread(target=run, name="chatledger-summarizer", daemon=True)
        worker.start()
        worker.join(self.settings.summarizer_timeout)
        if not outcome:
            raise TimeoutError(
                f"The summarizer did not answer within {self.settings.summarizer_timeout:g}s "
                "(setting summarizer_timeout)."
            )
        ok, value = outcome[0]
        if not ok:
            raise value
        result: Summary = value
        return result

    def _record_commit(
        self, principal: Principal, pending: _PendingCommit, archive: ArchiveSummary
    ) -> None:
        now = self._now()

        def apply(session: Session) -> None:
            # Re-applied after a version conflict: the covered set never changes;
            # if another writer already archived some of it, this commit must fail.
            if session.missing_ids(archive.message_ids):
                raise ConcurrencyConflict(
                    "Some of these messages were committed by another writer meanwhile."
                )
            session.commit(archive, actor=principal, timestamp=now)

        self._write(pending.sid, apply, idempotency_key=pending.idempotency_key)

    def _record_failure(self, principal: Principal, pending: _PendingCommit, text: str) -> None:
        def apply(session: Session) -> None:
            session.record_commit_failure(
                attempt_id=pending.attempt_id,
                error=text,
                message_count=len(pending.messages),
                actor=principal,
                timestamp=self._now(),
            )

        # Best effort: the audit note of a failure may be lost (e.g. the store is
        # down), but the failure itself is reported to the caller either way.
        with contextlib.suppress(Exception):
            self._write(pending.sid, apply)

    def _view(self, session: Session) -> SessionView:
        return SessionView(
            session_id=session.id,
            tenant=session.tenant,
            key=session.key,
            version=session.version,
            context=session.context,
            created_at=session.created_on,
            updated_at=session.updated_at,
            message_count=session.message_count,
            commit_count=session.commit_count,
            last_commit_at=session.last_commit_at,
            archive_count=len(session.archives),
            evicted=session.evicted,
            status=session.status,
            buffer=tuple(session.buffer.values()),
            archives=tuple(session.archives),
            pending_tokens=session.pending_tokens,
            turn_count=session.turn_count,
            should_compress=session.should_compress(self.settings.compress_threshold),
        )
