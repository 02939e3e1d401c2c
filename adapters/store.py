"""The event store application: the library's ``Application`` on chatledger's recorders.

Builds the recorders on the engine the composition root chose, encodes
session events through chatledger's mapper (refusing any that could not be
kept), records a session's pending events in one transaction, snapshots, and
loads a session from its newest usable snapshot and the events after it.

Loading reads a session's rows straight from the driver and replays each run
of consecutive messages in one step (``codec.trusted_messages``,
``Session.replay_messages``): messages were validated before they were
written and their hash chain vouches for the bytes, so a long live buffer is
not validated again event by event. Every other event is decoded and
validated as before; ``trusted=False`` validates everything (the tests hold
both paths equal). Content is sealed with the session's data key from the
``KeyRing`` (unless encryption is off), in events and snapshots alike.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from itertools import groupby
from typing import Any, TypeVar
from uuid import UUID

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.domain import EventSourcingError
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    DatabaseError,
    InfrastructureFactory,
    MapperDeserialisationError,
    ProcessRecorder,
    StoredEvent,
    TrackingRecorder,
)
from eventsourcing.utils import Environment
from pydantic_core import PydanticSerializationError
from sqlalchemy import Engine

from chatledger.adapters.codec import stored_run, without_cyclic_gc
from chatledger.adapters.keyring import KeyRing
from chatledger.adapters.mapper import JSONBytesTranscoder, PydanticMapper, TimedStoredEvent
from chatledger.adapters.recorders import (
    MESSAGE_TOPIC,
    SqlEventRecorder,
    SqlRecorder,
    SqlSnapshotRecorder,
    StreamColumns,
    StreamRow,
)
from chatledger.adapters.schema import events_table, snapshots_table
from chatledger.adapters.sealing import PARTS, open_compact_message, row_aad
from chatledger.domain.events import Forked, MessageAdded
from chatledger.domain.eventsourced import SessionCreationEvent, SessionEvent
from chatledger.domain.failures import ChatLedgerError, InvalidInput, StoreUnavailable
from chatledger.domain.identity import message_ids_at
from chatledger.domain.limits import DEFAULT_MAX_EVENT_BYTES
from chatledger.domain.session import Session
from chatledger.domain.timestamps import from_micros
from chatledger.projections.facts import stored_facts

logger = logging.getLogger("chatledger.store")
_R = TypeVar("_R", bound=SqlRecorder)


class SqlInfrastructureFactory(InfrastructureFactory[TrackingRecorder]):
    """Builds chatledger's recorders on one engine (chosen by the composition root)."""

    def __init__(self, env: Environment, *, engine: Engine, chain_key: bytes | None) -> None:
        super().__init__(env)
        self.engine = engine
        self.chain_key = chain_key
        self._recorders: list[SqlRecorder] = []

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        if purpose == "snapshots":
            return self._keep(SqlSnapshotRecorder(self.engine, snapshots_table))
        return self._keep(SqlEventRecorder(self.engine, events_table, chain_key=self.chain_key))

    def application_recorder(self) -> ApplicationRecorder:
        return self._keep(SqlEventRecorder(self.engine, events_table, chain_key=self.chain_key))

    def _keep(self, recorder: _R) -> _R:
        self._recorders.append(recorder)
        return recorder

    def tracking_recorder(
        self, tracking_recorder_class: type[TrackingRecorder] | None = None
    ) -> TrackingRecorder:
        raise NotImplementedError("Tracking recorders are not part of the event store.")

    def process_recorder(self) -> ProcessRecorder:
        raise NotImplementedError("Process recorders are not part of the event store.")

    def is_snapshotting_enabled(self) -> bool:
        return True

    def close(self) -> None:
        for recorder in self._recorders:
            recorder.close()
        self.engine.dispose()


