"""The storage side of erasure: what a session's rows name, whose sessions, its snapshots.

``survey`` reads a session's stored rows (events and snapshots) without
decoding them: the ids of the keys their sealed content names, and how many
events hold content in the clear (written before encryption, or with it
off). ``started_sessions`` finds the sessions a user -- or anyone -- started
in an account (the creation events' stored facts); ``incarnation_start`` where a
deleted session last started. ``delete_snapshots``
removes a session's snapshots, on SQLite with ``secure_delete`` so the freed
space is zeroed. Nothing here changes an event row: the hash chain covers them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from uuid import UUID

from eventsourcing.utils import get_topic, resolve_topic
from sqlalchemy import delete, func, select

from chatledger.adapters.codec import EVENTS_BY_NAME, is_compact
from chatledger.adapters.schema import events_table, snapshots_table
from chatledger.adapters.sealing import PARTS, Parts, holds_plain_content, key_id_of
from chatledger.adapters.sql_projector import store_errors
from chatledger.adapters.store import EventStoreApplication
from chatledger.domain.events import Deleted, MessageAdded, Restarted


@dataclass(frozen=True)
class Survey:
    """What a session's stored rows say about its encryption."""

    exists: bool
    key_ids: frozenset[str] = field(default_factory=frozenset)
    unencrypted: int = 0  # events whose content is stored in the clear
    erased: bool = False  # its last event is an Erased


def survey(store: EventStoreApplication, sid: UUID, since: int = 1) -> Survey:
    """The keys a session's rows (events and snapshots) from version ``since`` on are sealed
    with, and its events with content in the clear."""
    rows = store.event_recorder.select_events(sid, gt=since - 1 if since > 1 else None)
    snapshots = [
        row for row in store.snapshot_recorder.select_events(sid)
        if row.originator_version >= since
    ]  # fmt: skip
    key_ids: set[str] = set()
    unencrypted = 0
    for is_event, rows_ in ((True, rows), (False, snapshots)):
        for row in rows_:
            found, parts = _parts(row.topic)
            if not found:
                continue
            try:
                payload = json.loads(row.state)
            except ValueError:
                continue  # not JSON (altered by hand): verify reports it
            if not isinstance(payload, dict):
                continue
            key_id = key_id_of(payload)
            if key_id is not None:
                key_ids.add(key_id)
            elif is_event and holds_plain_content(parts, payload):
                unencrypted += 1
    erased = bool(rows) and rows[-1].topic.rsplit(":", 1)[-1] == "Erased"
    return Survey(bool(rows), frozenset(key_ids), unencrypted, erased)


def _parts(topic: str) -> tuple[bool, Parts | None]:
    """Whether rows of ``topic`` may hold content, and its parts (None: a ``MessageAdded``
    of stored form 2)."""
    if is_compact(topic):
        cls = EVENTS_BY_NAME.get(topic)
        if cls is MessageAdded:
            return True, None
    else:
        try:
            cls = resolve_topic(topic)
        except Exception:  # a topic this version does not know
            return False, None
    parts = PARTS.get(cls) if cls is not None else None
    return parts is not None, parts


def started_sessions(
    store: EventStoreApplication, tenant: str, user_id: str | None
) -> list[tuple[UUID, str]]:
    """(session id, key) of the sessions started in ``tenant`` (by ``user_id`` if given),
    by key."""
    t = events_table
    query = select(t.c.originator_id, t.c.session_key).where(
        t.c.originator_version == 1, t.c.tenant == tenant
    )
    if user_id is not None:
        query = query.where(t.c.actor_user == user_id)
    engine = store.event_recorder.engine
    with store_errors("find the sessions to erase"), engine.connect() as connection:
        rows = connection.execute(query.order_by(t.c.session_key)).all()
    return [(sid if isinstance(sid, UUID) else UUID(str(sid)), str(key)) for sid, key in rows]


# The topics of the events that begin an incarnation, in both stored spellings (compact, and
# the library's module:class topic of older rows).
_BOUNDARIES = tuple(
    topic for cls in (Deleted, Restarted) for topic in (cls.__name__, get_topic(cls))
)


def incarnation_start(store: EventStoreApplication, sid: UUID) -> int:
    """The version that began a session's current incarnation: its last ``Deleted`` or
    ``Restarted`` (the stored facts, read fresh), or 1 if it was never deleted."""
    t = events_table
    query = select(func.max(t.c.originator_version)).where(
        t.c.originator_id == sid, t.c.topic.in_(_BOUNDARIES)
    )
    engine = store.event_recorder.engine
    with store_errors("read where the session last started"), engine.connect() as connection:
        found = connection.execute(query).scalar()
    return max(1, int(found or 0))


def delete_snapshots(store: EventStoreApplication, sid: UUID) -> int:
    """Delete every snapshot of a session (zeroing the freed space on SQLite); how many."""
    engine = store.event_recorder.engine
    statement = delete(snapshots_table).where(snapshots_table.c.originator_id == sid)
    with store_errors("delete the snapshots of an erased session"), engine.connect() as plain:
        connection = plain.execution_options(sqlite_begin="IMMEDIATE")
        with connection.begin():
            return int(connection.execute(statement).rowcount or 0)
