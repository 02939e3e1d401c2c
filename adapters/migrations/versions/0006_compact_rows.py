"""Compact stored rows (format 2), and snapshots that reference their archives.

Events written from this revision on are stored under their short name
(``MessageAdded``) with compact JSON (``chatledger.adapters.codec``) and an
empty ``summary`` fact, which is derived from the event when read. Rows
written before keep their form -- the hash chain covers their bytes -- and
are read as they are; a chatledger before this revision cannot read the new
ones, hence the revision.

Snapshots now reference a session's live archives (the events that recorded
them) instead of embedding them. The snapshots stored before embedded every
live archive, so together they grew with the square of the commits: all but
each session's newest are deleted here (a snapshot only speeds loading; time
travel to an older version replays from the start instead). The newest is
still read, and the next snapshot of its session references its archives.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "DELETE FROM chatledger_snapshots WHERE originator_version < ("
        "SELECT MAX(newest.originator_version) FROM chatledger_snapshots AS newest "
        "WHERE newest.originator_id = chatledger_snapshots.originator_id)"
    )


def downgrade() -> None:
    raise NotImplementedError(
        "Revision 0006 cannot be undone: rows written since are in the compact stored form, "
        "which earlier chatledger versions cannot read (nor their exports). Restore a backup "
        "taken before the upgrade instead."
    )
