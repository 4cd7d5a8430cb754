"""issues: indexes for the issues list's id orders (sort=id and -id)

The issues list gained `sort=id` and `-id` with keyset cursors (a walk by id sees every
issue that exists throughout it exactly once, whatever changes meanwhile). On SQLite no
index began with (project_id, id): each page sorted the project's issues (8-56 ms at
100,000), where these read it off the index (0.4-0.8 ms; twenty-first session).
PostgreSQL used its primary key filtered by project.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25 04:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = {
    "ix_issues_project_id": ["project_id", "id"],
    "ix_issues_project_status_id": ["project_id", "status", "id"],
}


def upgrade() -> None:
    for name, columns in INDEXES.items():
        op.create_index(name, "issues", columns)


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, table_name="issues")
