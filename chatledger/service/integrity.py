"""Tamper evidence: verify the hash chains, and on request replay every session.

``verify`` reads every stored event once, in (session, version) order, and
checks per session, at about the cost of reading and hashing the rows:

* the hash chain: each event's hash, recomputed from its stored row (position,
  session id, version, topic, timestamp, payload) and its predecessor's hash,
  with no version missing or repeated -- so a row changed, deleted, reordered
  or inserted directly in the database is reported at the first broken version;
* the identity: the session's stream id derives from the tenant and key its
  first event names (and a fork's origin from the origin's key);
* the stored facts that name the event and its session (``event_type``,
  ``tenant``, ``session_key``: what the audit log and the session directory
  filter on) against the event's topic and the session's identity (empty, as a
  slim row after the first leaves them, where the first row or the topic says it);
* that no stored snapshot lies past the session's last event;
* anchors, heads kept from an earlier report, which catch events cut off the end.

``deep=True`` adds the replay check (``replay_check``): every session is
replayed without snapshots, every event's stored facts recomputed and every
stored snapshot compared with the replayed state. Facts and snapshots are not
hashed, so a doctored counter, summary or actor fact, a doctored snapshot,
and a chain-consistent payload this version cannot apply are found only by
the deep check. ``sessions_of`` is the per-session read that ``export`` shares.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from itertools import groupby, islice
from operator import itemgetter
from typing import Any
from uuid import UUID

from chatledger.adapters.chain import BrokenLink, ChainRow, as_uuid, first_break
from chatledger.adapters.chain_scan import SnapshotReader, scan_rows, snapshot_versions
from chatledger.adapters.store import EventStoreApplication
from chatledger.domain.access import query_scope, target, visible
from chatledger.domain.values import Principal
from chatledger.projections.facts import FACT_COLUMNS
from chatledger.results import ChainHead, VerifyIssue, VerifyReport
from chatledger.service.replay_check import check_replay, identity_problem

_NAMING_FACTS = 3  # event_type, tenant, session_key: the first fact columns
_NAMING = itemgetter(3, 7, 8, 9)  # a scanned row's topic and naming facts
_stream = itemgetter(1)  # a scanned row's session id, as stored
assert FACT_COLUMNS[:_NAMING_FACTS] == ("event_type", "tenant", "session_key")


def _identity(state: Any) -> tuple[str | None, str | None]:
    """Tenant and key from a session's first stored payload (None if unreadable)."""
    fields = _payload(state)
    tenant, key = fields.get("tenant"), fields.get("key")
    if isinstance(tenant, str) and isinstance(key, str):
        return tenant, key
    return None, None


def _payload(state: Any) -> dict[str, Any]:
    try:
        fields = json.loads(state)
    except (ValueError, TypeError):
        return {}
    return fields if isinstance(fields, dict) else {}


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
        tenant, skey = _identity(first.state) if first else (None, None)
        if only is not None or (visible(principal, tenant) and scope in (None, tenant)):
            yield tenant, skey, list(current)

    for row in recorder.chain_rows(only):
        if current and row.originator_id != current[0].originator_id:
            yield from flush()
            current = []
        current.append(row)
    if current:
        yield from flush()


def _scanned_sessions(
    store: EventStoreApplication, only: UUID | None, deep: bool
) -> Iterator[list[tuple[Any, ...]]]:
    """Each session's scanned rows (``adapters.chain_scan``), in version order: with the
    facts naming each event, or (``deep``) with every fact, packed."""
    current: list[tuple[Any, ...]] = []
    stream: Any = None
    scanned = scan_rows(store.event_recorder, only, facts=_NAMING_FACTS, packed=deep)
    for batch in scanned:
        for oid, rows in groupby(batch, _stream):  # a session's rows, grouped in C
            if oid != stream:
                if current:
                    yield current
                current, stream = list(rows), oid
            else:  # the session goes on from the batch before
                current.extend(rows)
    if current:
        yield current


def verify(
    store: EventStoreApplication,
    principal: Principal,
    key: str | None,
    anchors: Iterable[ChainHead] = (),
    account_id: str | None = None,
    *,
    deep: bool = False,
) -> VerifyReport:
    only = None if key is None else target(principal, key, account_id).session_id
    scope = query_scope(principal, account_id)
    anchored = {a.session_id: a for a in anchors}
    snapshots = snapshot_versions(store.snapshot_recorder, only)
    reader = SnapshotReader(store.snapshot_recorder)
    try:
        issues, heads, counts = _verify_sessions(
            store, principal, only, scope, anchored, snapshots, reader, deep
        )
    finally:
        reader.close()
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
    sessions, events, snapshots_checked = counts
    return VerifyReport(
        ok=not issues,
        deep=deep,
        sessions_checked=sessions,
        events_checked=events,
        snapshots_checked=snapshots_checked,
        issues=tuple(issues),
        heads=tuple(heads),
    )


