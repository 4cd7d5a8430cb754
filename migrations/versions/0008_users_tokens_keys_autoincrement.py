"""users, api_tokens, project_keys: ids never reused on SQLite (AUTOINCREMENT)

The API names users, tokens and keys by id: a script holding "user 8" (to make them an
admin, or to take them out of a project) acted on the next person invited once user 8
was deleted, as SQLite without AUTOINCREMENT hands the highest id out again; a token or
key id likewise named another token or key. PostgreSQL's sequences never reuse an id.
Ids deleted before this migration and above the highest one left can still be handed
out once: SQLite kept no record of them.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 10:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("users", "api_tokens", "project_keys")


def _rebuild(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    # As 0003: copies with the same rows and ids (foreign keys are off during migrations,
    # so the rows pointing at users and keys stay). The rebuild keeps the indexes,
    # uq_users_primary's WHERE included (tests/e2e/test_migrations.py checks them).
    for table in TABLES:
        with op.batch_alter_table(
            table, recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
        ):
            pass


def upgrade() -> None:
    _rebuild(True)


def downgrade() -> None:
    _rebuild(False)
