"""The archive-carrying events' index also finds deletions.

A ``Deleted`` event leaves its session no live archives, so the archive
history read model must see it; the partial index it reads spans through now
includes that event type.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _index(types: tuple[str, ...]) -> None:
    condition = sa.text("event_type IN ({})".format(", ".join(f"'{t}'" for t in types)))
    op.create_index(
        "chatledger_events_archives",
        "chatledger_events",
        ["id"],
        sqlite_where=condition,
        postgresql_where=condition,
    )


def upgrade() -> None:
    op.drop_index("chatledger_events_archives", table_name="chatledger_events")
    _index(("Committed", "ArchiveMerged", "Forked", "Deleted"))


def downgrade() -> None:
    op.drop_index("chatledger_events_archives", table_name="chatledger_events")
    _index(("Committed", "ArchiveMerged", "Forked"))
