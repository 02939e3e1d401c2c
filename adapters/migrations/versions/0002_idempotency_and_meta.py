"""Idempotency keys on events, and a table of facts about the ledger itself.

``chatledger_events.idempotency_key`` holds the caller's key of the write an
event belongs to (on its first event, NULL otherwise), unique per session
through a partial index, so a retry after an unknown outcome finds the write
that landed. ``chatledger_meta`` keeps name/value facts about the ledger, such
as the check value of the chain key the ledger was created with.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_KEYED = sa.text("idempotency_key IS NOT NULL")


def upgrade() -> None:
    op.add_column("chatledger_events", sa.Column("idempotency_key", sa.Text, nullable=True))
    op.create_index(
        "chatledger_events_idempotency",
        "chatledger_events",
        ["originator_id", "idempotency_key"],
        unique=True,
        sqlite_where=_KEYED,
        postgresql_where=_KEYED,
    )
    op.create_table(
        "chatledger_meta",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("chatledger_meta")
    op.drop_index("chatledger_events_idempotency", table_name="chatledger_events")
    with op.batch_alter_table("chatledger_events") as batch:
        batch.drop_column("idempotency_key")
