"""Tamper evidence: verify the hash chains, the stored facts, the snapshots and identities.

``verify`` recomputes every event's chained hash from the stored rows,
replays each session without snapshots -- recomputing each event's stored
facts (the columns the read models are built from) and checking that its
stream id derives from the tenant and key of its first event -- and compares
every stored snapshot with the replay, so a row changed, deleted, reordered or
inserted directly in the database (or doctored facts, a doctored snapshot, a
snapshot past the last event, a forged identity) is reported with the first
broken version per session. ``replay_row`` is the replay step that
``transfer.import_`` shares.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any
from uuid import UUID

from chatledger.adapters.chain import BrokenLink, ChainRow, first_breaks
from chatledger.adapters.codec import is_compact
from chatledger.adapters.mapper import TimedStoredEvent
from chatledger.adapters.store import EventStoreApplication
from chatledger.domain.access import query_scope, target, visible
from chatledger.domain.events import Forked, Started
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.failures import InvalidInput
from chatledger.domain.identity import session_id
from chatledger.domain.session import Session
from chatledger.domain.values import Principal
from chatledger.projections.facts import StoredFacts, stored_facts
from chatledger.results import ChainHead, VerifyIssue, VerifyReport


def _identity(row: ChainRow) -> tuple[str | None, str | None]:
    """Tenant and key from a session's first stored event (None if unreadable)."""
    try:
        state = json.loads(row.state)
        return str(state["tenant"]), str(state["key"])
    except (ValueError, KeyError, TypeError):
        return None, None


def sessions_of(
    store: EventStoreApplication,
    principal: Principal,
    key: str | None,
    account_id: str | None = None,
) -> Iterator[tuple[str | None, str | None, list[ChainRow]]]:
    """(tenant, key, rows) of each session the principal may see (in ``account_id`` if
    given), rows in version order."""
    recorder = store.event_recorder
    only = None if key is None else target(principal, key, account_id).session_id
    scope = query_scope(principal, account_id)
    current: list[ChainRow] = []

    def flush() -> Iterator[tuple[str | None, str | None, list[ChainRow]]]:
        first = next((r for r in current if r.version == 1), None)
        tenant, skey = _identity(first) if first else (None, None)
        if only is not None or (visible(principal, tenant) and scope in (None, tenant)):
            yield tenant, skey, list(current)

    for row in recorder.chain_rows(only):
        if current and row.originator_id != current[0].originator_id:
            yield from flush()
            current = []
        current.append(row)
    if current:
        yield from flush()


def verify(
    store: EventStoreApplication,
    principal: Principal,
    key: str | None,
    anchors: Iterable[ChainHead] = (),
    account_id: str | None = None,
) -> VerifyReport:
    chain_key = store.event_recorder.chain_key
    anchored = {a.session_id: a for a in anchors}
    issues: list[VerifyIssue] = []
    heads: list[ChainHead] = []
    sessions = events = snapshots = 0
    for tenant, skey, rows in sessions_of(store, principal, key, account_id):
        sessions += 1
        events += len(rows)
        sid = rows[0].originator_id
        anchor = anchored.pop(sid, None)
        broken = next(first_breaks(rows, chain_key), None)
        if broken is None and anchor is not None:
            broken = _check_anchor(rows, anchor)
        if broken is not None:
            issues.append(_issue(broken, tenant, skey))
            continue
        heads.append(
            ChainHead(
                session_id=sid, tenant=tenant, key=skey, version=rows[-1].version,
                hash=rows[-1].hash.hex(),
            )
        )  # fmt: skip
        checked, replay_issue = _check_replay(store, rows)
        snapshots += checked
        if replay_issue is not None:
            issues.append(_issue(replay_issue, tenant, skey))
    if key is None:
        # An anchored session with no rows left at all was deleted whole.
        for anchor in anchored.values():
            if visible(principal, anchor.tenant) and account_id in (None, anchor.tenant):
                issues.append(
                    VerifyIssue(
                        session_id=anchor.session_id, tenant=anchor.tenant, key=anchor.key,
                        version=anchor.version, position=None, reason="anchored session missing",
                        expected=anchor.hash, found="no events",
                    )
                )  # fmt: skip
    return VerifyReport(
        ok=not issues,
        sessions_checked=sessions,
        events_checked=events,
        snapshots_checked=snapshots,
        issues=tuple(issues),
        heads=tuple(heads),
    )


def _check_anchor(rows: list[ChainRow], anchor: ChainHead) -> BrokenLink | None:
    """An anchored head must still be in the chain: catches events cut off the end."""
    at = next((r for r in rows if r.version == anchor.version), None)
    if at is not None and at.hash.hex() == anchor.hash:
        return None
    return BrokenLink(
        session_id=anchor.session_id,
        version=anchor.version,
        position=at.position if at else None,
        reason="anchored head missing" if at is None else "anchored head differs",
        expected=anchor.hash,
        found=at.hash.hex() if at else f"chain ends at version {rows[-1].version}",
    )


def _issue(link: BrokenLink, tenant: str | None, key: str | None) -> VerifyIssue:
    return VerifyIssue(tenant=tenant, key=key, **link.model_dump())


