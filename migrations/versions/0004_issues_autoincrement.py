"""issues: ids never reused on SQLite (AUTOINCREMENT)

An issue's events stay in ClickHouse keyed by its id. A deleted issue's events may be
written after its delete (the writer counts a batch, the delete comes, then the insert),
and SQLite without AUTOINCREMENT hands the highest id out again: the next new issue then
listed the deleted one's events as its own. PostgreSQL's sequence never reuses an id.
Ids deleted before this migration and above the highest one left can still be handed
out once: SQLite kept no record of them.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24 21:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _rebuild(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    # As 0003: a copy with the same rows and ids (foreign keys are off during migrations).
    with op.batch_alter_table(
        "issues", recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
    ):
        pass


def upgrade() -> None:
    _rebuild(True)


def downgrade() -> None:
    _rebuild(False)
