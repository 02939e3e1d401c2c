"""Key stores: where the data keys of session content live (the ``KeyStore`` port).

``SqlKeyStore`` (the default) keeps them in the table ``chatledger_keys`` of the
ledger's own database: one row per key with its owner (a session, or a user
of an account), its 32 bytes of material and, once destroyed, the moment of
destruction (the material is then gone from the row). ``purge`` then makes
the old bytes unrecoverable from the database files as far as the database
allows: SQLite runs with ``secure_delete`` (freed space is zeroed) and the
write-ahead log is checkpointed and truncated; PostgreSQL rewrites the table
into a new file (``TRUNCATE`` and re-insert, in one transaction), so the dead
row versions that still held the key go with the old file.
What neither can reach -- PostgreSQL's WAL archive, replicas, backups -- is
in docs/erasure.md (use a key management service behind the port for that).
``InMemoryKeyStore`` is for tests and embedding.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any
from uuid import UUID

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import Connection, Engine, String, Table, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import SQLAlchemyError

from chatledger.adapters.database import driver_message
from chatledger.domain.failures import InvalidInput, SessionErased, StoreUnavailable
from chatledger.domain.ports import DataKey, KeyOwner, KeyRecord
from chatledger.domain.timestamps import from_micros, to_micros


def new_key_id() -> str:
    """A fresh key id: 96 random bits, hex."""
    return "k" + os.urandom(12).hex()


def _owned(owner: KeyOwner) -> tuple[Any, ...]:
    if owner.scope == "session":
        if owner.session_id is None:
            raise InvalidInput("A session's key needs the session id.")
        return ("session", owner.session_id)
    return ("user", owner.tenant, owner.user_id)


def _erased_session(owner: KeyOwner) -> SessionErased:
    return SessionErased(
        f"Session {owner.session_id} was erased: its key is destroyed and it takes no more "
        "writes. Start a new session under another key. Nothing was recorded."
    )


class InMemoryKeyStore:
    """Keys in a dict (for tests and embedding); ``purge`` has nothing to do."""

    def __init__(self) -> None:
        self._records: dict[str, KeyRecord] = {}
        self._material: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def key_for(self, owner: KeyOwner, at: datetime) -> DataKey:
        wanted = _owned(owner)
        with self._lock:
            for record in self._records.values():
                if _owned(_owner_of(record)) != wanted:
                    continue
                if record.destroyed_at is None:
                    return DataKey(key_id=record.key_id, material=self._material[record.key_id])
                if owner.scope == "session":
                    raise _erased_session(owner)
            key_id = new_key_id()
            self._records[key_id] = KeyRecord(
                key_id=key_id,
                scope=owner.scope,
                tenant=owner.tenant,
                user_id=owner.user_id,
                session_id=owner.session_id if owner.scope == "session" else None,
                created_at=at,
            )
            self._material[key_id] = AESGCM.generate_key(bit_length=256)
            return DataKey(key_id=key_id, material=self._material[key_id])

    def get(self, key_id: str) -> bytes | None:
        with self._lock:
            return self._material.get(key_id)

    def records(
        self,
        *,
        key_ids: Sequence[str] | None = None,
        tenant: str | None = None,
        user_id: str | None = None,
        session_id: UUID | None = None,
    ) -> list[KeyRecord]:
        with self._lock:
            found = list(self._records.values())
        return [
            r
            for r in found
            if (key_ids is None or r.key_id in key_ids)
            and (tenant is None or r.tenant == tenant)
            and (user_id is None or r.user_id == user_id)
            and (session_id is None or r.session_id == session_id)
        ]

    def destroy(self, key_ids: Sequence[str], at: datetime) -> None:
        with self._lock:
            for key_id in key_ids:
                record = self._records.get(key_id)
                if record is not None and record.destroyed_at is None:
                    self._records[key_id] = record.model_copy(update={"destroyed_at": at})
                    del self._material[key_id]

    def restore(self, record: KeyRecord, material: bytes | None) -> None:
        with self._lock:
            self._records[record.key_id] = record
            if material is not None:
                self._material[record.key_id] = material

    def purge(self) -> bool:
        return True


def _owner_of(record: KeyRecord) -> KeyOwner:
    return KeyOwner(
        scope=record.scope,
        tenant=record.tenant,
        user_id=record.user_id,
        session_id=record.session_id,
    )


class SqlKeyStore:
    """Keys in the table ``chatledger_keys`` of the ledger's database (see the module doc)."""

    def __init__(self, engine: Engine, table: Table) -> None:
        self.engine = engine
        self.table = table
        self.sqlite = engine.dialect.name == "sqlite"
        kind = table.c.key_id.type
        # The longest key id the table holds (an imported one may be longer than ours).
        self.key_id_chars: int | None = kind.length if isinstance(kind, String) else None

    def key_for(self, owner: KeyOwner, at: datetime) -> DataKey:
        found = self._live(owner)
        if found is None:
            t = self.table
            key_id = new_key_id()
            row = {
                "key_id": key_id,
                "scope": owner.scope,
                "tenant": owner.tenant,
                "user_id": owner.user_id,
                "session_id": owner.session_id if owner.scope == "session" else None,
                "material": AESGCM.generate_key(bit_length=256),
                "created_at_us": to_micros(at),
            }
            # Another process may make the owner's key at the same moment: the unique
            # indexes let exactly one row in; everyone then reads that one.
            insert = sqlite_insert if self.sqlite else postgresql_insert
            statement = insert(t).values(**row).on_conflict_do_nothing()
            with self._errors("make a data key"), self._write() as connection:
                connection.execute(statement)
            found = self._live(owner)
            if found is None:
                raise StoreUnavailable("A data key was made but cannot be read back; retry.")
        key_id, material = found
        if material is None:
            raise _erased_session(owner)
        return DataKey(key_id=key_id, material=bytes(material))

    def _live(self, owner: KeyOwner) -> tuple[str, bytes | None] | None:
        t = self.table
        query = select(t.c.key_id, t.c.material)
        if owner.scope == "session":
            query = query.where(t.c.scope == "session", t.c.session_id == owner.session_id)
        else:
            query = query.where(
                t.c.scope == "user",
                t.c.tenant == owner.tenant,
                t.c.user_id == owner.user_id,
                t.c.destroyed_at_us.is_(None),
            )
        with self._errors("read a data key"), self.engine.connect() as connection:
            row = connection.execute(query).first()
        return None if row is None else (str(row[0]), row[1])

    def get(self, key_id: str) -> bytes | None:
        t = self.table
        query = select(t.c.material).where(t.c.key_id == key_id)
        with self._errors("read a data key"), self.engine.connect() as connection:
            material = connection.execute(query).scalar()
        return None if material is None else bytes(material)

    def records(
        self,
        *,
        key_ids: Sequence[str] | None = None,
        tenant: str | None = None,
        user_id: str | None = None,
        session_id: UUID | None = None,
    ) -> list[KeyRecord]:
        t = self.table
        query = select(
            t.c.key_id, t.c.scope, t.c.tenant, t.c.user_id, t.c.session_id,
            t.c.created_at_us, t.c.destroyed_at_us,
        ).order_by(t.c.created_at_us, t.c.key_id)  # fmt: skip
        if key_ids is not None:
            query = query.where(t.c.key_id.in_(list(key_ids)))
        if tenant is not None:
            query = query.where(t.c.tenant == tenant)
        if user_id is not None:
            query = query.where(t.c.user_id == user_id)
        if session_id is not None:
            query = query.where(t.c.session_id == session_id)
        with self._errors("read the key records"), self.engine.connect() as connection:
            rows = connection.execute(query).all()
        return [
            KeyRecord(
                key_id=key_id,
                scope=scope,
                tenant=tenant_,
                user_id=user,
                session_id=sid,
                created_at=from_micros(int(created)),
                destroyed_at=None if destroyed is None else from_micros(int(destroyed)),
            )
            for key_id, scope, tenant_, user, sid, created, destroyed in rows
        ]

    def destroy(self, key_ids: Sequence[str], at: datetime) -> None:
        if not key_ids:
            return
        t = self.table
        statement = (
            update(t)
            .where(t.c.key_id.in_(list(key_ids)), t.c.destroyed_at_us.is_(None))
            .values(material=None, destroyed_at_us=to_micros(at))
        )
        with self._errors("destroy data keys"), self._write() as connection:
            connection.execute(statement)

    def restore(self, record: KeyRecord, material: bytes | None) -> None:
        row = {
            "key_id": record.key_id,
            "scope": record.scope,
            "tenant": record.tenant,
            "user_id": record.user_id,
            "session_id": record.session_id,
            "material": material,
            "created_at_us": to_micros(record.created_at),
            "destroyed_at_us": None
            if record.destroyed_at is None
            else to_micros(record.destroyed_at),
        }
        with self._errors("restore a data key"), self._write() as connection:
            connection.execute(self.table.insert(), row)

    def purge(self) -> bool:
        """SQLite: checkpoint the WAL into the (securely deleting) file and truncate it
        (``False`` if a reader kept it from finishing within the busy timeout).

        PostgreSQL: rewrite the key table into a new file, so the dead row versions that
        still hold destroyed keys go with the old one. ``VACUUM FULL`` would keep any
        version an open transaction of the database may still see; ``TRUNCATE`` (under
        an exclusive lock, the rows put back in the same transaction) drops the old file
        whatever other transactions hold.
        """
        name = self.table.name
        with self._errors("purge destroyed keys from the database files"):
            if self.sqlite:
                with self.engine.connect() as connection:
                    row = connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").first()
                return row is None or int(row[0]) == 0  # (busy, log frames, checkpointed)
            with self.engine.begin() as connection:
                connection.exec_driver_sql(f"LOCK TABLE {name} IN ACCESS EXCLUSIVE MODE")
                connection.exec_driver_sql(
                    f"CREATE TEMPORARY TABLE {name}_kept ON COMMIT DROP AS SELECT * FROM {name}"
                )
                connection.exec_driver_sql(f"TRUNCATE {name}")
                connection.exec_driver_sql(f"INSERT INTO {name} SELECT * FROM {name}_kept")
            return True

    # ------------------------------------------------------------ plumbing
    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A write transaction (SQLite: taking the write lock at once; its connections
        zero what they free, see ``adapters.database``)."""
        with self.engine.connect() as plain:
            connection = plain.execution_options(sqlite_begin="IMMEDIATE")
            with connection.begin():
                yield connection

    @staticmethod
    @contextmanager
    def _errors(action: str) -> Iterator[None]:
        """Driver errors of a key store call, as ``StoreUnavailable`` saying what the database
        said and no more: never a statement's values or a row's (key material)."""
        try:
            yield
        except SQLAlchemyError as error:
            raise StoreUnavailable(f"Cannot {action}: {driver_message(error)}") from None
