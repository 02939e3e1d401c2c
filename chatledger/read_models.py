"""``ReadModels``: the persisted working set, archive history and usage; the audit log.

Built from a ``SessionLedger`` (its event store and mapper) and kept up to
date by a projector (``chatledger.adapters.projector``) that applies every
event exactly once. Read models live in the ledger's database by default or
in another one (``url=`` / setting ``projections_url``). They are eventually
consistent: call ``catch_up()``, ``start()`` a follower thread, or run
``python -m chatledger.projector --follow`` in another process; use
``wait_for_projections(position)`` to read your own writes. The audit log is
read straight from the store (every event row carries its audit facts), so
it is never behind. Queries apply the ledger's tenant rule (members see
their account, admins any) and return frozen pydantic rows. Also here:
``evict_idle``, which records ``Evicted`` events for sessions idle longer
than a limit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Engine

from chatledger.adapters.database import create_store_engine
from chatledger.adapters.eventstore import query_audit
from chatledger.adapters.projector import EventLog, Progress, Projector, store_errors
from chatledger.adapters.read_models import (
    READ_MODEL_NAMES,
    READ_MODELS,
    query_archives,
    query_idle,
    query_usage,
    query_working_set,
)
from chatledger.adapters.timeline import (
    query_forked_sessions,
    query_head_version,
    query_timeline,
    query_versions,
)
from chatledger.boundary import public as _public
from chatledger.domain.errors import (
    AccessDenied,
    ChatLedgerError,
    ConcurrencyConflict,
    InvalidInput,
    StoreUnavailable,
    UnknownSession,
)
from chatledger.domain.events import Forked
from chatledger.domain.identity import session_id, validate_key
from chatledger.domain.limits import check_aware, check_int, check_seconds
from chatledger.domain.session import SessionStatus
from chatledger.domain.timestamps import from_micros, to_micros
from chatledger.domain.values import Principal
from chatledger.projections.facts import EVENT_NAMES
from chatledger.settings import MAX_WAIT_SECONDS

if TYPE_CHECKING:
    from chatledger.ledger import SessionLedger


WorkingSetOrder = Literal["last_activity", "created", "key", "pending_tokens"]
_ORDERS = ("last_activity", "created", "key", "pending_tokens")
_STATUSES = ("live", "evicted", "closed")
MAX_SEARCH = 256
DEFAULT_POLL_INTERVAL = 0.05
MAX_PAGE = 10_000


class ProjectionTimeout(StoreUnavailable):
    """The read models did not reach the requested position in time."""


# ------------------------------------------------------------------ results
class Row(BaseModel):
    model_config = ConfigDict(frozen=True)


class WorkingSetEntry(Row):
    """One session of the working set: who started it, its counters, when it was last active."""

    session_id: UUID
    account_id: str
    user_id: str
    agent_id: str
    session_key: str
    created_at: datetime
    last_activity_at: datetime
    message_count: int
    pending_tokens: int
    turn_count: int
    commit_count: int
    archive_count: int
    last_commit_at: datetime | None
    status: SessionStatus
    version: int


class ArchiveEntry(Row):
    """One archive of a session, live or merged into another, with its lineage."""

    session_id: UUID
    account_id: str
    session_key: str
    archive_id: str
    overview: str
    abstract: str
    message_ids: tuple[str, ...]
    tokens: int
    created_at: datetime
    position: int
    version: int
    merged_into: str | None
    merged_from: tuple[str, ...]
    live: bool


class AuditEntry(Row):
    """One recorded event: where in the log, which session and version, who, when, what."""

    position: int
    session_id: UUID
    account_id: str
    session_key: str
    version: int
    event_type: str
    actor: Principal
    timestamp: datetime
    summary: str


class TimelineEntry(AuditEntry):
    """One event of a session, with the session's counters and status right after it."""

    message_count: int
    pending_tokens: int
    turn_count: int
    commit_count: int
    archive_count: int  # live archives
    last_commit_at: datetime | None
    status: SessionStatus
    tool_name: str | None  # the tool call a message reports, if any
    tool_status: str | None
    prompt_tokens: int
    completion_tokens: int


