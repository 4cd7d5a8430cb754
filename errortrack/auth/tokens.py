"""API tokens: random secrets shown once, stored as SHA-256, tied to their user.

The secret is ``et_`` plus 43 url-safe characters (256 random bits). Because it is
random and long, a fast hash is enough (no password stretching) and lets a request find
its token through the unique index on ``token_hash``; the final comparison is constant
time all the same. ``prefix`` (the first 10 characters) is stored in clear so people can
tell their tokens apart in a list.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
import secrets

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.db import after_commit
from errortrack.errors import NotFound, ValidationError
from errortrack.models import ApiToken, User
from errortrack.state import due

SECRET_PREFIX = "et_"
PREFIX_LENGTH = 10
# last_used_at is written at most this often per token: a busy automation calling the API
# many times a second must not turn every read into a write. The write follows the
# request's transaction (db.after_commit), so a request that fails (status >= 400) does
# not record it, and a database that refuses writes does not fail the request.
LAST_USED_EVERY = dt.timedelta(minutes=1)


def sha256(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class NewToken:
    token: ApiToken
    secret: str  # shown once, never stored


def create_token(session: Session, *, user_id: int, description: str, now: dt.datetime) -> NewToken:
    description = (description or "").strip()
    if not description or len(description) > 200:
        raise ValidationError("description must be 1 to 200 characters", field="description")
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        user_id=user_id,
        description=description,
        prefix=secret[:PREFIX_LENGTH],
        token_hash=sha256(secret),
        created_at=now,
    )
    session.add(token)
    session.flush()
    return NewToken(token, secret)


def authenticate_token(session: Session, secret: str, *, now: dt.datetime) -> User | None:
    """The token's user, or None for an unknown secret. Updates last_used_at (throttled)."""
    if not secret.startswith(SECRET_PREFIX) or len(secret) > 200:
        return None
    digest = sha256(secret)
    row = session.execute(
        sa.select(ApiToken, User)
        .join(User, User.id == ApiToken.user_id)
        .where(ApiToken.token_hash == digest)
    ).first()
    if row is None:
        return None
    token, user = row
    # The index lookup already matched; this keeps the check itself constant time.
    if not hmac.compare_digest(token.token_hash, digest):
        return None
    if due(token.last_used_at, now, LAST_USED_EVERY):
        after_commit(
            session, sa.update(ApiToken).where(ApiToken.id == token.id).values(last_used_at=now)
        )
    return user


def list_tokens(session: Session, user_id: int) -> list[ApiToken]:
    return list(
        session.scalars(
            sa.select(ApiToken).where(ApiToken.user_id == user_id).order_by(ApiToken.id)
        )
    )


def revoke_token(session: Session, *, user_id: int, token_id: int) -> None:
    """Delete one of the caller's own tokens; someone else's token is "not found"."""
    token = session.get(ApiToken, token_id)
    if token is None or token.user_id != user_id:
        raise NotFound("token not found")
    session.delete(token)
    session.flush()
