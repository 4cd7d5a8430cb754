"""User services. Plain functions over a session; no request or response inside."""

from __future__ import annotations

import re
import unicodedata

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.auth.passwords import MIN_LENGTH, hash_password
from errortrack.errors import Conflict, ValidationError
from errortrack.models import User

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def email_key(email: str) -> str:
    """An email as accounts are stored and looked up: NFC (an "é" typed as one code point
    or as "e" plus an accent is one address, not two accounts), trimmed, lower-case."""
    # NFC again after lower(): lower-casing can make a sequence that composes ("T" and a
    # diaeresis become "t" and one, which NFC writes as one code point).
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", email or "").strip().lower())


def normalise_email(email: str) -> str:
    value = email_key(email)
    if not _EMAIL.match(value) or len(value) > 320:
        raise ValidationError("not a valid email address", field="email")
    return value


def check_password(password: str) -> None:
    if len(password or "") < MIN_LENGTH:
        raise ValidationError(
            f"password must be at least {MIN_LENGTH} characters", field="password"
        )


def bootstrap_primary(session: Session, *, email: str, password: str) -> User:
    """Create the first account: the primary user, a global admin. Only while none exists."""
    email = normalise_email(email)
    check_password(password)
    # Slow: hashed before the check rather than between it and the insert.
    password_hash = hash_password(password)
    refused = Conflict("a user already exists; bootstrap only creates the first account")
    if session.scalar(sa.select(sa.func.count()).select_from(User)):
        raise refused
    user = User(email=email, password_hash=password_hash, role="admin", is_primary=True)
    session.add(user)
    try:
        session.flush()
    except sa.exc.IntegrityError:
        # Another bootstrap inserted between the count and this insert: the unique index
        # on the primary flag (uq_users_primary) lets only one of them through.
        raise refused from None
    return user
