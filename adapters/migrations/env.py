"""Alembic's environment for chatledger: migrate on the connection the caller passes in.

``adapters.migrations.prepare_schema`` hands over a connection that is already
inside a transaction holding the database's write lock; the migrations run in
it and commit (or roll back) with it.
"""

from __future__ import annotations

from alembic import context

from chatledger.adapters.migrations import VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(connection=connection, version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
