"""issues: an index for each order and status filter of the issues list

Only the default order (-last_seen) had one, without the id every order ends on: every
other sort, and any status filter, sorted the project's whole issues table per call, and
counted it by scanning (100,000 issues on SQLite: 170-340 ms for page 1, 0.8-1.1 s for
page 1000 of 100; PostgreSQL 70-140 ms; review, twentieth session). Each index is the
order with its id tie-breaker, so a page is read off the index; the status ones serve
`status=...` with the default order and with -count.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 02:10:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = {
    "ix_issues_project_last_seen_id": ["project_id", "last_seen", "id"],
    "ix_issues_project_first_seen_id": ["project_id", "first_seen", "id"],
    "ix_issues_project_count_id": ["project_id", "event_count", "id"],
    "ix_issues_project_status_last_seen_id": ["project_id", "status", "last_seen", "id"],
    "ix_issues_project_status_count_id": ["project_id", "status", "event_count", "id"],
}


def upgrade() -> None:
    for name, columns in INDEXES.items():
        op.create_index(name, "issues", columns)
    # The first one covers what it served (same leading columns).
    op.drop_index("ix_issues_project_last_seen", table_name="issues")


def downgrade() -> None:
    op.create_index("ix_issues_project_last_seen", "issues", ["project_id", "last_seen"])
    for name in INDEXES:
        op.drop_index(name, table_name="issues")
