"""project_keys: a label, so that keys can be told apart once a project has several

Keys are now created, disabled and deleted over the API (rotating a leaked DSN); a
label says which is which, as Sentry's key names do. Existing keys keep no label.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 22:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("project_keys") as batch:
        batch.add_column(sa.Column("label", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("project_keys") as batch:
        batch.drop_column("label")
