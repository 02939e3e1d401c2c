"""The key table: data keys that session content is encrypted with (erasure by crypto-shredding).

``chatledger_keys`` holds one row per data key -- its owner (a session, or a
user of an account), its material, and once destroyed the moment it was
(the material is then NULL). Events written before this revision keep their
content in the clear and stay exactly as they were; events written after it
are sealed (``chatledger.adapters.sealing``).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chatledger_keys",
        sa.Column("key_id", sa.String(64), primary_key=True),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("tenant", sa.Text, nullable=False),
        sa.Column("user_id", sa.Text, nullable=False),
        sa.Column("session_id", sa.Uuid(as_uuid=True), nullable=True),
        sa.Column("material", sa.LargeBinary, nullable=True),
        sa.Column("created_at_us", sa.BigInteger, nullable=False),
        sa.Column("destroyed_at_us", sa.BigInteger, nullable=True),
    )
    op.create_index(
        "chatledger_keys_session",
        "chatledger_keys",
        ["session_id"],
        unique=True,
        sqlite_where=sa.text("scope = 'session'"),
        postgresql_where=sa.text("scope = 'session'"),
    )
    op.create_index(
        "chatledger_keys_user",
        "chatledger_keys",
        ["tenant", "user_id"],
        unique=True,
        sqlite_where=sa.text("scope = 'user' AND destroyed_at_us IS NULL"),
        postgresql_where=sa.text("scope = 'user' AND destroyed_at_us IS NULL"),
    )
    op.create_index("chatledger_keys_owner", "chatledger_keys", ["tenant", "user_id"])


def downgrade() -> None:
    op.drop_table("chatledger_keys")
