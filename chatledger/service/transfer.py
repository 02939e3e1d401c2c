"""Portability: export a ledger as self-describing JSON lines, import one into an empty ledger.

``export`` writes a header line and one line per event, in order, with its
hash (the file's shape is ``service.export_file``). The first event sealed with
a data key also carries that key (``data_key``: its material, or none once
destroyed -- the content is erased), so an export reads in the ledger it is
imported into, and one made after an erasure holds neither the key nor the
content.

``import_`` checks the ledger is empty before reading the file, reads every
line strictly, re-verifies every chain, replays every event
(``integrity.replay_row``: decodable, applicable, identities that derive;
sealed content opened with the file's keys) and checks that each data key
belongs to the sessions sealed with it -- any fault is ``InvalidInput`` naming
the line, and nothing is recorded. Then it takes over the keys and records
all the events in one transaction. The keys go first, each written only if
the key store does not hold it already (and refused if it holds another key
of that id or owner): an import killed at any step records no event, and
retried it imports -- the keys a killed run wrote are found again, not
written twice. Nothing it says (errors, logs) shows key material.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from itertools import pairwise
from typing import Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError

from chatledger.adapters.chain import first_breaks
from chatledger.adapters.codec import is_compact
from chatledger.adapters.database import shares_one_connection
from chatledger.adapters.key_store import SqlKeyStore
from chatledger.adapters.keyring import KeyRing
from chatledger.adapters.mapper import JSONBytesTranscoder, PydanticMapper
from chatledger.adapters.sealing import key_id_of
from chatledger.adapters.store import EventStoreApplication
from chatledger.domain.eventsourced import SessionEvent
from chatledger.domain.failures import ChatLedgerError, InvalidInput
from chatledger.domain.ports import KeyOwner, KeyRecord, KeyScope, KeyStore
from chatledger.domain.session import Session
from chatledger.domain.values import Principal
from chatledger.projections.facts import StoredFacts, slim_facts
from chatledger.results import ImportResult
from chatledger.service import export_file
from chatledger.service.export_file import NOTHING, ExportedEvent, ExportedKey
from chatledger.service.integrity import sessions_of
from chatledger.service.replay_check import Forged, Unreplayable, replay_row
from chatledger.service.views import ledger_event

ImportProgress = Callable[[str, int, int], None]
"""Called by ``import_`` with (phase, done, total): phases ``read``, ``verify``, ``write``."""
_PROGRESS_EVERY = 1000
SCOPES: tuple[KeyScope, KeyScope] = ("session", "user")


def export(store: EventStoreApplication, principal: Principal, key: str | None) -> Iterator[str]:
    yield export_file.header(store.event_recorder.chain_key is not None)
    keys = store.keyring.store
    decode = _keyless().event_of_row  # an event's encrypted content stays so in the file
    written: set[str] = set()
    sessions: Iterable[Any] = sessions_of(store, principal, key)
    if shares_one_connection(store.event_recorder.engine):
        sessions = list(sessions)  # (decoding reads data keys: not inside the stream's read)
    for tenant, skey, rows in sessions:
        for row in rows:
            stored = export_file.payload(row.state)
            key_id = key_id_of(stored["stored"]) if "stored" in stored else None
            try:
                event = decode(
                    row.originator_id, row.version, row.topic, row.state, row.timestamp_us
                )
            except ChatLedgerError:  # the store failed (a data key could not be read)
                raise
            except Exception:  # a row this version cannot read: its stored form says all
                event = None
            shown = (
                ledger_event(skey or "", event).as_json()
                if isinstance(event, SessionEvent)
                else export_file.unreadable(skey, row.version, row.topic, row.timestamp_us)
            )
            record: dict[str, Any] = {
                "position": row.position,
                "session_id": row.originator_id.hex,
                "tenant": tenant,
                **shown,
                "topic": row.topic,
                "timestamp_us": row.timestamp_us,
                **stored,
                "hash": row.hash.hex(),
            }
            if key_id is not None and key_id not in written:
                written.add(key_id)
                record["data_key"] = _key_line(keys, key_id)
            yield json.dumps(record, ensure_ascii=False)


def _keyless() -> PydanticMapper:
    """A mapper that opens no sealed content: what a line shows of an encrypted event is its
    erased form (the content is in the stored payload, sealed, beside its data key)."""
    return PydanticMapper(transcoder=JSONBytesTranscoder())


def _key_line(keys: KeyStore, key_id: str) -> dict[str, Any]:
    """A data key as an export carries it (material in base64; none once destroyed)."""
    import base64

    found = keys.records(key_ids=[key_id])
    material = keys.get(key_id)
    line: dict[str, Any] = {"key_id": key_id}
    if found:
        line.update(found[0].model_dump(mode="json", exclude={"key_id"}))
    line["material"] = None if material is None else base64.b64encode(material).decode()
    return line


def import_(
    store: EventStoreApplication,
    lines: Iterable[str],
    progress: ImportProgress | None = None,
    *,
    allow_missing_keys: bool = False,
) -> ImportResult:
    recorder = store.event_recorder
    if recorder.max_notification_id() is not None:  # before reading a line of the file
        raise InvalidInput(
            "Import needs an empty ledger, and this one holds events; import into a new "
            "database (an import interrupted after it wrote its events is complete: "
            f"`chatledger verify` checks it). {NOTHING.capitalize()}."
        )
    report = progress or _no_progress
    exported = export_file.read(lines)
    events = exported.events
    report("read", len(events), len(events))
    _check_positions(events)
    events.sort(key=lambda e: (e.row.originator_id.bytes, e.row.version))
    _check_chains(events, recorder.chain_key)
    keys = exported.keys
    key_store = store.keyring.store
    used = _keys_used(events)
    brought = {k for k, key in keys.items() if key.record is not None}  # (what can be restored)
    missing = {k: line for k, line in used.items() if k not in brought and not _held(key_store, k)}
    if missing and not allow_missing_keys:
        key_id, line = min(missing.items(), key=lambda item: item[1])
        raise InvalidInput(
            f"Line {line} is sealed with data key {key_id!r}, which the file does not bring "
            f"(an export without its key lines?) and this ledger's key store does not hold: "
            f"its content ({len(missing)} key(s) in all) would read as erased. Import the "
            "whole export, or pass allow_missing_keys=True (CLI: --allow-missing-keys) to "
            f"import that content unreadable. {NOTHING.capitalize()}."
        )
    # Content opens in the check as it will once imported: with the keys taken over.
    opened = {k: key.material for k, key in keys.items() if k in brought} | dict.fromkeys(missing)
    with store.keyring.overlay(opened):
        facts, owners = _replay(store, events, report)
    _check_key_owners(keys, owners)
    _restore_keys(key_store, keys.values())
    events.sort(key=lambda e: e.row.position)
    try:
        recorder.insert_exported([e.row for e in events], [facts[e.line] for e in events])
    except IntegrityError:
        raise InvalidInput(
            f"Import needs an empty ledger, and another writer recorded events meanwhile; "
            f"{NOTHING}."
        ) from None
    report("write", len(events), len(events))
    return _result(events, keys, missing, key_store)


def _no_progress(phase: str, done: int, total: int) -> None:
    return None


# ------------------------------------------------------------------ checks
def _check_positions(events: list[ExportedEvent]) -> None:
    """Positions are distinct (so a position names one line)."""
    seen: dict[int, int] = {}
    for event in events:
        first = seen.setdefault(event.row.position, event.line)
        if first != event.line:
            raise InvalidInput(
                f"Line {event.line} has position {event.row.position}, as line {first} has; "
                f"positions are distinct. {NOTHING.capitalize()}."
            )


def _check_chains(events: list[ExportedEvent], chain_key: bytes | None) -> None:
    """Every session's chain holds, and its events follow each other in the log (``events``
    in (session, version) order)."""
    line_at = {e.row.position: e.line for e in events}
    broken = next(first_breaks((e.row for e in events), chain_key), None)
    if broken is not None:
        where = line_at.get(broken.position or 0)
        raise InvalidInput(
            f"Line {where}: Broken hash chain in session {broken.session_id} at version "
            f"{broken.version} ({broken.reason}). If the source used a chain_key, configure "
            f"the same one here. {NOTHING.capitalize()}."
        )
    for before, after in pairwise(events):
        a, b = before.row, after.row
        if a.originator_id == b.originator_id and a.position > b.position:
            raise InvalidInput(
                f"Line {after.line}: event {b.version} of session {b.originator_id} has a "
                f"position ({b.position}) before its predecessor's ({a.position}); a "
                f"session's events follow each other in the log. {NOTHING.capitalize()}."
            )


def _keys_used(events: list[ExportedEvent]) -> dict[str, int]:
    """The data keys events are sealed with: each with the first line sealed with it."""
    used: dict[str, int] = {}
    for event in events:
        if event.key_id is not None:
            line = used.setdefault(event.key_id, event.line)
            used[event.key_id] = min(line, event.line)
    return used


def _held(key_store: KeyStore, key_id: str) -> bool:
    """Whether the key store knows the key (held, or destroyed: its content reads erased)."""
    return bool(key_store.records(key_ids=[key_id]))


Owners = dict[str, set[tuple[KeyOwner, KeyOwner]]]
"""By data key: whose key seals each row sealed with it, with ``key_scope`` ``session`` and
with ``user`` (``KeyRing.owner_of`` the session as that row left it)."""


def _replay(
    store: EventStoreApplication, events: list[ExportedEvent], report: ImportProgress
) -> tuple[dict[int, StoredFacts], Owners]:
    """Every event replayed (it must rebuild, or it could not load): their stored facts (by
    line), and each session's owner. A line that shows its event (format 4) must show the
    event its stored payload holds, as it reads without keys."""
    keyless = _keyless()
    rings = [KeyRing(store.keyring.store, scope=scope, seal=False, ttl=0.0) for scope in SCOPES]
    facts: dict[int, StoredFacts] = {}
    owners: Owners = {}
    session: Session | None = None
    for done, event in enumerate(events, start=1):
        row = event.row
        if row.version == 1:  # events are in (session, version) order: a new session
            session = None
        try:
            session, full = replay_row(store, row, session)
            # Stored as the append stores them: slim after a session's first row.
            facts[event.line] = slim_facts(
                full, row.version, session.started_by, compact=is_compact(row.topic)
            )
        except Forged as error:
            raise InvalidInput(
                f"Line {event.line}: session {row.originator_id} {error}; the file was altered "
                "(without a chain_key anyone can recompute the hashes). "
                f"{NOTHING.capitalize()}."
            ) from None
        except Unreplayable as error:
            raise InvalidInput(
                f"Line {event.line}: event {row.version} of session {row.originator_id} cannot "
                f"be replayed ({error}); {NOTHING}."
            ) from None
        except Exception as error:  # whatever else a crafted event makes of the facts
            raise InvalidInput(
                f"Line {event.line}: event {row.version} of session {row.originator_id} cannot "
                f"be recorded ({type(error).__name__}); {NOTHING}."
            ) from None
        if event.key_id is not None:
            by_session, by_user = (ring.owner_of(session) for ring in rings)
            owners.setdefault(event.key_id, set()).add((by_session, by_user))
        if event.shown is not None:
            _check_shown(keyless, event, session.key)
        if done % _PROGRESS_EVERY == 0:
            report("verify", done, len(events))
    report("verify", len(events), len(events))
    return facts, owners


def _check_shown(keyless: PydanticMapper, event: ExportedEvent, key: str) -> None:
    """The event a format 4 line shows is the one its stored payload holds (its encrypted
    content erased): a reader of the file sees what the chain covers."""
    row = event.row
    try:
        stored = keyless.event_of_row(
            row.originator_id, row.version, row.topic, row.state, row.timestamp_us
        )
        shown = ledger_event(key, stored).as_json()
    except Exception as error:
        raise InvalidInput(
            f"Line {event.line}: event {row.version} of session {row.originator_id} cannot be "
            f"shown ({type(error).__name__}); {NOTHING}."
        ) from None
    if shown != event.shown:
        raise InvalidInput(
            f"Line {event.line} shows an event other than the one its stored payload holds "
            f"(the file was edited?); {NOTHING}."
        )


def _check_key_owners(keys: dict[str, ExportedKey], owners: Owners) -> None:
    """Each data key the file brings belongs to whom the rows sealed with it say: a session's
    key to that session (its incarnation), a user's key to the user who started it, in its
    tenant -- and no two keys to one session."""
    session_keys: dict[UUID | None, str] = {}
    for key in keys.values():
        record = key.record
        if record is None:
            continue
        for by_session, by_user in owners.get(key.key_id, ()):
            owner = by_session if record.scope == "session" else by_user
            found = KeyOwner(
                scope=record.scope, tenant=record.tenant, user_id=record.user_id,
                session_id=record.session_id,
            )  # fmt: skip
            if found != owner:
                raise InvalidInput(
                    f"Line {key.line} brings data key {key.key_id!r} of another owner than the "
                    f"events it seals (account {owner.tenant!r}); {NOTHING}."
                )
        if record.scope == "session":
            other = session_keys.setdefault(record.session_id, key.key_id)
            if other != key.key_id:
                raise InvalidInput(
                    f"Line {key.line} brings a second data key of session "
                    f"{record.session_id} ({other!r} first); a session has one. "
                    f"{NOTHING.capitalize()}."
                )


# -------------------------------------------------------------------- keys
def _restore_keys(key_store: KeyStore, keys: Iterable[ExportedKey]) -> None:
    """Take over the file's keys: each one the store does not hold yet (so that a run killed
    after some of them is retried), refusing where it holds another of that id or owner."""
    limit = key_store.key_id_chars if isinstance(key_store, SqlKeyStore) else None
    for key in keys:
        record = key.record
        if record is None:
            continue  # known only by its material: it opens content in the check, no more
        if limit is not None and len(key.key_id) > limit:
            raise InvalidInput(
                f"Line {key.line} brings data key {key.key_id!r}, longer than this ledger's key "
                f"table holds ({limit} characters); {NOTHING}."
            )
        held = key_store.records(key_ids=[key.key_id])
        if held:
            if held[0] != record or key_store.get(key.key_id) != key.material:
                raise InvalidInput(
                    f"Line {key.line} brings data key {key.key_id!r}, and this ledger's key "
                    f"store holds another key under that id; {NOTHING}."
                )
            continue  # an earlier, interrupted run of this import wrote it
        if _owner_has_another(key_store, record):
            raise InvalidInput(
                f"Line {key.line} brings data key {key.key_id!r}, and this ledger's key store "
                f"holds another key of the same owner; {NOTHING}."
            )
        key_store.restore(record, key.material)


def _owner_has_another(key_store: KeyStore, record: KeyRecord) -> bool:
    if record.scope == "session":
        return bool(key_store.records(session_id=record.session_id))
    if record.destroyed_at is not None:
        return False  # a user may have many destroyed keys
    found = key_store.records(tenant=record.tenant, user_id=record.user_id)
    return any(r.scope == "user" and r.destroyed_at is None for r in found)


def _result(
    events: list[ExportedEvent],
    keys: dict[str, ExportedKey],
    missing: dict[str, int],
    key_store: KeyStore,
) -> ImportResult:
    """What was imported, and which sessions' content reads as erased: destroyed at the
    source (or in this key store), or with keys neither the file nor the store holds."""
    by_key: dict[str, set[UUID]] = {}
    for event in events:
        if event.key_id is not None:
            by_key.setdefault(event.key_id, set()).add(event.row.originator_id)
    unreadable = {sid for k in missing for sid in by_key.get(k, ())}
    erased = {
        sid
        for k, sids in by_key.items()
        if k not in missing
        and (keys[k].material is None if k in keys and keys[k].record else key_store.get(k) is None)
        for sid in sids
    }
    return ImportResult(
        sessions=len({e.row.originator_id for e in events}),
        events=len(events),
        erased_sessions=len(erased - unreadable),
        unreadable_sessions=len(unreadable),
    )
