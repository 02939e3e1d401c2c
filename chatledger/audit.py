"""Tamper evidence and portability: verify the hash chains, export and import.

``verify`` recomputes every event's chained hash from the stored rows,
recomputes each event's stored facts (the columns the read models are built
from) from its payload, and replays each session without snapshots to check
every stored snapshot, so a row changed, deleted, reordered or inserted
directly in the database -- or doctored facts or a doctored snapshot -- is
reported with the first broken version per session.
``export`` writes self-describing JSON lines (events in order, with hashes);
``import_`` re-verifies a file completely before writing anything, then
records all of it in one transaction into an empty ledger.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Iterator
from itertools import pairwise
from typing import TYPE_CHECKING, Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError

from chatledger.adapters.chain import BrokenLink, ChainRow, first_breaks
from chatledger.adapters.mapper import TimedStoredEvent
from chatledger.domain.errors import AccessDenied, InvalidInput
from chatledger.domain.events import Forked, Started
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.identity import session_id
from chatledger.domain.session import Session
from chatledger.domain.timestamps import from_micros
from chatledger.domain.values import Principal
from chatledger.projections.facts import StoredFacts, stored_facts
from chatledger.results import ChainHead, ImportResult, VerifyIssue, VerifyReport

if TYPE_CHECKING:
    from chatledger.ledger import SessionLedger

EXPORT_FORMAT = "chatledger/export"
EXPORT_FORMAT_VERSION = 2
"""2: payloads as JSON objects (``event``) where exact; 1: payloads as text (``state``)."""
READABLE_FORMAT_VERSIONS = (1, 2)


def _identity(row: ChainRow) -> tuple[str | None, str | None]:
    """Tenant and key from a session's first stored event (None if unreadable)."""
    try:
        state = json.loads(row.state)
        return str(state["tenant"]), str(state["key"])
    except (ValueError, KeyError, TypeError):
        return None, None


def _visible(principal: Principal, tenant: str | None) -> bool:
    return principal.is_admin or tenant == principal.account_id


def _sessions(
    ledger: SessionLedger, principal: Principal, key: str | None, account_id: str | None = None
) -> Iterator[tuple[str | None, str | None, list[ChainRow]]]:
    """(tenant, key, rows) of each session the principal may see (in ``account_id`` if
    given), rows in version order."""
    recorder = ledger._app.event_recorder
    only = None if key is None else ledger._target(principal, key, account_id)[2]
    if account_id is not None and account_id != principal.account_id and not principal.is_admin:
        raise AccessDenied(
            f"Principal of account {principal.account_id!r} may not read account "
            f"{account_id!r}; only admins may name another account."
        )
    current: list[ChainRow] = []

    def flush() -> Iterator[tuple[str | None, str | None, list[ChainRow]]]:
        first = next((r for r in current if r.version == 1), None)
        tenant, skey = _identity(first) if first else (None, None)
        if only is not None or (_visible(principal, tenant) and account_id in (None, tenant)):
            yield tenant, skey, list(current)

    for row in recorder.chain_rows(only):
        if current and row.originator_id != current[0].originator_id:
            yield from flush()
            current = []
        current.append(row)
    if current:
        yield from flush()


def verify(
    ledger: SessionLedger,
    principal: Principal,
    key: str | None,
    anchors: Iterable[ChainHead] = (),
    account_id: str | None = None,
) -> VerifyReport:
    chain_key = ledger._app.event_recorder.chain_key
    anchored = {a.session_id: a for a in anchors}
    issues: list[VerifyIssue] = []
    heads: list[ChainHead] = []
    sessions = events = snapshots = 0
    for tenant, skey, rows in _sessions(ledger, principal, key, account_id):
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
        checked, replay_issue = _check_replay(ledger, rows)
        snapshots += checked
        if replay_issue is not None:
            issues.append(_issue(replay_issue, tenant, skey))
    if key is None:
        # An anchored session with no rows left at all was deleted whole.
        for anchor in anchored.values():
            if _visible(principal, anchor.tenant) and account_id in (None, anchor.tenant):
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


