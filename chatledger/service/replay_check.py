"""The replay check: rebuild a session from its stored events and compare what was stored.

``verify(deep=True)`` and ``import_`` replay every event of a session without
snapshots: each must decode and apply (``replay_event``), a session's first
event must name the tenant and key its stream id derives from, each row's
stored facts must be the facts of its event (``check_replay``), and every
stored snapshot must be the state replayed up to it. Facts and snapshots are
not covered by the hash chain, so only this check finds them doctored.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from itertools import compress, islice, repeat
from operator import itemgetter, ne
from typing import Any
from uuid import UUID

from chatledger.adapters.chain import BrokenLink, ChainRow
from chatledger.adapters.chain_scan import fact_columns, whole_facts
from chatledger.adapters.codec import (
    BuiltMessages,
    buffer_json,
    checked_messages,
    is_compact,
    message_added,
    message_added_of_row,
)
from chatledger.adapters.mapper import PydanticMapper
from chatledger.adapters.store import EventStoreApplication
from chatledger.domain.events import Forked, MessageAdded, Started
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.failures import InvalidInput
from chatledger.domain.identity import message_ids_at, session_id
from chatledger.domain.message_runs import MessageRun
from chatledger.domain.session import Session, counters_of
from chatledger.domain.values import Principal
from chatledger.projections.facts import (
    StoredFacts,
    edited_facts,
    message_run_facts,
    stored_facts,
)

_version, _topic, _state, _stamp = (itemgetter(n) for n in (2, 3, 4, 5))  # of a scanned row


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
    return replay_event(
        _mapper(store), row.originator_id, row.version, row.topic, row.state,
        row.timestamp_us, session,
    )  # fmt: skip


def replay_event(
    mapper: PydanticMapper,
    sid: UUID,
    version: int,
    topic: str,
    state: bytes,
    timestamp_us: int,
    session: Session | None,
) -> tuple[Session, StoredFacts]:
    """``replay_row`` of a row given by its values, decoded by the store's ``mapper``."""
    try:
        event = mapper.event_of_row(sid, version, topic, state, timestamp_us)
        if not isinstance(event, SessionEvent):
            raise TypeError(f"{topic} is not a session event")
        replayed = event.mutate(session)
        if not isinstance(replayed, Session):
            raise TypeError("the first event does not start a session")
    except Exception as error:
        raise Unreplayable(f"{type(error).__name__}: {error}") from error
    if version == 1:
        forged = _event_identity_problem(event, sid)
        if forged is not None:
            raise Forged(forged)
    return replayed, stored_facts(
        event, replayed.tenant, replayed.key, replayed.counters(), summary=not is_compact(topic)
    )


def _event_identity_problem(event: SessionEvent, sid: UUID) -> str | None:
    if isinstance(event, Forked):
        return identity_problem(
            "Forked", sid, event.tenant, event.key, event.origin_key, event.origin_session_id
        )
    if isinstance(event, Started):
        return identity_problem("Started", sid, event.tenant, event.key)
    return identity_problem(type(event).__name__, sid, None, None)


def identity_problem(
    kind: str,
    sid: UUID,
    tenant: str | None,
    key: str | None,
    origin_key: str | None = None,
    origin_id: UUID | None = None,
) -> str | None:
    """Why a session's first event -- a ``kind`` naming ``tenant`` and ``key`` (a fork also
    its origin) -- does not belong under the stream id ``sid``, if it does not.

    A stream id is derived from tenant and key, and a fork names its origin's
    id, derived from the same tenant and the origin's key: where they do not
    derive, a key of one tenant would resolve into another tenant's session.
    """
    if kind not in ("Started", "Forked"):
        return f"starts with {kind}, not Started or Forked"
    if tenant is None or key is None:
        return f"is a {kind} that names no tenant and key"
    expected = session_id_of(tenant, key)
    if expected != sid:
        return f"names tenant {tenant!r} and key {key!r}, whose stream id is {expected}, not {sid}"
    if kind == "Forked":
        origin = None if origin_key is None else session_id_of(tenant, origin_key)
        if origin is None or origin != origin_id:
            return (
                f"is a fork naming origin {origin_id} with key {origin_key!r}, which is "
                f"not that key's session in tenant {tenant!r}"
            )
    return None


def session_id_of(tenant: str, key: str) -> UUID | None:
    """The stream id of ``(tenant, key)``, or ``None`` if they are not valid identifiers."""
    try:
        return session_id(tenant, key)
    except InvalidInput:
        return None


