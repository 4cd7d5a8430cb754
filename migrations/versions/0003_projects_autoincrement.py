"""projects: ids never reused on SQLite (AUTOINCREMENT)

A deleted project's rows stay in ClickHouse until their retention ends, keyed by its id;
SQLite without AUTOINCREMENT hands the highest id out again, and the new project showed
the old one's logs, events and storage figures as its own. PostgreSQL's sequence never
reuses an id, so nothing changes there. Ids deleted before this migration and above the
highest one left can still be handed out once: SQLite kept no record of them.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 19:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    # Rebuilt as a copy with the same rows and ids (foreign keys are off during migrations,
    # migrations/env.py); the copy's explicit ids set SQLite's sequence to the highest.
    with op.batch_alter_table(
        "projects", recreate="always", table_kwargs={"sqlite_autoincrement": True}
    ):
        pass


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    with op.batch_alter_table(
        "projects", recreate="always", table_kwargs={"sqlite_autoincrement": False}
    ):
        pass
