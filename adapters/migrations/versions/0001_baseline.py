"""Baseline: the event store as chatledger 0.1.0 created it.

A 0.1.0 database has these tables but no version table; it is stamped at this
revision and upgraded from here. Creating them (an upgrade from nothing) gives
the 0.1.0 schema, which the tests compare with a 0.1.0 database.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TEXT_FACTS = ("event_type", "tenant", "session_key", "actor_account", "actor_user")
_MORE_TEXT_FACTS = ("actor_agent", "actor_role", "trace_id")
_COUNTERS = ("message_count", "pending_tokens", "turn_count", "commit_count", "archive_count")
_CARRIES_ARCHIVES = "event_type IN ('Committed', 'ArchiveMerged', 'Forked')"


def upgrade() -> None:
    op.create_table(
        "chatledger_events",
        sa.Column("id", _ID, primary_key=True, autoincrement=False),
        sa.Column("originator_id", sa.Uuid(as_uuid=True), nullable=False),
        sa.Column("originator_version", sa.BigInteger, nullable=False),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("state", sa.LargeBinary, nullable=False),
        sa.Column("timestamp_us", sa.BigInteger, nullable=False),
        sa.Column("hash", sa.LargeBinary, nullable=False),
        *(sa.Column(name, sa.Text, nullable=False) for name in _TEXT_FACTS + _MORE_TEXT_FACTS),
        *(sa.Column(name, sa.BigInteger, nullable=False) for name in _COUNTERS),
        sa.Column("last_commit_us", sa.BigInteger, nullable=True),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("tool_name", sa.Text, nullable=True),
        sa.Column("tool_status", sa.Text, nullable=True),
        sa.Column("prompt_tokens", sa.BigInteger, nullable=False),
        sa.Column("completion_tokens", sa.BigInteger, nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
    )
    op.create_index(
        "chatledger_events_stream",
        "chatledger_events",
        ["originator_id", "originator_version"],
        unique=True,
    )
    first = sa.text("originator_version = 1")
    op.create_index(
        "chatledger_events_sessions",
        "chatledger_events",
        ["tenant", "session_key"],
        sqlite_where=first,
        postgresql_where=first,
    )
    op.create_index(
        "chatledger_events_created",
        "chatledger_events",
        ["id"],
        sqlite_where=first,
        postgresql_where=first,
    )
    archives = sa.text(_CARRIES_ARCHIVES)
    op.create_index(
        "chatledger_events_archives",
        "chatledger_events",
        ["id"],
        sqlite_where=archives,
        postgresql_where=archives,
    )
    op.create_table(
        "chatledger_snapshots",
        sa.Column("originator_id", sa.Uuid(as_uuid=True), primary_key=True),
        sa.Column("originator_version", sa.BigInteger, primary_key=True),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("state", sa.LargeBinary, nullable=False),
        sa.Column("timestamp_us", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("chatledger_snapshots")
    op.drop_table("chatledger_events")
