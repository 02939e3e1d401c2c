"""The commit-ordered log: each event row records its writing transaction (``tx_id``).

Until this revision PostgreSQL appends took ``LOCK TABLE ... IN EXCLUSIVE
MODE`` and numbered events max + 1, so positions followed commit order. Now
appends run concurrently, positions come from the sequence
``chatledger_events_position``, and the log order is ``(tx_id, id)``
(``chatledger.adapters.schema.LogCursor``). Every existing row gets
``tx_id = 0``: they were all committed before this upgrade, in id order, so
``(0, id)`` keeps exactly their order and puts them before anything appended
later. The sequence starts after the highest existing position. New rows get
their transaction from the column default (``pg_current_xact_id()``; 0 on
SQLite, where positions alone stay the log order and the new indexes index
nothing). Read models keep their positions: the projector reads a stored
position ``p`` as the cursor ``(0, p)``, the same place in the log.

Stop writers and projectors of the earlier version first: they would number
events max + 1 and follow the log by position alone. Building the indexes
blocks appends on a large PostgreSQL table for a while.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_EVENTS = "chatledger_events"
_SEQUENCE = "chatledger_events_position"
_ON_POSTGRES = "tx_id <> 0"
_FIRST = "originator_version = 1"
_CARRIES_ARCHIVES = "event_type IN ('Committed', 'ArchiveMerged', 'Forked', 'Deleted')"


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    # A constant default first: PostgreSQL adds such a column without rewriting
    # the table, and every existing row reads 0.
    op.add_column(
        _EVENTS, sa.Column("tx_id", sa.BigInteger, nullable=False, server_default=sa.text("0"))
    )
    if postgres:
        op.execute(
            f"ALTER TABLE {_EVENTS} ALTER COLUMN tx_id "
            "SET DEFAULT (pg_current_xact_id()::text::bigint)"
        )
        op.execute(f"CREATE SEQUENCE {_SEQUENCE}")
        op.execute(
            f"SELECT setval('{_SEQUENCE}', m) FROM (SELECT MAX(id) AS m FROM {_EVENTS}) s "
            "WHERE m IS NOT NULL"
        )
    op.create_index(
        "chatledger_events_log", _EVENTS, ["tx_id", "id"], sqlite_where=sa.text(_ON_POSTGRES)
    )
    op.create_index(
        "chatledger_events_created_log",
        _EVENTS,
        ["tx_id", "id"],
        sqlite_where=sa.text(f"{_ON_POSTGRES} AND {_FIRST}"),
        postgresql_where=sa.text(_FIRST),
    )
    op.create_index(
        "chatledger_events_archives_log",
        _EVENTS,
        ["tx_id", "id"],
        sqlite_where=sa.text(f"{_ON_POSTGRES} AND {_CARRIES_ARCHIVES}"),
        postgresql_where=sa.text(_CARRIES_ARCHIVES),
    )


def downgrade() -> None:
    for name in ("chatledger_events_archives_log", "chatledger_events_created_log"):
        op.drop_index(name, table_name=_EVENTS)
    op.drop_index("chatledger_events_log", table_name=_EVENTS)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP SEQUENCE {_SEQUENCE}")
    with op.batch_alter_table(_EVENTS) as batch:
        batch.drop_column("tx_id")
