"""Portability: export a ledger as self-describing JSON lines, import one into an empty ledger.

``export`` writes a header line and one line per event, in order, with its
hash; payloads as JSON objects where re-encoding gives the exact stored bytes.
The first event sealed with a data key also carries that key (``data_key``:
its material, or none once destroyed -- the content is erased), so an export
reads in the ledger it is imported into, and one made after an erasure holds
neither the key nor the content. ``import_`` checks the
ledger is empty before reading the file, re-verifies every chain, replays every
event (``integrity.replay_row``: decodable, applicable, identities that derive;
sealed content opened with the file's keys), then takes over the keys and
records all the events in one transaction -- or nothing.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Iterator
from itertools import pairwise
from typing import Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError
from pydantic import ValidationError

from chatledger.adapters.chain import ChainRow, first_breaks
from chatledger.adapters.codec import is_compact
from chatledger.adapters.sealing import key_id_of
from chatledger.adapters.store import EventStoreApplication
from chatledger.domain.failures import InvalidInput
from chatledger.domain.ports import KeyRecord, KeyStore
from chatledger.domain.session import Session
from chatledger.domain.timestamps import from_micros
from chatledger.domain.values import Principal
from chatledger.projections.facts import StoredFacts, slim_facts
from chatledger.results import ImportResult
from chatledger.service.integrity import sessions_of
from chatledger.service.replay_check import Forged, Unreplayable, replay_row

EXPORT_FORMAT = "chatledger/export"
EXPORT_FORMAT_VERSION = 3
"""3: events carry the data keys (``data_key``); 2: payloads as JSON objects (``event``)
where exact; 1: payloads as text (``state``)."""
READABLE_FORMAT_VERSIONS = (1, 2, 3)


def export(store: EventStoreApplication, principal: Principal, key: str | None) -> Iterator[str]:
    chain_key = store.event_recorder.chain_key
    yield json.dumps(
        {
            "format": EXPORT_FORMAT,
            "format_version": EXPORT_FORMAT_VERSION,
            "keyed_chain": chain_key is not None,
        }
    )
    keys = store.keyring.store
    written: set[str] = set()
    for tenant, skey, rows in sessions_of(store, principal, key):
        for row in rows:
            payload = _payload(row.state)
            key_id = key_id_of(payload["event"]) if "event" in payload else None
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
                **payload,
                "hash": row.hash.hex(),
            }
            if key_id is not None and key_id not in written:
                written.add(key_id)
                record["data_key"] = _key_line(keys, key_id)
            yield json.dumps(record, ensure_ascii=False)


def _key_line(keys: KeyStore, key_id: str) -> dict[str, Any]:
    """A data key as an export carries it (material in base64; none once destroyed)."""
    found = keys.records(key_ids=[key_id])
    material = keys.get(key_id)
    line: dict[str, Any] = {"key_id": key_id}
    if found:
        line.update(found[0].model_dump(mode="json", exclude={"key_id"}))
    line["material"] = None if material is None else base64.b64encode(material).decode()
    return line


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


Keys = dict[str, tuple[KeyRecord | None, bytes | None]]
"""The data keys of an export by id: what is known of each, and its material (if any)."""


def _parse(lines: Iterable[str], keys: Keys) -> list[ChainRow]:
    """The events of an export (its data keys go into ``keys``)."""
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
        if "data_key" in record:
            keys.update([_parse_key(record["data_key"], number)])
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


def _parse_key(line: Any, number: int) -> tuple[str, tuple[KeyRecord | None, bytes | None]]:
    try:
        key_id = str(line["key_id"])
        material = line.get("material")
        known = {k: v for k, v in line.items() if k != "material"}
        record = KeyRecord.model_validate(known) if "scope" in known else None
        return key_id, (record, None if material is None else base64.b64decode(material))
    except (KeyError, TypeError, ValueError, ValidationError) as error:
        raise InvalidInput(
            f"Line {number} is not a valid data key ({error!r}); nothing was imported."
        ) from None


def import_(
    store: EventStoreApplication, lines: Iterable[str], progress: ImportProgress | None = None
) -> ImportResult:
    recorder = store.event_recorder
    if recorder.max_notification_id() is not None:  # before reading a line of the file
        raise InvalidInput(
            "Import needs an empty ledger, and this one holds events; import into a new "
            "database. Nothing was imported."
        )
    report = progress or _no_progress
    keys: Keys = {}
    rows = _parse(lines, keys)
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
    ring = store.keyring
    with ring.overlay({key_id: material for key_id, (_, material) in keys.items()}):
        facts = _replay(store, rows, report)
    rows.sort(key=lambda r: r.position)
    try:
        for record, material in keys.values():
            if record is not None:
                ring.store.restore(record, material)
        recorder.insert_exported(rows, [facts[r.position] for r in rows])
    except IntegrityError as error:
        raise InvalidInput(
            f"Import needs an empty ledger ({error}); nothing was imported."
        ) from None
    report("write", len(rows), len(rows))
    return ImportResult(sessions=len({r.originator_id for r in rows}), events=len(rows))


def _replay(
    store: EventStoreApplication, rows: list[ChainRow], report: ImportProgress
) -> dict[int, StoredFacts]:
    """Every event replayed (it must rebuild, or it could not load): their stored facts."""
    facts: dict[int, StoredFacts] = {}
    session: Session | None = None
    for done, row in enumerate(rows, start=1):
        if row.version == 1:  # rows are in (session, version) order: a new session
            session = None
        try:
            session, full = replay_row(store, row, session)
        except Forged as error:
            raise InvalidInput(
                f"Session {row.originator_id} {error}; the file was altered (without a "
                "chain_key anyone can recompute the hashes). Nothing was imported."
            ) from None
        except Unreplayable as error:
            raise InvalidInput(
                f"Event {row.version} of session {row.originator_id} cannot be replayed "
                f"({error}); nothing was imported."
            ) from None
        # Stored as the append stores them: slim after a session's first row.
        facts[row.position] = slim_facts(
            full, row.version, session.started_by, compact=is_compact(row.topic)
        )
        if done % _PROGRESS_EVERY == 0:
            report("verify", done, len(rows))
    report("verify", len(rows), len(rows))
    return facts


ImportProgress = Callable[[str, int, int], None]
"""Called by ``import_`` with (phase, done, total): phases ``read``, ``verify``, ``write``."""
_PROGRESS_EVERY = 1000


def _no_progress(phase: str, done: int, total: int) -> None:
    return None
