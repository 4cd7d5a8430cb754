"""issues: resolved_at, so that only events newer than the resolution reopen an issue

Any new event on a resolved issue reopened it, including one dated before the
resolution (an SDK's offline buffer, or an event in flight while someone pressed
resolve). The grouping hook now reopens only on an event dated after ``resolved_at``
less a margin (errortrack/issues/store.py, REGRESSION_MARGIN).

Issues resolved before this migration get their ``last_seen``: no resolution time was
kept, and they were resolved after their last event was grouped (else that event would
have reopened them), so ``last_seen`` is the latest time known to be before the
resolution. Events dated before it leave them resolved, newer ones reopen them. Other
issues get NULL (``resolved_at`` is set exactly while an issue is resolved).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 01:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import errortrack.db

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Adding a nullable column is a plain ALTER TABLE on SQLite too (no rebuild).
    with op.batch_alter_table("issues") as batch:
        batch.add_column(
            sa.Column("resolved_at", errortrack.db.UTCDateTime(timezone=True), nullable=True)
        )
    # Both columns hold UTC in the same form, so the value is copied as it is.
    op.execute("UPDATE issues SET resolved_at = last_seen WHERE status = 'resolved'")


def downgrade() -> None:
    # Dropping a column rebuilds the table on SQLite: keep 0004's AUTOINCREMENT (the
    # rebuild keeps the rows, ids, indexes and constraints; foreign keys are off).
    bind = op.get_bind()
    sqlite = bind.dialect.name == "sqlite"
    # The rebuilt table's counter starts from its highest remaining id: a deleted last
    # issue's id would be handed out again (what 0004's AUTOINCREMENT is there to stop).
    seq = (
        bind.execute(sa.text("SELECT seq FROM sqlite_sequence WHERE name = 'issues'")).scalar()
        if sqlite
        else None
    )
    with op.batch_alter_table("issues", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("resolved_at")
    if seq is not None:
        bind.execute(
            sa.text("UPDATE sqlite_sequence SET seq = MAX(seq, :seq) WHERE name = 'issues'"),
            {"seq": seq},
        )
        bind.execute(
            sa.text(
                "INSERT INTO sqlite_sequence (name, seq) SELECT 'issues', :seq"
                " WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'issues')"
            ),
            {"seq": seq},
        )
