"""SQLite: the archive-carrying events' partial indexes test the event type with ``OR``.

SQLite evaluates a partial index's condition for every row inserted, and it
evaluates ``event_type IN ('Committed', ...)`` by building a temporary table
of the listed values each time the INSERT runs: about a third of the cost
of appending a message. The same condition spelled as ``event_type =
'Committed' OR ...`` is a few comparisons. The two indexes over those events
are rebuilt with it (the projector's query spells it the same way, so the
indexes still serve it). PostgreSQL keeps its indexes: it tests an ``IN``
list in place. Rebuilding reads the event table once; on a large SQLite
ledger the upgrade takes a moment.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_EVENTS = "chatledger_events"
_TYPES = ("Committed", "ArchiveMerged", "Forked", "Deleted")
_ON_POSTGRES = "tx_id <> 0"


def _rebuild(condition: str) -> None:
    op.drop_index("chatledger_events_archives", table_name=_EVENTS)
    op.create_index("chatledger_events_archives", _EVENTS, ["id"], sqlite_where=sa.text(condition))
    op.drop_index("chatledger_events_archives_log", table_name=_EVENTS)
    op.create_index(
        "chatledger_events_archives_log",
        _EVENTS,
        ["tx_id", "id"],
        sqlite_where=sa.text(f"{_ON_POSTGRES} AND {condition}"),
    )


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild("(" + " OR ".join(f"event_type = '{t}'" for t in _TYPES) + ")")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild("event_type IN ({})".format(", ".join(f"'{t}'" for t in _TYPES)))
