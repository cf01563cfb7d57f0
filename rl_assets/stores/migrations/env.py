"""Alembic's entry point: runs the revisions on the connection :func:`rl_assets.stores.migrations.upgrade` holds."""

from alembic import context

from rl_assets.stores.migrations import VERSION_TABLE

context.configure(connection=context.config.attributes["connection"], version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
