"""Stored facts for usage imported from an earlier system.

A ``UsageImported`` event stands for many tool calls: ``tool_calls`` and
``tool_failures`` say how many (NULL for every other event, whose single tool
call, if any, its ``tool_status`` describes).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("chatledger_events", sa.Column("tool_calls", sa.BigInteger, nullable=True))
    op.add_column("chatledger_events", sa.Column("tool_failures", sa.BigInteger, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chatledger_events") as batch:
        batch.drop_column("tool_failures")
        batch.drop_column("tool_calls")
