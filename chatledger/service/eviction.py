"""Idle eviction: record ``Evicted(reason="idle")`` for sessions idle longer than a limit.

Candidates come from the working-set read model (which may lag), so each one
is confirmed on the session itself, under its lock, before anything is
recorded: still live, idle since before the cutoff, no commit in flight in
this ledger, and (by default) no uncommitted messages.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from chatledger.domain.access import Target, query_scope
from chatledger.domain.failures import ConcurrencyConflict, UnknownSession
from chatledger.domain.limits import check_aware, check_seconds
from chatledger.domain.session import Session
from chatledger.domain.timestamps import from_micros
from chatledger.domain.values import Principal
from chatledger.service.queries import ReadModelQueries
from chatledger.service.sessions import SessionStore


def evict_idle(
    sessions: SessionStore,
    queries: ReadModelQueries,
    in_flight: Callable[[UUID], bool],
    principal: Principal,
    max_idle_seconds: float,
    now: datetime,
    *,
    skip_pending: bool,
    account_id: str | None,
) -> list[str]:
    """Evict the live sessions idle longer than ``max_idle_seconds`` before ``now``.

    Members evict within their account, admins across accounts (or in
    ``account_id``); each event is recorded in the session's own tenant with the
    caller as actor. Returns the evicted keys ordered by (account, key).
    """
    max_idle_seconds = check_seconds(max_idle_seconds, "max_idle_seconds")
    check_aware(now, "now")
    account = query_scope(principal, account_id)
    cutoff = now - timedelta(seconds=max_idle_seconds)
    evicted: list[str] = []
    for row in queries.idle(account, cutoff):
        if skip_pending and row["pending_tokens"] > 0:
            continue
        if _evict_if_idle(sessions, in_flight, principal, row, now, cutoff, skip_pending):
            evicted.append(row["session_key"])
    return evicted


def _evict_if_idle(
    sessions: SessionStore,
    in_flight: Callable[[UUID], bool],
    principal: Principal,
    row: dict[str, Any],
    now: datetime,
    cutoff: datetime,
    skip_pending: bool,
) -> bool:
    found = Target(row["account_id"], row["session_key"], row["session_id"])
    if in_flight(found.session_id):
        return False
    idle = max(0.0, (now - from_micros(row["last_activity_us"])).total_seconds())

    def apply(session: Session) -> bool:
        # The read model may lag: decide on the session itself, as recorded now.
        if session.evicted or session.updated_at > cutoff or (skip_pending and session.buffer):
            return False
        if in_flight(found.session_id):
            return False
        session.evict("idle", idle_seconds=idle, actor=principal, timestamp=now)
        return True

    try:
        written = sessions.write(found.session_id, apply)
    except (UnknownSession, ConcurrencyConflict):
        return False
    if written.outcome:
        sessions.forget(found.session_id)  # eviction is about memory
    return written.outcome
