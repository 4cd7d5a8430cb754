"""users: at most one primary user (a partial unique index)

Two `errortrack bootstrap` runs at once both counted no users, hashed the password, and
inserted a primary admin each. The index lets one insert through; the other is refused
as any bootstrap after the first. A store where that already happened keeps the first
primary user (lowest id) and the others stay global admins without the primary flag.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

users = sa.table("users", sa.column("id", sa.Integer), sa.column("is_primary", sa.Boolean))


def upgrade() -> None:
    first = sa.select(sa.func.min(users.c.id)).where(users.c.is_primary).scalar_subquery()
    op.execute(
        users.update().where(users.c.is_primary, users.c.id != first).values(is_primary=False)
    )
    op.create_index(
        "uq_users_primary",
        "users",
        ["is_primary"],
        unique=True,
        sqlite_where=sa.text("is_primary"),
        postgresql_where=sa.text("is_primary"),
    )


def downgrade() -> None:
    op.drop_index("uq_users_primary", table_name="users")
