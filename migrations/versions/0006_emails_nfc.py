"""users and invitations: emails in Unicode NFC

Emails are looked up in NFC since this session (team.users.email_key): an "é" typed as
one code point or as "e" plus a combining accent is one address. Stored ones were kept
as typed, so an account made with the decomposed form could no longer log in; they are
rewritten here. Where both forms already have an account, the decomposed one is left as
it is (renaming it would break the unique index; an admin removes one of the two).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 21:10:00
"""

import unicodedata
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _normalise(table: str, *, unique: bool) -> None:
    rows = sa.table(table, sa.column("id", sa.Integer), sa.column("email", sa.String))
    bind = op.get_bind()
    found = bind.execute(sa.select(rows.c.id, rows.c.email)).all()
    taken = {email for _, email in found}
    for row_id, email in found:
        # As team.users.email_key writes it (copied: a migration must not change with it).
        nfc = unicodedata.normalize("NFC", unicodedata.normalize("NFC", email).strip().lower())
        if nfc == email or (unique and nfc in taken):
            continue
        bind.execute(rows.update().where(rows.c.id == row_id).values(email=nfc))
        taken.add(nfc)


def upgrade() -> None:
    _normalise("users", unique=True)
    _normalise("invitations", unique=False)


def downgrade() -> None:
    # The NFC form is the same address; nothing to undo.
    pass
