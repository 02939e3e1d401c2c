"""Versioned schema migrations of the event store (Alembic), applied in place.

The store's schema has a revision, kept by Alembic in the table
``chatledger_schema_version``. ``prepare_schema`` brings a database to
``SCHEMA_HEAD`` inside the caller's transaction (which holds the write lock,
so processes opening one database together queue up): a new database gets
the current tables and is stamped at the head; a database written by 0.1.0
(the event tables, no version table) is stamped at the baseline ``0001`` and
upgraded; an older revision is upgraded; a revision this code does not know
(written by a newer chatledger) is refused. Without DDL rights
(``create_tables=False``) ``check_schema`` refuses anything but the head and
says to run ``chatledger migrate``.

Alembic is imported only when a database actually needs stamping or
upgrading: opening a current database costs one query. The read-model tables
are not migrated: a changed read model is rebuilt (see ``adapters.projector``).
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Connection, MetaData, inspect, text

from chatledger.domain.failures import StoreUnavailable

SCHEMA_HEAD = "0008"
"""The revision this code writes and reads (the newest file in ``versions/``)."""
BASELINE = "0001"
"""The revision of a 0.1.0 database, which has no version table."""
VERSION_TABLE = "chatledger_schema_version"
LOCATION = Path(__file__).resolve().parent


def schema_revision(connection: Connection) -> str | None:
    """The database's schema revision; ``None`` if it has none recorded."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    value = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
    return None if value is None else str(value)


def prepare_schema(connection: Connection, metadata: MetaData, events_table: str) -> str:
    """Create or upgrade the store's tables to ``SCHEMA_HEAD``; returns what was done."""
    revision = schema_revision(connection)
    if revision == SCHEMA_HEAD:
        return "current"
    if revision is None and not inspect(connection).has_table(events_table):
        metadata.create_all(connection, checkfirst=True)
        run_alembic(connection, "stamp", SCHEMA_HEAD)
        return "created"
    known = _known_revisions()
    if revision is not None and revision not in known:
        raise _newer(revision)
    if revision is None:
        run_alembic(connection, "stamp", BASELINE)
    run_alembic(connection, "upgrade", SCHEMA_HEAD)
    return "upgraded"


def check_schema(connection: Connection, events_table: str) -> None:
    """Raise unless the database is at ``SCHEMA_HEAD`` (for openers without DDL rights)."""
    revision = schema_revision(connection)
    if revision == SCHEMA_HEAD:
        return
    if revision is not None and revision not in _known_revisions():
        raise _newer(revision)
    found = revision or f"{BASELINE} (0.1.0)"
    raise StoreUnavailable(
        f"The ledger's schema is at revision {found}; this chatledger needs {SCHEMA_HEAD}. "
        "Upgrade it in place once with `chatledger migrate --url ...` (or open it with "
        "create_tables=True), then retry."
    )


def _newer(revision: str) -> StoreUnavailable:
    return StoreUnavailable(
        f"The ledger's schema is at revision {revision}, which this chatledger does not know: "
        f"a newer version wrote it (this one knows up to {SCHEMA_HEAD}). Upgrade chatledger; "
        "nothing was changed."
    )


def _known_revisions() -> set[str]:
    return {path.name.split("_", 1)[0] for path in (LOCATION / "versions").glob("[0-9]*.py")}


def run_alembic(connection: Connection, action: str, revision: str) -> None:
    """Run ``alembic <action> <revision>`` on ``connection`` (inside its transaction)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(LOCATION))
    config.attributes["connection"] = connection
    if action == "stamp":
        command.stamp(config, revision)
    else:
        command.upgrade(config, revision)
