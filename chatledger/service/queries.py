"""``ReadModelQueries``: the read side -- working set, archives, audit log, timelines, usage.

Every query applies the tenant rule (``chatledger.domain.access``): members
read their account, admins any (or all). The working set, archive history and
usage are read from the persisted read models (possibly in another database);
the audit log and timelines from the event store's own rows with their stored
facts, so they are never behind. Results are frozen rows of
``chatledger.results``. Reads only: nothing here records an event.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Engine

from chatledger.adapters.audit_log import query_audit, query_rows_at
from chatledger.adapters.sql_projector import store_errors
from chatledger.adapters.sql_read_models import (
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
from chatledger.boundary import public
from chatledger.domain.access import query_scope, target
from chatledger.domain.events import ArchiveMerged, Committed, Forked
from chatledger.domain.failures import InvalidInput, UnknownSession
from chatledger.domain.limits import check_aware, check_int
from chatledger.domain.session import SessionStatus
from chatledger.domain.timestamps import from_micros, to_micros
from chatledger.domain.values import ArchiveSummary, Principal
from chatledger.projections.facts import EVENT_NAMES
from chatledger.results import (
    ArchiveEntry,
    AuditEntry,
    ForkEntry,
    TimelineEntry,
    ToolUsage,
    WorkingSetEntry,
    WorkingSetOrder,
)
from chatledger.service.sessions import SessionStore, unknown

ORDERS = ("last_activity", "created", "key", "pending_tokens")
STATUSES = ("live", "evicted", "closed", "erased")
MAX_SEARCH = 256
MAX_PAGE = 10_000


class ReadModelQueries:
    """Queries over the read models (``engine``) and the event store's rows (``store``)."""

    def __init__(self, engine: Engine, store: Engine, sessions: SessionStore) -> None:
        self.engine = engine
        self.store = store
        self.sessions = sessions

    @public
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
        ``evicted``, ``closed`` or ``erased``; it overrides ``include_evicted``); ``search``
        keeps sessions whose key contains the text, ignoring case.
        """
        if order not in ORDERS:
            raise InvalidInput(f"order must be one of {', '.join(map(repr, ORDERS))}.")
        if status is not None and status not in STATUSES:
            raise InvalidInput(f"status must be None or one of {', '.join(map(repr, STATUSES))}.")
        if search is not None and (not isinstance(search, str) or len(search) > MAX_SEARCH):
            raise InvalidInput(f"search must be None or a str of at most {MAX_SEARCH} characters.")
        limit, offset = page(limit, offset)
        account = query_scope(principal, account_id)
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
        return [WorkingSetEntry.model_validate(_working_set_fields(row)) for row in rows]

    @public
    def archives(
        self,
        principal: Principal,
        key: str,
        *,
        include_merged: bool = False,
        account_id: str | None = None,
    ) -> list[ArchiveEntry]:
        """The session's archives, oldest first; merged ones too with ``include_merged`` (a
        member: those of the current incarnation; an admin: every one)."""
        found = target(principal, key, account_id)
        with store_errors("read the archive history"), self.engine.connect() as connection:
            rows = query_archives(
                connection, session_id=found.session_id, include_merged=bool(include_merged)
            )
        first = self.sessions.visible_from(found)  # a member: the current incarnation's only
        rows = [r for r in rows if r["version"] >= first]
        texts = self._archive_texts(r["position"] for r in rows)
        return [
            ArchiveEntry.model_validate(
                _times(r, created_at="created_at_us")
                | dict(
                    zip(("overview", "abstract"), texts.get(r["archive_id"], ("", "")), strict=True)
                )
            )
            for r in rows
        ]

    def _archive_texts(self, positions: Iterable[int]) -> dict[str, tuple[str, str]]:
        """Overview and abstract of every archive the events at ``positions`` carry, decoded
        (and decrypted: erased content reads as erased)."""
        with store_errors("read the archive history"), self.store.connect() as connection:
            stored = query_rows_at(connection, positions)
        texts: dict[str, tuple[str, str]] = {}
        for row in stored:
            event = self.sessions.decode(row)
            if isinstance(event, Committed | ArchiveMerged):
                archives: tuple[ArchiveSummary, ...] = (event.archive,)
            elif isinstance(event, Forked):
                archives = event.archives
            else:
                continue
            texts.update((a.archive_id, (a.overview, a.abstract)) for a in archives)
        return texts

    @public
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
        limit, offset = page(limit, offset)
        account = query_scope(principal, account_id)
        sid = None if session is None else target(principal, session, account_id).session_id
        type_list: list[str] | None = None
        if types is not None:
            if isinstance(types, str):
                types = [types]
            type_list = list(types)
            unknown_types = sorted(set(type_list) - EVENT_NAMES, key=repr)
            if unknown_types:
                raise InvalidInput(
                    f"Unknown event types {unknown_types}; use {sorted(EVENT_NAMES)}."
                )
        since_us = None if since is None else to_micros(check_aware(since, "since"))
        until_us = None if until is None else to_micros(check_aware(until, "until"))
        with store_errors("read the audit log"), self.store.connect() as connection:
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
        return [audit_entry(row) for row in rows]

    @public
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
        check_int(after_version, "after_version")
        if before_version is not None:
            check_int(before_version, "before_version", minimum=1)
        limit, _ = page(limit, 0)
        found = target(principal, key, account_id)
        with store_errors("read the timeline"), self.store.connect() as connection:
            rows = query_timeline(
                connection,
                session_id=found.session_id,
                after_version=after_version,
                before_version=before_version,
                limit=limit,
                newest=bool(newest),
            )
            if not rows and query_head_version(connection, session_id=found.session_id) is None:
                raise UnknownSession(unknown(found.key, found.tenant))
        return [timeline_entry(row) for row in rows]

    @public
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
        check_int(points, "points", minimum=2, maximum=MAX_PAGE)
        found = target(principal, key, account_id)
        sid = found.session_id
        with store_errors("read the timeline"), self.store.connect() as connection:
            head = query_head_version(connection, session_id=sid)
            if head is None:
                raise UnknownSession(unknown(found.key, found.tenant))
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
        return [timeline_entry(row) for row in rows]

    @public
    def forks(
        self, principal: Principal, key: str, *, account_id: str | None = None
    ) -> list[ForkEntry]:
        """The sessions forked from ``key`` (forks stay in its account), oldest first.

        Read from the store (never behind): the account's fork creations through
        the session directory index, each one's ``Forked`` event decoded to match
        the origin exactly. Raises ``UnknownSession`` if ``key`` does not exist.
        """
        origin = target(principal, key, account_id)
        with store_errors("read the forks"), self.store.connect() as connection:
            if query_head_version(connection, session_id=origin.session_id) is None:
                raise UnknownSession(unknown(origin.key, origin.tenant))
            candidates = query_forked_sessions(connection, account_id=origin.tenant)
        found = []
        for row in candidates:
            (first,) = self.sessions.events(row["session_id"], limit=1)
            if isinstance(first, Forked) and first.origin_session_id == origin.session_id:
                found.append(
                    ForkEntry(
                        session_id=row["session_id"],
                        account_id=origin.tenant,
                        session_key=row["session_key"],
                        origin_version=first.origin_version,
                        created_at=first.timestamp,
                        actor=first.actor,
                    )
                )
        return found

    @public
    def usage(
        self, principal: Principal, key: str | None = None, *, account_id: str | None = None
    ) -> list[ToolUsage]:
        """Tool usage per session and tool (one session with ``key``)."""
        account = query_scope(principal, account_id)
        sid = None if key is None else target(principal, key, account_id).session_id
        with store_errors("read tool usage"), self.engine.connect() as connection:
            rows = query_usage(connection, account_id=account, session_id=sid)
        return [ToolUsage.model_validate(row) for row in rows]

    def idle(self, account: str | None, before: datetime) -> list[dict[str, Any]]:
        """Working-set rows of live sessions last active before ``before`` (for eviction)."""
        with store_errors("read the working set"), self.engine.connect() as connection:
            return query_idle(connection, account_id=account, before_us=to_micros(before))


def page(limit: object, offset: object) -> tuple[int, int]:
    """A checked (limit, offset) pair of a paged query."""
    return check_int(limit, "limit", minimum=1, maximum=MAX_PAGE), check_int(offset, "offset")


def _times(row: dict[str, Any], **columns: str) -> dict[str, Any]:
    """``row`` with ``*_us`` columns turned into datetimes under new names."""
    out = dict(row)
    for name, column in columns.items():
        value = out.pop(column)
        out[name] = None if value is None else from_micros(value)
    return out


def _working_set_fields(row: dict[str, Any]) -> dict[str, Any]:
    return _times(
        row,
        created_at="created_at_us",
        last_activity_at="last_activity_us",
        last_commit_at="last_commit_us",
    )


def audit_entry(row: dict[str, Any]) -> AuditEntry:
    """An audit row as the result type (the actor rebuilt as stored, without validation)."""
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


def timeline_entry(row: dict[str, Any]) -> TimelineEntry:
    """A timeline row: built without validation, like the actor -- the stored facts are
    shown as stored, even edited ones (``verify()`` is what reports those)."""
    audit = audit_entry(row)
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