def check_replay(
    store: EventStoreApplication,
    sid: UUID,
    rows: Sequence[tuple[Any, ...]],
    snapshots: Sequence[tuple[int, str, bytes]] = (),
) -> BrokenLink | None:
    """Replay a session's (chain-verified) rows -- tuples as ``adapters.chain_scan`` reads
    them, with every fact -- and compare: each row's stored facts must be its event's, and
    each of its stored ``snapshots`` (version, topic, state) the state replayed up to it.
    Returns the first problem.

    A run of messages is applied in one step (``Session.replay_run``, as a load does),
    each row's counters counted alongside: the same facts as applying them one by one."""
    stored = {version: (topic, state) for version, topic, state in snapshots}
    session: Session | None = None
    mapper = _mapper(store)
    index, count = 0, len(rows)
    topics, versions = list(map(_topic, rows)), list(map(_version, rows))
    while index < count:
        if session is not None:
            run = rows[index : _message_run_end(topics, versions, index, stored)]
            if len(run) > 1:
                session, done, problem = _check_messages(mapper, sid, run, session)
                if problem is not None:
                    return problem
                index += done
                if done == len(run):
                    problem = _check_snapshot_at(store, session, stored)
                    if problem is not None:
                        return problem
                    continue  # else the row that did not decode is reported below
        row = rows[index]
        index += 1
        _, _, version, topic, state, timestamp_us = row[:6]
        try:
            session, expected = replay_event(
                mapper, sid, version, topic, state, timestamp_us, session
            )
        except Forged as error:
            return _broken(
                sid, row, "identity does not derive",
                "a stream id derived from the session's tenant and key", str(error),
            )  # fmt: skip
        except Unreplayable as error:  # a chain-consistent row this version cannot apply
            return _broken(
                sid, row, "event cannot be replayed",
                "an event this chatledger version can apply", str(error),
            )  # fmt: skip
        problem = _facts_problem(sid, row, expected, session.started_by) or _check_snapshot_at(
            store, session, stored
        )
        if problem is not None:
            return problem
    return None


def _message_run_end(
    topics: list[str], versions: list[int], index: int, stored: dict[int, Any]
) -> int:
    """Where the run of format-2 messages from ``index`` on ends: at the first row of
    another topic, or right after the first with a stored snapshot (its state is compared
    right after it). Found in passes of C code."""
    others = map(ne, islice(topics, index, None), repeat("MessageAdded"))
    end = next(compress(range(index, len(topics)), others), len(topics))
    if stored:
        snapshot = map(stored.__contains__, islice(versions, index, end))
        at = next(compress(range(index, end), snapshot), None)
        if at is not None:
            return at + 1
    return end


def _check_messages(
    mapper: PydanticMapper, sid: UUID, run: Sequence[tuple[Any, ...]], session: Session
) -> tuple[Session, int, BrokenLink | None]:
    """Apply a run of message rows to ``session`` at once and compare each row's facts with
    the facts of applying them one by one. Returns the session, how many rows were
    applied (up to the first that does not decode, left to the caller), and the first
    row whose facts differ.

    The usual run is decoded and its facts compared column by column, in passes over
    the whole run (``checked_messages``, ``message_run_facts``); a run that is not
    all slim or all whole facts equal to the replayed ones -- a doctored one -- is
    compared row by row, which names the first row that differs."""
    checked = None
    if not mapper.plain_bytes_changed:
        placed = message_ids_at(sid, map(_version, run))
        checked = checked_messages(list(map(_state, run)), list(map(_stamp, run)), placed)
    events: list[MessageAdded] = []
    run_of: MessageRun
    if checked is None:
        events = _decoded_messages(mapper, sid, run)
        if not events:
            return session, 0, None
        messages = [event.message for event in events]
        tokens = [message.tokens for message in messages]
        run_of, when = BuiltMessages(messages, tokens), events[-1].timestamp
    else:
        # Its messages are built only if something reads them (a commit folds most away
        # unread); a checked message's time is its event's (checked_messages takes no other).
        tokens, run_of, when = checked.each_tokens, checked, checked.last_time
    count = len(run_of)
    before = session.counters()
    try:
        session.replay_run(run_of, run[count - 1][2], when)
    except ValueError:  # not the next versions (chain-verified rows are): one by one
        return session, 0, None
    after = session.counters()
    first, tenant, key = session.started_by, session.tenant, session.key
    if checked is not None:
        stored = fact_columns(run)
        facts = partial(
            message_run_facts, checked.roles, checked.tool_calls, checked.actors, checked.keys,
            tokens, tenant, key, before, after, first,
        )  # fmt: skip
        if stored == facts(slim=True) or stored == facts(slim=False):
            return session, count, None
        messages = checked.messages()
        events = [
            message_added(sid, row[2], message.created_at, actor, idempotency_key, message)
            for row, message, actor, idempotency_key in zip(
                run, messages, checked.actors, checked.keys, strict=True
            )
        ]
    # After each message: the counters after the run, with the three it moves counted so far.
    messages_now, pending, turns, rest = before[0], before[1], before[2], after[3:]
    for row, event, message, used in zip(run, events, messages, tokens, strict=False):
        messages_now += 1
        pending += used
        if message.role == "user":
            turns += 1
        expected = stored_facts(
            event, tenant, key, counters_of((messages_now, pending, turns, *rest))
        )
        problem = _facts_problem(sid, row, expected, first)
        if problem is not None:
            return session, count, problem
    return session, count, None