def _verify_sessions(
    store: EventStoreApplication,
    principal: Principal,
    only: UUID | None,
    scope: str | None,
    anchored: dict[UUID, ChainHead],
    snapshots: dict[UUID, list[int]],
    reader: SnapshotReader,
    deep: bool,
) -> tuple[list[VerifyIssue], list[ChainHead], tuple[int, int, int]]:
    """The per-session checks of ``verify``; anchors found are taken out of ``anchored``.
    Returns the issues, the verified heads and (sessions, events, snapshots) checked."""
    chain_key = store.event_recorder.chain_key
    issues: list[VerifyIssue] = []
    heads: list[ChainHead] = []
    sessions = events = snapshots_checked = 0
    for rows in _scanned_sessions(store, only, deep):
        sid = as_uuid(rows[0][1])
        tenant, skey = _identity(rows[0][4]) if rows[0][2] == 1 else (None, None)
        if only is None and not (visible(principal, tenant) and scope in (None, tenant)):
            continue
        sessions += 1
        events += len(rows)
        versions = snapshots.get(sid, [])
        snapshots_checked += len(versions)
        anchor = anchored.pop(sid, None)
        broken = first_break(sid, rows, chain_key)
        if broken is None and anchor is not None:
            broken = _check_anchor(rows, anchor)
        if broken is not None:
            issues.append(_issue(broken, tenant, skey))
            continue
        last = rows[-1]
        heads.append(
            ChainHead(
                session_id=sid, tenant=tenant, key=skey, version=last[2],
                hash=bytes(last[6]).hex(),
            )
        )  # fmt: skip
        broken = _check_naming(sid, rows, tenant, skey) or _check_snapshot_versions(
            sid, versions, last[2]
        )
        if broken is None and deep:
            broken = check_replay(store, sid, rows, reader.rows(sid) if versions else ())
        if broken is not None:
            issues.append(_issue(broken, tenant, skey))
    return issues, heads, (sessions, events, snapshots_checked)


def _check_naming(
    sid: UUID, rows: Sequence[tuple[Any, ...]], tenant: str | None, key: str | None
) -> BrokenLink | None:
    """The first event must name the identity ``sid`` derives from, and every row's naming
    facts (event type, tenant, key) the row's topic and that identity."""
    first = rows[0]
    fields = _payload(first[4])
    origin = fields.get("origin_session_id")
    problem = identity_problem(
        _name(first[3]), sid, tenant, key, fields.get("origin_key"),
        as_uuid(origin) if isinstance(origin, str) else None,
    )  # fmt: skip
    if problem is not None:
        return BrokenLink(
            session_id=sid, version=1, position=first[0], reason="identity does not derive",
            expected="a stream id derived from the session's tenant and key",
            found=problem[:300],
        )  # fmt: skip
    return None if well_named(rows, tenant, key) else first_misnamed(sid, rows, tenant, key)


def first_misnamed(
    sid: UUID, rows: Sequence[tuple[Any, ...]], tenant: str | None, key: str | None
) -> BrokenLink | None:
    """The first row whose naming facts are neither the whole nor the slim ones, row by row."""
    names: dict[str, str] = {}
    for row in rows:
        topic = row[3]
        name = names.get(topic)
        if name is None:
            name = names[topic] = _name(topic)
        named, row_tenant, row_key = row[7:10]
        if named == name and row_tenant == tenant and row_key == key:
            continue
        # A slim row after the first (projections.facts): no tenant and key, and no event
        # type where the topic is its short name.
        slim = row[2] != 1 and (row_tenant == "" or row_key == "")
        untyped = slim and named == "" and topic == name  # the topic names the type
        if slim and row_tenant == row_key == "" and (named == name or untyped):
            continue
        wanted = ("" if untyped else name, "", "") if slim else (name, tenant, key)
        edited = [c for c, w, g in zip(FACT_COLUMNS, wanted, row[7:10], strict=False) if w != g]
        return BrokenLink(
            session_id=sid, version=row[2], position=row[0],
            reason="stored facts differ from the event",
            expected="facts naming the verified event and its session",
            found=f"edited fact columns: {', '.join(edited)}",
        )  # fmt: skip
    return None


def well_named(rows: Sequence[tuple[Any, ...]], tenant: str | None, key: str | None) -> bool:
    """Whether every row's naming facts pass the row-by-row check of ``_check_naming``,
    told from the few distinct (topic, facts) a session's rows hold, gathered in C: the
    first row whole, the rows after it (versions after 1: chain-verified) whole or slim."""
    first = _NAMING(rows[0])
    if first != (first[0], _name(first[0]), tenant, key):
        return False
    try:
        distinct = set(map(_NAMING, islice(rows, 1, None)))
    except TypeError:  # an unhashable value (a row edited by hand): row by row
        return False
    for topic, named, row_tenant, row_key in distinct:
        name = _name(topic)
        whole = named == name and row_tenant == tenant and row_key == key
        # slim: no tenant and key; no event type where the topic is its short name
        slim = row_tenant == row_key == "" and (named == name or (named == "" and topic == name))
        if not (whole or slim):
            return False
    return True


def _name(topic: Any) -> str:
    """The event type a topic names (``module:Class`` -> ``Class``)."""
    return str(topic).rpartition(":")[2]


def _check_snapshot_versions(sid: UUID, versions: list[int], last: int) -> BrokenLink | None:
    """A snapshot from beyond the last event would make every later write conflict."""
    beyond = next((v for v in versions if v > last), None)
    if beyond is None:
        return None
    return BrokenLink(
        session_id=sid, version=beyond, position=None, reason="snapshot past the last event",
        expected=f"a snapshot at version {last} or before",
        found=f"a snapshot at version {beyond}",
    )  # fmt: skip


def _check_anchor(rows: Sequence[tuple[Any, ...]], anchor: ChainHead) -> BrokenLink | None:
    """An anchored head must still be in the chain: catches events cut off the end."""
    at = next((r for r in rows if r[2] == anchor.version), None)
    if at is not None and bytes(at[6]).hex() == anchor.hash:
        return None
    return BrokenLink(
        session_id=anchor.session_id,
        version=anchor.version,
        position=at[0] if at else None,
        reason="anchored head missing" if at is None else "anchored head differs",
        expected=anchor.hash,
        found=bytes(at[6]).hex() if at else f"chain ends at version {rows[-1][2]}",
    )


def _issue(link: BrokenLink, tenant: str | None, key: str | None) -> VerifyIssue:
    return VerifyIssue(tenant=tenant, key=key, **link.model_dump())
