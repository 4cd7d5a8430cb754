"""deleted_projects: the ids of deleted projects, whose ClickHouse rows are deleted

Deleting a project left its logs, events and spans in ClickHouse until their retention
ended (months, at a long retention), unreachable but on disk. The project's id is now
recorded as it is deleted, and its rows are deleted then and by every retention pass
after (rows still in the spool reach ClickHouse later). Projects deleted before this
revision are not recorded: `POST /api/storage/cleanup` with their `project_id` removes
their rows.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25 18:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import errortrack.db

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "deleted_projects",
        sa.Column("project_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("deleted_at", errortrack.db.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("project_id"),
    )


def downgrade() -> None:
    op.drop_table("deleted_projects")