def _check_replay(
    store: EventStoreApplication, rows: list[ChainRow]
) -> tuple[int, BrokenLink | None]:
    """Replay a session's (chain-verified) events: each row's stored facts must be the
    event's, and every stored snapshot the state replayed up to it. Returns
    (snapshots checked, the first problem)."""
    app = store
    sid = rows[0].originator_id
    raw = app.snapshot_rows(sid)
    last = rows[-1].version
    stored: dict[int, Any] = {}
    for raw_snapshot in raw:
        version = raw_snapshot.originator_version
        problem = None
        if version > last:
            problem = (
                "snapshot past the last event",
                f"a snapshot at version {last} or before",
                f"a snapshot at version {version}",
            )
        else:
            try:
                stored[version] = app.mapper.to_domain_event(raw_snapshot)
            except Exception as error:
                problem = (
                    "snapshot cannot be decoded",
                    "a snapshot this chatledger version can read",
                    f"{type(error).__name__}: {error}"[:300],
                )
        if problem is not None:
            reason, wanted, found = problem
            return len(raw), BrokenLink(
                session_id=sid, version=version, position=None, reason=reason,
                expected=wanted, found=found,
            )  # fmt: skip
    session: Session | None = None
    for row in rows:
        try:
            session, expected = replay_row(store, row, session)
        except Forged as error:
            return len(stored), BrokenLink(
                session_id=sid,
                version=row.version,
                position=row.position,
                reason="identity does not derive",
                expected="a stream id derived from the session's tenant and key",
                found=str(error)[:300],
            )
        except Unreplayable as error:  # a chain-consistent row this version cannot apply
            return len(stored), BrokenLink(
                session_id=sid,
                version=row.version,
                position=row.position,
                reason="event cannot be replayed",
                expected="an event this chatledger version can apply",
                found=str(error)[:300],
            )
        if row.facts != expected:
            changed = [
                name
                for name, want, got in zip(
                    StoredFacts._fields, expected, row.facts or (), strict=False
                )
                if want != got
            ]
            return len(stored), BrokenLink(
                session_id=sid,
                version=row.version,
                position=row.position,
                reason="stored facts differ from the event",
                expected="facts derived from the verified events",
                found=f"edited fact columns: {', '.join(changed) or 'all (none stored)'}",
            )
        snapshot = stored.get(row.version)
        if snapshot is not None and not snapshot.matches(session):
            return len(stored), BrokenLink(
                session_id=sid,
                version=row.version,
                position=None,
                reason="snapshot differs from replayed events",
                expected="state replayed from the verified events",
                found="a different stored snapshot",
            )
    return len(stored), None


class Unreplayable(Exception):
    """A stored row this version cannot decode or apply (the message says why)."""


class Forged(Unreplayable):
    """A session's first event names a tenant and key (or fork origin) its stream id does not
    derive from (the message says which)."""


def replay_row(
    store: EventStoreApplication, row: ChainRow, session: Session | None
) -> tuple[Session, StoredFacts]:
    """Decode one stored row and apply it to ``session`` (None before a session's first);
    returns the session after it and the row's facts as the append would have stored them."""
    try:
        event = store.mapper.to_domain_event(_stored(row))
        if not isinstance(event, SessionEvent):
            raise TypeError(f"{row.topic} is not a session event")
        replayed = event.mutate(session)
        if not isinstance(replayed, Session):
            raise TypeError("the first event does not start a session")
    except Exception as error:
        raise Unreplayable(f"{type(error).__name__}: {error}") from error
    if row.version == 1:
        forged = _identity_problem(event, row)
        if forged is not None:
            raise Forged(forged)
    return replayed, stored_facts(
        event, replayed.tenant, replayed.key, replayed.counters(), summary=not is_compact(row.topic)
    )


def _stored(row: ChainRow) -> TimedStoredEvent:
    return TimedStoredEvent(
        originator_id=row.originator_id,
        originator_version=row.version,
        topic=row.topic,
        state=row.state,
        timestamp_us=row.timestamp_us,
    )


def _identity_problem(event: SessionEvent, row: ChainRow) -> str | None:
    """Why a session's first ``event`` does not belong under ``row``'s stream id, if it does not.

    A stream id is derived from tenant and key, and a fork names its origin's
    id, derived from the same tenant and the origin's key: where they do not
    derive, a key of one tenant would resolve into another tenant's session.
    """
    if not isinstance(event, Started | Forked):
        return f"starts with {type(event).__name__}, not Started or Forked"
    expected = session_id_of(event.tenant, event.key)
    if expected != row.originator_id:
        return (
            f"names tenant {event.tenant!r} and key {event.key!r}, whose stream id is "
            f"{expected}, not {row.originator_id}"
        )
    if isinstance(event, Forked):
        origin = session_id_of(event.tenant, event.origin_key)
        if origin != event.origin_session_id:
            return (
                f"is a fork naming origin {event.origin_session_id} with key "
                f"{event.origin_key!r}, which is not that key's session in tenant "
                f"{event.tenant!r}"
            )
    return None


def session_id_of(tenant: str, key: str) -> UUID | None:
    """The stream id of ``(tenant, key)``, or ``None`` if they are not valid identifiers."""
    try:
        return session_id(tenant, key)
    except InvalidInput:
        return None
