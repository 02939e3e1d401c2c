"""Archive stores: where archive bodies (the full messages of a commit) can live.

``InMemoryArchiveStore`` is for tests and embedding; it can be switched
unavailable to rehearse failures. ``SqlArchiveStore`` keeps bodies in a table
of any SQLAlchemy database. Both raise ``StoreUnavailable`` when they cannot
store, which makes the commit fail cleanly (``CommitFailed``, state unchanged).
"""

from __future__ import annotations

import threading

from sqlalchemy import Column, Engine, MetaData, String, Table, Text, select
from sqlalchemy.exc import SQLAlchemyError

from chatledger.adapters.database import create_store_engine
from chatledger.domain.failures import StoreUnavailable
from chatledger.domain.ports import ArchiveBody


class InMemoryArchiveStore:
    """A dict of archive bodies; ``available = False`` makes every call fail."""

    def __init__(self) -> None:
        self.available = True
        self._bodies: dict[str, ArchiveBody] = {}
        self._lock = threading.Lock()

    def put(self, body: ArchiveBody) -> None:
        if not self.available:
            raise StoreUnavailable("archive store unavailable")
        with self._lock:
            self._bodies[body.archive_id] = body

    def get(self, archive_id: str) -> ArchiveBody | None:
        if not self.available:
            raise StoreUnavailable("archive store unavailable")
        with self._lock:
            return self._bodies.get(archive_id)

    def __len__(self) -> int:
        return len(self._bodies)


_archive_metadata = MetaData()
archives_table = Table(
    "chatledger_archive_bodies",
    _archive_metadata,
    Column("archive_id", String(64), primary_key=True),
    Column("session_id", String(64), nullable=False, index=True),
    Column("body", Text, nullable=False),
)


class SqlArchiveStore:
    """Archive bodies as JSON rows in a SQL table (its own database, or the ledger's)."""

    def __init__(self, url_or_engine: str | Engine) -> None:
        self.engine = (
            create_store_engine(url_or_engine) if isinstance(url_or_engine, str) else url_or_engine
        )
        try:
            with self.engine.begin() as connection:
                _archive_metadata.create_all(connection, checkfirst=True)
        except SQLAlchemyError as error:
            raise StoreUnavailable(f"archive store unavailable: {error}") from error

    def put(self, body: ArchiveBody) -> None:
        row = {
            "archive_id": body.archive_id,
            "session_id": body.session_id,
            "body": body.model_dump_json(),
        }
        try:
            with self.engine.begin() as connection:
                connection.execute(archives_table.insert(), row)
        except SQLAlchemyError as error:
            raise StoreUnavailable(f"archive store unavailable: {error}") from error

    def get(self, archive_id: str) -> ArchiveBody | None:
        query = select(archives_table.c.body).where(archives_table.c.archive_id == archive_id)
        try:
            with self.engine.connect() as connection:
                body = connection.execute(query).scalar()
        except SQLAlchemyError as error:
            raise StoreUnavailable(f"archive store unavailable: {error}") from error
        return None if body is None else ArchiveBody.model_validate_json(body)

    def close(self) -> None:
        self.engine.dispose()
