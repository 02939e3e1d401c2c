"""A partial index on each session's events that change archives, by version.

Snapshots stop listing where each live archive was recorded (that list made a
session's snapshots grow with the square of its commits); loading a session
from a snapshot folds the session's ``Committed``, ``ArchiveMerged``,
``Forked`` and ``Deleted`` events instead, which this index finds without
reading the session's messages. Building it reads the event table once; on a
large ledger the upgrade takes a moment.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_EVENTS = "chatledger_events"
_INDEX = "chatledger_events_session_archives"
_TYPES = ("Committed", "ArchiveMerged", "Forked", "Deleted")


def upgrade() -> None:
    op.create_index(
        _INDEX,
        _EVENTS,
        ["originator_id", "originator_version"],
        sqlite_where=sa.text("(" + " OR ".join(f"event_type = '{t}'" for t in _TYPES) + ")"),
        postgresql_where=sa.text("event_type IN ({})".format(", ".join(f"'{t}'" for t in _TYPES))),
    )


def downgrade() -> None:
    op.drop_index(_INDEX, table_name=_EVENTS)