class ForkEntry(Row):
    """A session started as a fork of another: its key, and the origin's version it copies."""

    session_id: UUID
    account_id: str
    session_key: str
    origin_version: int
    created_at: datetime
    actor: Principal


class ToolUsage(Row):
    """Calls of one tool in one session, their outcomes and tokens."""

    session_id: UUID
    account_id: str
    session_key: str
    tool_name: str
    call_count: int
    success_count: int
    fail_count: int
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class SkippedEvent(Row):
    """An event a read model could not apply and skipped, so the log could go on."""

    model: str
    position: int
    error: str
    skipped_at: datetime


def _page(limit: object, offset: object) -> tuple[int, int]:
    return check_int(limit, "limit", minimum=1, maximum=MAX_PAGE), check_int(offset, "offset")


def _times(row: dict[str, Any], **columns: str) -> dict[str, Any]:
    """``row`` with ``*_us`` columns turned into datetimes under new names."""
    out = dict(row)
    for name, column in columns.items():
        value = out.pop(column)
        out[name] = None if value is None else from_micros(value)
    return out


class ReadModels:
    """Persisted, rebuildable read models of one ledger (see the module docstring)."""

    def __init__(
        self,
        ledger: SessionLedger,
        *,
        url: str | None = None,
        batch_size: int = 5000,
        poll_interval: float | None = None,
    ) -> None:
        self._ledger = ledger
        settings = ledger.settings
        url = url if url is not None else getattr(settings, "projections_url", None)
        poll = poll_interval or getattr(settings, "projections_poll_interval", None)
        self.poll_interval: float = check_seconds(
            poll or DEFAULT_POLL_INTERVAL, "poll_interval", maximum=MAX_WAIT_SECONDS
        )
        if self.poll_interval <= 0:
            raise InvalidInput("poll_interval must be > 0 seconds.")
        check_int(batch_size, "batch_size", minimum=1, maximum=1_000_000)
        # How long catch_up() waits for a transaction still open before events
        # already committed (PostgreSQL; see catch_up): as long as for a lock.
        self._settle = float(settings.busy_timeout)
        store = ledger._app.event_recorder.engine
        self._own_engine: Engine | None = None
        engine = store
        if url is not None and url != str(settings.url):
            engine = self._own_engine = create_store_engine(
                url, synchronous=settings.sqlite_synchronous, busy_timeout=settings.busy_timeout
            )
        self._projector = Projector(
            EventLog(store, ledger._app.mapper),
            engine,
            [model() for model in READ_MODELS],
            batch_size=batch_size,
        )
        self._thread: threading.Thread | None = None
        self._closed = False
        try:
            self.reset_on_start: tuple[str, ...] = tuple(self._projector.prepare())
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Stop the follower thread (if any) and release a separate read-model database."""
        if self._closed:
            return
        self._closed = True
        self.stop()
        if self._own_engine is not None:
            self._own_engine.dispose()

    def __enter__(self) -> ReadModels:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def names(self) -> tuple[str, ...]:
        """The read models, in the order batches update them."""
        return READ_MODEL_NAMES

    @property
    def engine(self) -> Engine:
        """The database holding the read models (the ledger's, unless a URL was given)."""
        return self._projector.engine

    # ----------------------------------------------------------- processing
    @_public
    def catch_up(self, *, progress: Progress | None = None) -> int:
        """Apply every event recorded so far to every read model; returns how many were read.

        On PostgreSQL an event committed while an older writer of the ledger
        is still open can be applied only once that writer ends, so that no
        event is ever skipped; this waits for such writers up to the ledger's
        ``busy_timeout``, then returns with what could be applied.
        """
        return self._projector.catch_up(progress=progress, settle=self._settle)

    @_public
    def rebuild(self, name: str | None = None, *, progress: Progress | None = None) -> int:
        """Drop one read model (or all, ``name=None``) and replay the whole log into it."""
        names = list(READ_MODEL_NAMES) if name is None else [self.check_name(name)]
        return self._projector.rebuild(names, progress=progress, settle=self._settle)

    def check_name(self, name: str) -> str:
        """``name`` if it names a read model, else ``InvalidInput`` saying which do."""
        if name in READ_MODEL_NAMES:
            return name
        hint = ""
        if name == "audit":
            hint = (
                " The audit log is read straight from the event store (every event row "
                "carries its audit facts), so it is never behind and needs no rebuild."
            )
        raise InvalidInput(f"Unknown read model {name!r}; choose from {READ_MODEL_NAMES}.{hint}")

    @_public
    def positions(self) -> dict[str, int]:
        """The position of the last event each read model has applied.

        Read models apply events in log order. On SQLite that is position
        order; on PostgreSQL it is commit order, so an event with a smaller
        position may still follow: ask ``wait_for_projections`` whether a
        given event was applied, rather than comparing positions.
        """
        return self._projector.positions()

    @_public
    def head(self) -> int:
        """The position of the newest event in log order that the read models can apply.

        Once caught up, every read model's position equals it. (On PostgreSQL
        events committed after a transaction that is still open are not
        counted yet; see ``catch_up``.)
        """
        return self._projector.log.head()

    def start(self) -> None:
        """Follow the log in a daemon thread until ``stop()``/``close()`` (idempotent)."""
        if self._closed:
            raise StoreUnavailable("These read models are closed; make new ones.")
        if self.running:
            return
        self._thread = threading.Thread(
            target=self._projector.run,
            kwargs={"max_interval": self.poll_interval},
            name="chatledger-projector",
            daemon=True,
        )
        self._thread.start()

    def run(self) -> None:
        """Follow the log in this thread until ``stop()`` is called from another one."""
        self._projector.run(max_interval=self.poll_interval)

    def stop(self) -> None:
        """Stop following (the batch in progress completes first)."""
        self._projector.stop()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    @property
    def running(self) -> bool:
        """Whether a follower thread of this object is running."""
        return self._thread is not None and self._thread.is_alive()

    @_public
    def skipped(self) -> list[SkippedEvent]:
        """Events a read model skipped because it could not apply them (oldest first).

        Normally empty. An entry means one event could not be applied to that
        model (e.g. a value written by an older version that its SQL cannot
        hold); the model went on without it, so one event never stops the read
        models of every tenant. See docs/projections.md for what to do.
        """
        return [
            SkippedEvent(
                model=row["name"],
                position=row["position"],
                error=row["error"],
                skipped_at=from_micros(row["skipped_at_us"]),
            )
            for row in self._projector.skipped()
        ]

    @property
    def last_error(self) -> ChatLedgerError | None:
        """The error of the follower's last attempt, if it failed (it keeps retrying)."""
        return self._projector.last_error

    @_public
    def wait_for_projections(self, position: int, timeout: float = 5.0) -> None:
        """Return once every read model has applied the event at ``position``.

        ``position`` is ``AddedMessage.position`` (or the position of any
        recorded event). With a follower thread running this wakes it and
        waits; otherwise it catches up in the calling thread. Raises
        ``ProjectionTimeout`` after ``timeout`` (for a position beyond the log,
        say).
        """
        check_int(position, "position (AddedMessage.position)")
        timeout = check_seconds(timeout, "timeout", maximum=MAX_WAIT_SECONDS)
        deadline = time.monotonic() + timeout
        if self.running:
            self._projector.wake()
            if self._projector.wait(position, timeout):
                return
        else:
            while True:
                self._projector.catch_up()
                if self._projector.applied(position):
                    return
                if time.monotonic() >= deadline:
                    break
                time.sleep(min(self.poll_interval, max(0.0, deadline - time.monotonic())))
        raise ProjectionTimeout(
            f"The read models did not reach position {position} within {timeout}s "
            f"(they are at {self._projector.positions()}); is the projector running? "
            "Start one (ReadModels.start() or `chatledger project --follow`) or wait longer."
        )

    # -------------------------------------------------------------- queries
    def _account(self, principal: Principal, account_id: str | None) -> str | None:
        """The account a query is limited to (``None``: all, for admins only)."""
        if not isinstance(principal, Principal):
            raise InvalidInput("principal must be a chatledger Principal.")
        if account_id is not None:
            validate_key(account_id, what="account id")
            if account_id != principal.account_id and not principal.is_admin:
                raise AccessDenied(
                    f"Principal of account {principal.account_id!r} may not read account "
                    f"{account_id!r}; only admins may name another account."
                )
            return account_id
        return None if principal.is_admin else principal.account_id

    def _session(self, principal: Principal, key: str, account_id: str | None) -> UUID:
        tenant = self._account(principal, account_id) or principal.account_id
        return session_id(tenant, validate_key(key))

    @_public
    def working_set(
        self,
        principal: Principal,
        *,
        order: WorkingSetOrder = "last_activity",
        limit: int = 100,
        offset: int = 0,
        include_evicted: bool = False,
        status: SessionStatus | None = None,
        search: str | None = None,
        account_id: str | None = None,
    ) -> list[WorkingSetEntry]:
        """Live sessions (also evicted and closed ones with ``include_evicted``), newest first.

        ``order="pending_tokens"`` puts the sessions with most uncommitted tokens
        first; ``status`` keeps only sessions of that status (``live``,
        ``evicted`` or ``closed``; it overrides ``include_evicted``); ``search``
        keeps sessions whose key contains the text, ignoring case.
        """
        if order not in _ORDERS:
            raise InvalidInput(f"order must be one of {', '.join(map(repr, _ORDERS))}.")
        if status is not None and status not in _STATUSES:
            raise InvalidInput(f"status must be None or one of {', '.join(map(repr, _STATUSES))}.")
        if search is not None and (not isinstance(search, str) or len(search) > MAX_SEARCH):
            raise InvalidInput(f"search must be None or a str of at most {MAX_SEARCH} characters.")
        limit, offset = _page(limit, offset)
        account = self._account(principal, account_id)
        with store_errors("read the working set"), self.engine.connect() as connection:
            rows = query_working_set(
                connection,
                account_id=account,
                include_evicted=bool(include_evicted),
                order=order,
                limit=limit,
                offset=offset,
                status=status,
                search=search or None,
            )
        return [WorkingSetEntry.model_validate(_ws_fields(row)) for row in rows]

    @_public
    def archives(
        self,
        principal: Principal,
        key: str,
        *,
        include_merged: bool = False,
        account_id: str | None = None,
    ) -> list[ArchiveEntry]:
        """The session's archives, oldest first; merged ones too with ``include_merged``."""
        sid = self._session(principal, key, account_id)
        with store_errors("read the archive history"), self.engine.connect() as connection:
            rows = query_archives(connection, session_id=sid, include_merged=bool(include_merged))
        return [ArchiveEntry.model_validate(_times(r, created_at="created_at_us")) for r in rows]

    @_public
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
        """Recorded events in log order, one page; ``since`` inclusive, ``until`` exclusive.

        Read from the store itself, so it includes every event recorded so far
        (no projection to wait for).
        """
        limit, offset = _page(limit, offset)
        account = self._account(principal, account_id)
        sid = None if session is None else self._session(principal, session, account_id)
        type_list: list[str] | None = None
        if types is not None:
            if isinstance(types, str):
                types = [types]
            type_list = list(types)
            unknown = sorted(set(type_list) - EVENT_NAMES)
            if unknown:
                raise InvalidInput(f"Unknown event types {unknown}; use {sorted(EVENT_NAMES)}.")
        since_us = None if since is None else to_micros(check_aware(since, "since"))
        until_us = None if until is None else to_micros(check_aware(until, "until"))
        store = self._projector.log.engine  # the audit log is the store's own rows
        with store_errors("read the audit log"), store.connect() as connection:
            rows = query_audit(
                connection,
                account_id=account,
                session_id=sid,
                since_us=since_us,
                until_us=until_us,
                types=type_list,
                limit=limit,
                offset=offset,
            )
        return [_audit_entry(row) for row in rows]

    @_public
    def timeline(
        self,
        principal: Principal,
        key: str,
        *,
        after_version: int = 0,
        before_version: int | None = None,
        limit: int = 100,
        newest: bool = False,
        account_id: str | None = None,
    ) -> list[TimelineEntry]:
        """One page of a session's events, each with the session's counters after it.

        Oldest first: the first ``limit`` events after ``after_version``, or with
        ``newest`` the last ``limit`` before ``before_version`` (default: the
        newest events), so a long session is paged from either end. Read from
        the store's stored facts (never behind, nothing decoded) through the
        stream index: a page costs the same in a session of 100 or 100,000 events.
        Raises ``UnknownSession`` if the session does not exist.
        """
        if _bad_int(after_version, 0):
            raise InvalidInput("after_version must be a non-negative integer.")
        if before_version is not None and _bad_int(before_version, 1):
            raise InvalidInput("before_version must be None or an integer >= 1.")
        limit, _ = _page(limit, 0)
        sid = self._session(principal, key, account_id)
        with store_errors("read the timeline"), self._store.connect() as connection:
            rows = query_timeline(
                connection,
                session_id=sid,
                after_version=after_version,
                before_version=before_version,
                limit=limit,
                newest=bool(newest),
            )
            if not rows and query_head_version(connection, session_id=sid) is None:
                raise UnknownSession(f"No session {key!r} in this account.")
        return [_timeline_entry(row) for row in rows]

    @_public
    def timeline_sample(
        self, principal: Principal, key: str, *, points: int = 200, account_id: str | None = None
    ) -> list[TimelineEntry]:
        """The session's events at ``points`` evenly spaced versions, oldest first.

        The first and the newest event are always included; a session with at
        most ``points`` events is returned whole. For charts of long sessions:
        each row is fetched through the stream index, so the cost grows with
        ``points``, not with the session. Raises ``UnknownSession`` if the
        session does not exist.
        """
        if _bad_int(points, 2) or points > MAX_PAGE:
            raise InvalidInput(f"points must be an integer from 2 to {MAX_PAGE}.")
        sid = self._session(principal, key, account_id)
        with store_errors("read the timeline"), self._store.connect() as connection:
            head = query_head_version(connection, session_id=sid)
            if head is None:
                raise UnknownSession(f"No session {key!r} in this account.")
            if head <= points:
                rows = query_timeline(
                    connection,
                    session_id=sid,
                    after_version=0,
                    before_version=None,
                    limit=head,
                    newest=False,
                )
            else:
                step = (head - 1) / (points - 1)
                versions = sorted({1 + round(i * step) for i in range(points)})
                rows = query_versions(connection, session_id=sid, versions=versions)
        return [_timeline_entry(row) for row in rows]

    @_public
    def forks(
        self, principal: Principal, key: str, *, account_id: str | None = None
    ) -> list[ForkEntry]:
        """The sessions forked from ``key`` (forks stay in its account), oldest first.

        Read from the store (never behind): the account's fork creations through
        the session directory index, each one's ``Forked`` event decoded to match
        the origin exactly. Raises ``UnknownSession`` if ``key`` does not exist.
        """
        sid = self._session(principal, key, account_id)
        tenant = account_id or principal.account_id
        with store_errors("read the forks"), self._store.connect() as connection:
            if query_head_version(connection, session_id=sid) is None:
                raise UnknownSession(f"No session {key!r} in this account.")
            candidates = query_forked_sessions(connection, account_id=tenant)
        found = []
        for row in candidates:
            first = self._ledger.history(principal, row["session_key"], limit=1, account_id=tenant)[
                0
            ]
            event = first.event
            if isinstance(event, Forked) and event.origin_session_id == sid:
                found.append(
                    ForkEntry(
                        session_id=row["session_id"],
                        account_id=tenant,
                        session_key=row["session_key"],
                        origin_version=event.origin_version,
                        created_at=first.timestamp,
                        actor=first.actor,
                    )
                )
        return found

    @property
    def _store(self) -> Engine:
        """The event store's engine (the audit log and timelines read its own rows)."""
        return self._projector.log.engine

    @_public
    def usage(
        self, principal: Principal, key: str | None = None, *, account_id: str | None = None
    ) -> list[ToolUsage]:
        """Tool usage per session and tool (one session with ``key``)."""
        account = self._account(principal, account_id)
        sid = None if key is None else self._session(principal, key, account_id)
        with store_errors("read tool usage"), self.engine.connect() as connection:
            rows = query_usage(connection, account_id=account, session_id=sid)
        return [ToolUsage.model_validate(row) for row in rows]

    # ------------------------------------------------------------- eviction
    @_public
    def evict_idle(
        self,
        principal: Principal,
        max_idle_seconds: float,
        now: datetime | None = None,
        *,
        skip_pending: bool = True,
        account_id: str | None = None,
    ) -> list[str]:
        """Record ``Evicted(reason="idle")`` for live sessions idle longer than the limit.

        Members evict within their account, admins across accounts (or in
        ``account_id``). Each event is recorded in the session's own tenant
        with the caller as actor. Skipped: sessions with a commit in flight in
        this ledger, and, with ``skip_pending`` (the default), sessions with
        uncommitted messages. Returns the evicted keys ordered by (account, key).
        """
        max_idle_seconds = check_seconds(max_idle_seconds, "max_idle_seconds")
        account = self._account(principal, account_id)
        moment = self._ledger._now() if now is None else check_aware(now, "now")
        cutoff = moment - timedelta(seconds=max_idle_seconds)
        self._projector.catch_up(settle=self._settle)  # decide on the newest state we can see
        with store_errors("read the working set"), self.engine.connect() as connection:
            candidates = query_idle(connection, account_id=account, before_us=to_micros(cutoff))
        evicted: list[str] = []
        for row in candidates:
            if skip_pending and row["pending_tokens"] > 0:
                continue
            if self._evict_if_idle(principal, row, moment, cutoff, skip_pending):
                evicted.append(row["session_key"])
        return evicted

    def _in_flight(self, sid: UUID) -> bool:
        ledger = self._ledger
        with ledger._inflight_lock:
            return sid in ledger._inflight

    def _evict_if_idle(
        self,
        principal: Principal,
        row: dict[str, Any],
        moment: datetime,
        cutoff: datetime,
        skip_pending: bool,
    ) -> bool:
        tenant, key, sid = row["account_id"], row["session_key"], row["session_id"]
        if self._in_flight(sid):
            return False
        ledger = self._ledger
        try:
            # The read model may lag: confirm on the session itself before recording.
            view = ledger.session(principal, key, account_id=tenant)
            if view.evicted or view.updated_at > cutoff or (skip_pending and view.buffer):
                return False
            if self._in_flight(sid):
                return False
            idle = (moment - from_micros(row["last_activity_us"])).total_seconds()
            ledger.evict(
                principal, key, reason="idle", idle_seconds=max(0.0, idle), account_id=tenant
            )
        except (UnknownSession, ConcurrencyConflict):
            return False
        return True


def _ws_fields(row: dict[str, Any]) -> dict[str, Any]:
    return _times(
        row,
        created_at="created_at_us",
        last_activity_at="last_activity_us",
        last_commit_at="last_commit_us",
    )


def _bad_int(value: object, minimum: int) -> bool:
    return isinstance(value, bool) or not isinstance(value, int) or value < minimum


def _timeline_entry(row: dict[str, Any]) -> TimelineEntry:
    # Built without validation, like the actor: the stored facts are shown as
    # stored, even edited ones (verify() is what reports those).
    audit = _audit_entry(row)
    last_commit = row["last_commit_us"]
    return TimelineEntry.model_construct(
        **dict(audit),
        message_count=row["message_count"],
        pending_tokens=row["pending_tokens"],
        turn_count=row["turn_count"],
        commit_count=row["commit_count"],
        archive_count=row["archive_count"],
        last_commit_at=None if last_commit is None else from_micros(last_commit),
        status=row["status"],
        tool_name=row["tool_name"],
        tool_status=row["tool_status"],
        prompt_tokens=row["prompt_tokens"],
        completion_tokens=row["completion_tokens"],
    )


def _audit_entry(row: dict[str, Any]) -> AuditEntry:
    actor = Principal.model_construct(
        account_id=row["actor_account"],
        user_id=row["actor_user"],
        agent_id=row["actor_agent"],
        role=row["actor_role"],
        trace_id=row["trace_id"],
    )
    return AuditEntry(
        position=row["position"],
        session_id=row["session_id"],
        account_id=row["account_id"],
        session_key=row["session_key"],
        version=row["version"],
        event_type=row["event_type"],
        actor=actor,
        timestamp=from_micros(row["timestamp_us"]),
        summary=row["summary"],
    )