class EventStoreApplication(Application[UUID]):
    """The library's application object, wired to chatledger's recorders and mapper.

    Snapshots are taken from the in-memory aggregate that was just saved (the
    library's default re-reads it from the database in a second transaction).
    """

    name = "chatledger"

    def __init__(
        self,
        engine: Engine,
        *,
        snapshot_interval: int,
        keyring: KeyRing,
        chain_key: bytes | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        self._engine = engine
        self._chain_key = chain_key
        self.keyring = keyring
        self.snapshot_interval = snapshot_interval
        self.max_event_bytes = max_event_bytes
        super().__init__(env={"AGGREGATE_CACHE_MAXSIZE": "", "IS_SNAPSHOTTING_ENABLED": "y"})

    def construct_factory(self, env: Environment) -> InfrastructureFactory[TrackingRecorder]:
        return SqlInfrastructureFactory(env, engine=self._engine, chain_key=self._chain_key)

    def construct_mapper(self) -> PydanticMapper:
        mapper = PydanticMapper(transcoder=JSONBytesTranscoder())
        mapper.ciphers = self.keyring.cipher
        self.event_mapper = mapper  # the mapper, as what it is (it seals content given a key)
        return mapper

    def construct_recorder(self) -> SqlEventRecorder:
        recorder = super().construct_recorder()
        assert isinstance(recorder, SqlEventRecorder)
        self.event_recorder = recorder  # the recorder, as what it is
        return recorder

    def record(self, session: Session) -> list[int]:
        """Append the session's pending events in one transaction; return their positions.

        On failure the pending events are gone and the aggregate object is ahead
        of the store: the caller must discard it.
        """
        pending = session.collect_changes()
        if not pending:
            return []
        sealing = (
            self._sealing(session, [event for event, _ in pending]) if self.keyring.seal else None
        )
        tenant, key, first, encode = (
            session.tenant, session.key, session.started_by, self._encode
        )  # fmt: skip
        stored = []
        for event, counters in pending:
            row = encode(event, sealing)
            row.__dict__["facts"] = stored_facts(event, tenant, key, counters, first=first)
            stored.append(row)
        positions = self.event_recorder.insert_events(stored)
        if self.snapshots is not None and session.should_snapshot(self.snapshot_interval):
            self._snapshot(session)
        return positions

    def record_together(self, sessions: Sequence[Session]) -> list[list[int]]:
        """Append the pending events of several sessions in ONE transaction (all or none);
        return each session's positions. Used when a write must change several streams
        atomically (a session and the shared state scopes it updates)."""
        stored = []
        counts = []
        for session in sessions:
            pending = session.collect_changes()
            counts.append(len(pending))
            sealing = self._sealing(session, [event for event, _ in pending])
            for event, counters in pending:
                row = self._encode(event, sealing)
                row.__dict__["facts"] = stored_facts(
                    event, session.tenant, session.key, counters, first=session.started_by
                )
                stored.append(row)
        positions = self.event_recorder.insert_events(stored) if stored else []
        result, start = [], 0
        for session, count in zip(sessions, counts, strict=True):
            result.append(positions[start : start + count])
            start += count
            snapshots = count and self.snapshots is not None
            if snapshots and session.should_snapshot(self.snapshot_interval):
                self._snapshot(session)
        return result

    def _sealing(
        self, session: Session, events: Sequence[SessionEvent]
    ) -> tuple[str, AESGCM] | None:
        """The key that seals these events of ``session`` (None: nothing to seal, or
        encryption is off); ``SessionErased`` if the session's own key was destroyed."""
        if not events or not self.keyring.seal:
            return None
        if type(events[0]) not in PARTS and not any(type(e) in PARTS for e in events):
            return None
        new = isinstance(events[0], SessionCreationEvent)
        return self.keyring.sealing_key(session, events[0].timestamp, new=new)

    def _encode(
        self, event: SessionEvent, sealing: tuple[str, AESGCM] | None = None
    ) -> StoredEvent:
        """The stored form of ``event``, refused (``InvalidInput``) unless it can be kept.

        Input is checked where it enters (``chatledger.domain.limits``); this is
        the last line: the payload must serialise, stay under ``max_event_bytes``,
        and -- for every kind of event but the hot ``MessageAdded``, whose fields
        the input checks cover completely -- decode back into an equal event.
        """
        try:
            row = self.event_mapper.to_stored_event(event, sealing)
        except (PydanticSerializationError, ValueError, TypeError) as error:
            raise InvalidInput(
                f"{type(event).__name__} cannot be serialised ({error}); nothing was recorded."
            ) from None
        size = len(row.state)
        if size > self.max_event_bytes:
            raise InvalidInput(
                f"{type(event).__name__} would take {size} bytes; the limit is "
                f"{self.max_event_bytes} (setting max_event_bytes). Nothing was recorded."
            )
        if type(event) is not MessageAdded:
            try:
                equal = self.mapper.to_domain_event(row) == event
            except MapperDeserialisationError:
                equal = False
            if not equal:
                raise InvalidInput(
                    f"{type(event).__name__} would not read back as recorded (a value JSON "
                    "cannot hold exactly); nothing was recorded."
                )
        return row

    @property
    def snapshot_recorder(self) -> SqlSnapshotRecorder:
        recorder = self.snapshots.recorder if self.snapshots is not None else None
        assert isinstance(recorder, SqlSnapshotRecorder)
        return recorder

    def load(
        self, session_id: UUID, version: int | None = None, *, trusted: bool = True
    ) -> Session:
        """A session from its newest snapshot (at or before ``version``) and later events.

        A snapshot is trusted only as a shortcut: its own version must still be
        in the stream (one from beyond the last event would make every later
        write conflict), it must decode and the events recording its archives
        must be there; otherwise the session is replayed from its first event
        and the snapshot is reported in the log. Raises the library's
        ``AggregateNotFoundError`` for an unknown id.
        """
        # The rows read and the objects built from them all live on: without this the
        # collector would walk them again and again while they are made, and once more
        # right after (it is switched back on once they are freed or kept).
        with without_cyclic_gc():
            return self._load(session_id, version, trusted)

    def _load(self, session_id: UUID, version: int | None, trusted: bool) -> Session:
        session: Session | None = None
        start = 0
        newest = self.snapshot_recorder.select_events(session_id, lte=version, desc=True, limit=1)
        if newest:
            snapshot = newest[0]
            try:
                decoded: Any = self.mapper.to_domain_event(snapshot)  # a Session.Snapshot
                session = self._rebuild(session_id, decoded)
                start = snapshot.originator_version - 1  # read its own event too: is it there?
            except Exception as error:  # any decoding problem: replay instead
                logger.warning(
                    "Snapshot of session %s at version %d cannot be decoded (%s); replaying "
                    "its events instead. verify() reports it.",
                    session_id, snapshot.originator_version, error,
                )  # fmt: skip
                session = None
        rows = self._columns(session_id, gt=start or None, lte=version)
        if session is not None:
            if not rows.versions or rows.versions[0] != session.version:
                logger.warning(
                    "Snapshot of session %s at version %d is past its last event; replaying "
                    "its events instead. verify() reports it.",
                    session_id, session.version,
                )  # fmt: skip
                session = None
                rows = self._columns(session_id, lte=version)
            else:
                rows = rows.after_first()
        loaded = self.replay_columns(session_id, session, rows, trusted=trusted)
        if loaded is None:
            raise AggregateNotFoundError(f"No session with id {session_id}")
        return loaded

    def _columns(
        self, session_id: UUID, *, gt: int | None = None, lte: int | None = None
    ) -> StreamColumns:
        """A session's rows after ``gt`` up to ``lte``, as columns (read row by row, with
        their versions, where the stretch has a gap: the replay reports it)."""
        found = self.event_recorder.stream_columns(session_id, gt=gt, lte=lte)
        if found is None:
            return StreamColumns.of_rows(self.event_recorder.stream(session_id, gt=gt, lte=lte))
        return found

    def fast_forward(self, session: Session) -> None:
        """Apply the events recorded after ``session``'s version (by other writers)."""
        rows = self.event_recorder.stream(session.id, gt=session.version)
        if rows:
            self.replay_columns(session.id, session, StreamColumns.of_rows(rows))

    def _rebuild(self, session_id: UUID, snapshot: Any) -> Session:
        """The session of a decoded snapshot, its archives read from the events recording them."""
        recorded: dict[int, Any] = {}
        versions = snapshot.archive_versions()
        if versions:
            for row in self.event_recorder.stream(session_id, versions=versions):
                recorded[row[0]] = self._decode(session_id, row)
        rebuilt: Session = snapshot.rebuild(recorded)
        if rebuilt.archive_refs is None and rebuilt.archives:
            rebuilt.archive_refs = self._find_refs(session_id, rebuilt)
        return rebuilt

    def _find_refs(self, session_id: UUID, session: Session) -> list[tuple[int, int]] | None:
        """Where the live archives of a session rebuilt from an old snapshot (which embedded
        them) were recorded, so that its next snapshot references them; None if not found."""
        where: dict[str, tuple[int, int]] = {}
        rows = self.event_recorder.stream(
            session_id, lte=session.version, types=("Committed", "ArchiveMerged", "Forked")
        )
        for row in rows:
            event = self._decode(session_id, row)
            archives = event.archives if isinstance(event, Forked) else (event.archive,)
            for index, archive in enumerate(archives):
                where[archive.archive_id] = (row[0], index)
        found = [where.get(archive.archive_id) for archive in session.archives]
        return None if None in found else found  # type: ignore[return-value]

    def _decode(self, session_id: UUID, row: StreamRow) -> Any:
        version, topic, state, timestamp_us = row
        return self.mapper.to_domain_event(
            TimedStoredEvent(
                originator_id=session_id,
                originator_version=version,
                topic=topic,
                state=bytes(state),
                timestamp_us=timestamp_us,
            )
        )

    def replay_columns(
        self,
        session_id: UUID,
        session: Session | None,
        rows: StreamColumns,
        *,
        trusted: bool = True,
    ) -> Session | None:
        """``session`` (None before the first event) after the stored ``rows``, in order.

        With ``trusted`` each run of consecutive messages is read and applied in
        one step; anything that run cannot take (a gap, a payload that is not
        JSON) goes through the validated path, which reports it.
        """
        try:
            return self._replay_columns(session_id, session, rows, trusted)
        except EventSourcingError as error:  # a row this version cannot decode or apply
            raise StoreUnavailable(
                f"Session {session_id} cannot be loaded: {error}. Its stored events were "
                "altered or written by a newer chatledger; verify() says which."
            ) from error

    def _replay_columns(
        self, session_id: UUID, session: Session | None, rows: StreamColumns, trusted: bool
    ) -> Session | None:
        versions, topics, states, stamps = rows
        end = 0
        # Runs of rows of one topic, found in C code (a live buffer is one long run).
        for topic, run in groupby(topics):
            start, end = end, end + len(list(run))
            if (
                trusted
                and topic is None
                and end - start > 1
                and self._replay_messages(session_id, session, rows, start, end)
            ):
                continue
            for at in range(start, end):
                row = (versions[at], topics[at] or MESSAGE_TOPIC, states[at], stamps[at])
                session = self._decode(session_id, row).mutate(session)
        return session

    def _replay_messages(
        self, session_id: UUID, session: Session | None, rows: StreamColumns, start: int, end: int
    ) -> bool:
        """Apply rows ``start`` to ``end`` (messages) at once, if they continue ``session``
        without gaps."""
        first, last = rows.versions[start], rows.versions[end - 1]
        if session is None or first != session.version + 1 or last != first + end - start - 1:
            return False
        aad = row_aad(session_id, MESSAGE_TOPIC)
        opener = functools.partial(_open_message, ciphers=self.keyring.cipher, aad=aad)
        stamps = rows.stamps[start:end]
        with without_cyclic_gc():
            try:
                placed = message_ids_at(session_id, range(first, last + 1))
                messages = stored_run(rows.states[start:end], stamps, placed, opener)
            except (ValueError, KeyError, TypeError, AttributeError):  # let the mapper say why
                return False
            session.replay_run(messages, last, from_micros(stamps[-1]))
        return True

    def snapshot_rows(self, session_id: UUID) -> Sequence[StoredEvent]:
        """A session's stored snapshots, undecoded, oldest first (for verification)."""
        return self.snapshot_recorder.select_events(session_id)

    def _snapshot(self, session: Session) -> None:
        assert self.snapshots is not None
        # A snapshot only speeds loading; the events are already safe without it.
        try:
            snapshot = Session.Snapshot.take(session)
            sealing = None
            if self.keyring.seal:
                sealing = self.keyring.sealing_key(session, session.updated_at, new=False)
            row = self.event_mapper.to_stored_event(snapshot, sealing)
            self.snapshot_recorder.insert_events([row])
        except (DatabaseError, ChatLedgerError) as error:
            logger.warning("snapshot of session %s at v%d not stored: %s", session.id,
                           session.version, error)  # fmt: skip
            return
        session.rebuilt_from = (session.version, session.state_items)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("snapshot of session %s at v%d", session.id, session.version)


def _open_message(payload: dict[str, Any], sealed: Any, *, ciphers: Any, aad: bytes) -> None:
    open_compact_message(payload, sealed, ciphers, aad)
