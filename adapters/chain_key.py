"""The ledger's chain key check: a ledger opened with another key (or none) is refused.

With a wrong key every chain would look tampered and new events would carry
hashes that do not verify, so the first open records a check value of the
key in ``chatledger_meta`` and every later open compares against it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.exc import SQLAlchemyError

from chatledger.adapters.chain import GENESIS, as_bytes, as_uuid, chain_hash
from chatledger.adapters.schema import events_table, meta_table
from chatledger.domain.failures import InvalidSettings

CHAIN_KEY_CHECK = "chain_key_check"
_CHECK_MESSAGE = b"chatledger chain key check"
_SAMPLED_SESSIONS = 20


def chain_key_check_value(key: bytes | None) -> str:
    """What ``chatledger_meta`` records of a chain key: reveals nothing of the key, but a
    different key (or none) gives a different value."""
    if not key:
        return "sha256"
    return "hmac-sha256:" + hmac.new(key, _CHECK_MESSAGE, hashlib.sha256).hexdigest()[:32]


def check_chain_key(engine: Engine, key: bytes | None, *, record: bool) -> None:
    """Raise ``InvalidSettings`` if ``key`` is not the key the ledger's chains were written with.

    The ledger records a check value of its key with its first open; a ledger
    written before that (0.1.0) is checked against the hashes of the first
    events of up to 20 sessions, which chain onto nothing but the key. With
    ``record`` the check value is stored if it was missing.
    """
    expected = chain_key_check_value(key)
    t = meta_table
    with engine.connect() as connection:
        stored = connection.execute(select(t.c.value).where(t.c.name == CHAIN_KEY_CHECK)).scalar()
        if stored is None:
            firsts = connection.execute(
                select(
                    events_table.c.id, events_table.c.originator_id, events_table.c.topic,
                    events_table.c.state, events_table.c.timestamp_us, events_table.c.hash,
                )
                .where(events_table.c.originator_version == 1)
                .order_by(events_table.c.id)
                .limit(_SAMPLED_SESSIONS)
            ).all()  # fmt: skip
            if firsts and not any(_opens_chain(row, key) for row in firsts):
                stored = "a different key"
    if stored is not None and stored != expected:
        raise InvalidSettings(
            "The chain key does not match the one this ledger's hash chains were written "
            f"{'with' if stored.startswith('hmac') else 'without (no chain_key)'}: this opener "
            f"uses {'a key' if key else 'none'}. Set chain_key / CHATLEDGER_CHAIN_KEY to the "
            "ledger's own key. (With a wrong key every chain would look tampered and new "
            "events would carry hashes that do not verify.)"
        )
    if record and stored is None:
        with contextlib.suppress(SQLAlchemyError), engine.begin() as connection:
            connection.execute(t.insert().values(name=CHAIN_KEY_CHECK, value=expected))


def _opens_chain(row: Any, key: bytes | None) -> bool:
    position, oid, topic, state, timestamp_us, digest = row
    try:
        recomputed = chain_hash(
            GENESIS,
            position=int(position),
            originator_id=as_uuid(oid),
            version=1,
            topic=str(topic),
            timestamp_us=int(timestamp_us),
            state=as_bytes(state),
            key=key,
        )
    except (TypeError, ValueError):
        return False
    return hmac.compare_digest(recomputed, as_bytes(digest))