def _check_replay(ledger: SessionLedger, rows: list[ChainRow]) -> tuple[int, BrokenLink | None]:
    """Replay a session's (chain-verified) events: each row's stored facts must be the
    event's, and every stored snapshot the state replayed up to it. Returns
    (snapshots checked, the first problem)."""
    app = ledger._app
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
            session, expected = _replay(ledger, row, session)
        except _Forged as error:
            return len(stored), BrokenLink(
                session_id=sid,
                version=row.version,
                position=row.position,
                reason="identity does not derive",
                expected="a stream id derived from the session's tenant and key",
                found=str(error)[:300],
            )
        except _Unreplayable as error:  # a chain-consistent row this version cannot apply
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
        if snapshot is not None:
            replayed = session.to_state()
            if snapshot.state != replayed:
                return len(stored), BrokenLink(
                    session_id=sid,
                    version=row.version,
                    position=None,
                    reason="snapshot differs from replayed events",
                    expected="state replayed from the verified events",
                    found="a different stored snapshot",
                )
    return len(stored), None


class _Unreplayable(Exception):
    """A stored row this version cannot decode or apply (the message says why)."""


class _Forged(_Unreplayable):
    """A session's first event names a tenant and key (or fork origin) its stream id does not
    derive from (the message says which)."""


def _replay(
    ledger: SessionLedger, row: ChainRow, session: Session | None
) -> tuple[Session, StoredFacts]:
    """Decode one stored row and apply it to ``session`` (None before a session's first);
    returns the session after it and the row's facts as the append would have stored them."""
    try:
        event = ledger._app.mapper.to_domain_event(_stored(row))
        if not isinstance(event, SessionEvent):
            raise TypeError(f"{row.topic} is not a session event")
        replayed = event.mutate(session)
        if not isinstance(replayed, Session):
            raise TypeError("the first event does not start a session")
    except Exception as error:
        raise _Unreplayable(f"{type(error).__name__}: {error}") from error
    if row.version == 1:
        forged = _identity_problem(event, row)
        if forged is not None:
            raise _Forged(forged)
    return replayed, stored_facts(event, replayed.tenant, replayed.key, replayed.counters())


def _stored(row: ChainRow) -> TimedStoredEvent:
    return TimedStoredEvent(
        originator_id=row.originator_id,
        originator_version=row.version,
        topic=row.topic,
        state=row.state,
        timestamp_us=row.timestamp_us,
    )


def export(ledger: SessionLedger, principal: Principal, key: str | None) -> Iterator[str]:
    chain_key = ledger._app.event_recorder.chain_key
    yield json.dumps(
        {
            "format": EXPORT_FORMAT,
            "format_version": EXPORT_FORMAT_VERSION,
            "keyed_chain": chain_key is not None,
        }
    )
    for tenant, skey, rows in _sessions(ledger, principal, key):
        for row in rows:
            record: dict[str, Any] = {
                "position": row.position,
                "session_id": row.originator_id.hex,
                "tenant": tenant,
                "key": skey,
                "version": row.version,
                "type": row.topic.rsplit(":", 1)[-1],
                "topic": row.topic,
                "timestamp": from_micros(row.timestamp_us).isoformat(),
                "timestamp_us": row.timestamp_us,
                **_payload(row.state),
                "hash": row.hash.hex(),
            }
            yield json.dumps(record, ensure_ascii=False)


def _payload(state: bytes) -> dict[str, Any]:
    """The stored payload as an export carries it: ``{"event": <JSON object>}`` when
    re-encoding that object gives back the exact stored bytes (the hash covers
    them), else the stored text as it is (``{"state": "..."}``), or its bytes in
    base64 if they are not even text (``{"state_base64": "..."}``)."""
    try:
        text = state.decode()
    except UnicodeDecodeError:  # not text at all (edited by hand?): keep every byte
        return {"state_base64": base64.b64encode(state).decode()}
    try:
        event = json.loads(text)
    except ValueError:
        return {"state": text}
    if isinstance(event, dict) and _encode_payload(event) == state:
        return {"event": event}
    return {"state": text}


def _encode_payload(event: dict[str, Any]) -> bytes:
    """The stored bytes of an exported ``event`` object (the inverse of ``_payload``)."""
    return json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode()


def _state_of(record: dict[str, Any]) -> bytes:
    if "event" in record:
        event = record["event"]
        if not isinstance(event, dict):
            raise TypeError("'event' must be a JSON object")
        return _encode_payload(event)
    if "state_base64" in record:
        return base64.b64decode(str(record["state_base64"]), validate=True)
    return str(record["state"]).encode()


