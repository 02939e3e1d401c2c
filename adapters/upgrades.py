"""In-place upgrades of databases written by earlier chatledger versions.

Until versioned migrations take over, ``create_tables`` (event store) and
the projector's ``prepare`` (read-model database) call these every time a
database is opened with table creation on. Each looks at the catalogue,
does nothing once applied, and runs in the caller's transaction under the
caller's DDL lock (``BEGIN IMMEDIATE`` on SQLite, an advisory lock on
PostgreSQL), so processes opening an old database together upgrade it once.
Nothing else in chatledger knows that older layouts existed; a migration
tool can take each function over as one revision.

**Commit-ordered log** (the change that added ``tx_id``). Before it,
PostgreSQL appends took ``LOCK TABLE ... IN EXCLUSIVE MODE`` and numbered
events max + 1, so positions followed commit order. Now appends run
concurrently, positions come from a sequence, and each row records its
writing transaction; the log order is ``(tx_id, id)``
(``chatledger.adapters.eventstore.LogCursor``). Every existing row gets
``tx_id = 0``: they were all committed before the upgrade (``ALTER TABLE``
waits for every append in flight), in id order, so ``(0, id)`` keeps
exactly their order and puts them before anything appended later. The
sequence starts after the highest existing position. Read models keep their
positions: a tracking position ``p`` becomes the cursor ``(0, p)``, the same
place in the log. Stop writers of the earlier version before upgrading a
PostgreSQL database: they would still number events max + 1 without
recording their transaction.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection, Index, Table, inspect, text
from sqlalchemy import Sequence as DbSequence

_RETIRED_POSTGRES_INDEXES = ("chatledger_events_created", "chatledger_events_archives")
"""Partial indexes by position alone, which PostgreSQL replaced by (tx_id, id) ones."""


def add_commit_order_to_events(
    connection: Connection,
    events: Table,
    sequence: DbSequence,
    log_indexes: Iterable[Index],
) -> bool:
    """Give an events table written before ``tx_id`` existed its commit-order column.

    Returns whether anything was done. PostgreSQL: the column (constant
    default first, which adds it without rewriting the table, then the
    writing transaction as the default), the log-order indexes instead of
    the position-only ones, and the position sequence moved past every
    stored position. SQLite: the column, 0 for every row, as new rows get.
    """
    columns = {c["name"] for c in inspect(connection).get_columns(events.name)}
    if "tx_id" in columns:
        return False
    name = events.name
    connection.execute(text(f"ALTER TABLE {name} ADD COLUMN tx_id BIGINT NOT NULL DEFAULT 0"))
    if connection.dialect.name != "postgresql":
        return True
    writer = "(pg_current_xact_id()::text::bigint)"
    connection.execute(text(f"ALTER TABLE {name} ALTER COLUMN tx_id SET DEFAULT {writer}"))
    for index_name in _RETIRED_POSTGRES_INDEXES:
        connection.execute(text(f"DROP INDEX IF EXISTS {index_name}"))
    for index in log_indexes:
        index.create(connection, checkfirst=True)
    sequence.create(connection, checkfirst=True)
    move_sequence_past(connection, events, sequence)
    return True


def move_sequence_past(connection: Connection, events: Table, sequence: DbSequence) -> None:
    """Make the position sequence hand out only positions above every stored one (never back)."""
    connection.execute(
        text(
            f"SELECT setval('{sequence.name}', m) FROM (SELECT MAX(id) AS m FROM {events.name}) s "
            "WHERE m >= (SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END "
            f"FROM {sequence.name})"
        )
    )


def add_commit_order_to_tracking(connection: Connection, tracking: Table, stage: Table) -> None:
    """Give read-model tracking written before ``tx_id`` existed its cursor column.

    A stored position ``p`` becomes the cursor ``(0, p)``: the same place in
    the log (see the module docstring). The staging table is always empty
    between batches, so an old one is simply dropped and made again.
    """
    inspector = inspect(connection)
    if inspector.has_table(tracking.name):
        columns = {c["name"] for c in inspector.get_columns(tracking.name)}
        if "tx_id" not in columns:
            connection.execute(
                text(f"ALTER TABLE {tracking.name} ADD COLUMN tx_id BIGINT NOT NULL DEFAULT 0")
            )
    if inspector.has_table(stage.name):
        columns = {c["name"] for c in inspector.get_columns(stage.name)}
        if "tx_id" not in columns:
            stage.drop(connection)
