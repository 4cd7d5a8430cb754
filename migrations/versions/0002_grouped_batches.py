"""grouped batches: writer batch tokens already counted into issues

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 03:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import errortrack.db

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "grouped_batches",
        sa.Column("token", sa.String(length=200), nullable=False),
        sa.Column("processed_at", errortrack.db.UTCDateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("token", name=op.f("pk_grouped_batches")),
    )
    with op.batch_alter_table("grouped_batches", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_grouped_batches_processed_at"), ["processed_at"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("grouped_batches", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_grouped_batches_processed_at"))
    op.drop_table("grouped_batches")