def _parse(lines: Iterable[str]) -> list[ChainRow]:
    rows: list[ChainRow] = []
    header_seen = False
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record: dict[str, Any] = json.loads(line)
        except ValueError as error:
            raise InvalidInput(
                f"Line {number} is not JSON ({error}); nothing was imported."
            ) from None
        if not header_seen:
            if record.get("format") != EXPORT_FORMAT:
                raise InvalidInput(
                    f"Line {number} is not a chatledger export header; nothing was imported."
                )
            if record.get("format_version") not in READABLE_FORMAT_VERSIONS:
                raise InvalidInput(
                    f"Unsupported export format version {record.get('format_version')!r}; "
                    f"this chatledger version reads {READABLE_FORMAT_VERSIONS}. Nothing was "
                    "imported."
                )
            header_seen = True
            continue
        try:
            rows.append(
                ChainRow(
                    position=int(record["position"]),
                    originator_id=UUID(str(record["session_id"])),
                    version=int(record["version"]),
                    topic=str(record["topic"]),
                    state=_state_of(record),
                    timestamp_us=int(record["timestamp_us"]),
                    hash=bytes.fromhex(str(record["hash"])),
                )
            )
        except (KeyError, ValueError, TypeError) as error:
            raise InvalidInput(
                f"Line {number} is not a valid exported event ({error!r}); nothing was imported."
            ) from None
    if not header_seen:
        raise InvalidInput("The file is empty: no chatledger export header; nothing was imported.")
    return rows


def import_(
    ledger: SessionLedger, lines: Iterable[str], progress: ImportProgress | None = None
) -> ImportResult:
    recorder = ledger._app.event_recorder
    if recorder.max_notification_id() is not None:  # before reading a line of the file
        raise InvalidInput(
            "Import needs an empty ledger, and this one holds events; import into a new "
            "database. Nothing was imported."
        )
    report = progress or _no_progress
    rows = _parse(lines)
    report("read", len(rows), len(rows))
    rows.sort(key=lambda r: (r.originator_id.bytes, r.version))
    broken = next(first_breaks(rows, recorder.chain_key), None)
    if broken is not None:
        raise InvalidInput(
            f"Broken hash chain in session {broken.session_id} at version {broken.version} "
            f"({broken.reason}); nothing was imported. If the source used a chain_key, "
            "configure the same one here."
        )
    positions = [r.position for r in rows]
    if len(set(positions)) != len(positions):
        raise InvalidInput("Two events share a position; nothing was imported.")
    if min(positions, default=1) < 1:
        raise InvalidInput("Positions start at 1; nothing was imported.")
    for before, after in pairwise(rows):  # rows are in (session, version) order
        if before.originator_id == after.originator_id and before.position > after.position:
            raise InvalidInput(
                f"Event {after.version} of session {after.originator_id} has a position "
                f"({after.position}) before its predecessor's ({before.position}); a "
                "session's events follow each other in the log. Nothing was imported."
            )
    facts: dict[int, StoredFacts] = {}
    session: Session | None = None
    for done, row in enumerate(rows, start=1):  # every event must rebuild, or it could not load
        if row.version == 1:  # rows are in (session, version) order: a new session
            session = None
        try:
            session, facts[row.position] = _replay(ledger, row, session)
        except _Forged as error:
            raise InvalidInput(
                f"Session {row.originator_id} {error}; the file was altered (without a "
                "chain_key anyone can recompute the hashes). Nothing was imported."
            ) from None
        except _Unreplayable as error:
            raise InvalidInput(
                f"Event {row.version} of session {row.originator_id} cannot be replayed "
                f"({error}); nothing was imported."
            ) from None
        if done % _PROGRESS_EVERY == 0:
            report("verify", done, len(rows))
    report("verify", len(rows), len(rows))
    rows.sort(key=lambda r: r.position)
    try:
        recorder.insert_exported(rows, [facts[r.position] for r in rows])
    except IntegrityError as error:
        raise InvalidInput(
            f"Import needs an empty ledger ({error}); nothing was imported."
        ) from None
    report("write", len(rows), len(rows))
    return ImportResult(sessions=len({r.originator_id for r in rows}), events=len(rows))


ImportProgress = Callable[[str, int, int], None]
"""Called by ``import_`` with (phase, done, total): phases ``read``, ``verify``, ``write``."""
_PROGRESS_EVERY = 1000


def _no_progress(phase: str, done: int, total: int) -> None:
    return None


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