def _decoded_messages(
    mapper: PydanticMapper, sid: UUID, run: Sequence[tuple[Any, ...]]
) -> list[MessageAdded]:
    """The events of a run's rows, one by one, up to the first that does not decode into a
    ``MessageAdded`` (the one-by-one replay reports it)."""
    events: list[MessageAdded] = []
    fast = not mapper.plain_bytes_changed
    for row in run:
        event = message_added_of_row(row[4], sid, row[2], row[5]) if fast else None
        if event is None:
            try:
                event = mapper.event_of_row(sid, row[2], row[3], row[4], row[5])
            except Exception:
                break
            if type(event) is not MessageAdded:
                break
        events.append(event)
    return events


def _facts_problem(
    sid: UUID, row: tuple[Any, ...], expected: StoredFacts, first: Principal
) -> BrokenLink | None:
    """The problem with a row's stored facts, if they are not ``expected`` in the whole or
    the slim form (``first``: who started the session)."""
    facts = whole_facts(row)
    if facts == expected:
        return None
    changed = edited_facts(facts, expected, row[2], first, compact=is_compact(row[3]))
    if changed is None:
        return None
    return _broken(
        sid, row, "stored facts differ from the event",
        "facts derived from the verified events",
        f"edited fact columns: {', '.join(changed) or 'all (none stored)'}",
    )  # fmt: skip


def _check_snapshot_at(
    store: EventStoreApplication, session: Session, stored: dict[int, tuple[str, bytes]]
) -> BrokenLink | None:
    snapshot = stored.get(session.version)
    return None if snapshot is None else _check_snapshot(store, session, *snapshot)


def _check_snapshot(
    store: EventStoreApplication, session: Session, topic: str, state: bytes
) -> BrokenLink | None:
    """A stored snapshot must hold the state replayed up to its version. The same bytes as
    a snapshot of the replayed session hold it (the usual case, told without decoding
    them, and first without building the replayed buffer: ``_written_alike``); other
    bytes are decoded and their state compared."""
    if _written_alike(_mapper(store), session, state):
        return None
    if store.mapper.to_stored_event(Session.Snapshot.take(session)).state == state:
        return None
    sid, version = session.id, session.version
    try:
        decoded = _mapper(store).event_of_row(sid, version, topic, state, 0)
    except Exception as error:
        return BrokenLink(
            session_id=sid, version=version, position=None,
            reason="snapshot cannot be decoded",
            expected="a snapshot this chatledger version can read",
            found=f"{type(error).__name__}: {error}"[:300],
        )  # fmt: skip
    if not decoded.matches(session):
        return BrokenLink(
            session_id=sid, version=version, position=None,
            reason="snapshot differs from replayed events",
            expected="state replayed from the verified events",
            found="a different stored snapshot",
        )  # fmt: skip
    return None


_EMPTY_BUFFER = b'"buffer":[]'


def _written_alike(mapper: PydanticMapper, session: Session, state: bytes) -> bool:
    """Whether ``state`` holds the very bytes of a snapshot of ``session``, told without
    building its buffer's messages (most of what writing a snapshot costs; a commit
    folds most of them away unread): the mapper writes the snapshot with an empty buffer,
    and the buffer's JSON (``buffer_json``) goes between its brackets.

    Bytes that do not decode to the replayed state are never the same (the buffer's
    JSON decodes to its messages); False where this cannot tell -- the stored form
    passes through a cipher or compressor, or ``"buffer":[]`` is written more than once
    (a key of the session's own state) -- and the caller writes the snapshot whole."""
    if mapper.plain_bytes_changed:
        return False
    frame = mapper.to_stored_event(Session.Snapshot.without_buffer(session)).state
    at = frame.find(_EMPTY_BUFFER)
    if at < 0 or frame.find(_EMPTY_BUFFER, at + 1) >= 0:
        return False
    at += len(_EMPTY_BUFFER) - 2  # the empty array
    if not (state.startswith(frame[:at]) and state.endswith(frame[at + 2 :])):
        return False  # told before a message is written
    try:
        array = buffer_json(*session.buffer_parts())
    except ValueError:  # text JSON cannot hold: the snapshot written whole says so
        return False
    return len(state) == len(frame) - 2 + len(array) and state.startswith(array, at)


def _mapper(store: EventStoreApplication) -> PydanticMapper:
    mapper = store.mapper
    assert isinstance(mapper, PydanticMapper)
    return mapper


def _broken(sid: UUID, row: tuple[Any, ...], reason: str, expected: str, found: str) -> BrokenLink:
    return BrokenLink(
        session_id=sid, version=row[2], position=row[0], reason=reason, expected=expected,
        found=found[:300],
    )  # fmt: skip
