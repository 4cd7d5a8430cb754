"""Dashboard login sessions: a random cookie secret (stored as SHA-256) and a CSRF token.

The cookie is HttpOnly and SameSite=Lax; writes authenticated by it must also carry the
header ``X-CSRF-Token`` equal to the session's ``csrf_token`` (returned by login and by
``GET /api/me``). A page on another site can make the browser send the cookie in some
cases, but it cannot read the CSRF token, so it cannot forge that header.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hmac
import secrets

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.auth.tokens import sha256
from errortrack.db import after_commit
from errortrack.models import LoginSession, User
from errortrack.state import due, set_ahead

COOKIE_NAME = "errortrack_session"
# Fixed lifetime; people log in again after two weeks.
LIFETIME = dt.timedelta(days=14)
LAST_SEEN_EVERY = dt.timedelta(minutes=1)


@dataclasses.dataclass(frozen=True)
class NewSession:
    login: LoginSession
    secret: str  # the cookie value; only its hash is stored


def start_session(session: Session, *, user_id: int, now: dt.datetime) -> NewSession:
    secret = secrets.token_urlsafe(32)
    login = LoginSession(
        user_id=user_id,
        token_hash=sha256(secret),
        csrf_token=secrets.token_urlsafe(32),
        created_at=now,
        expires_at=now + LIFETIME,
        last_seen_at=now,
    )
    session.add(login)
    session.flush()
    return NewSession(login, secret)


def resolve_session(
    session: Session, secret: str, *, now: dt.datetime
) -> tuple[LoginSession, User] | None:
    """The live session and its user for a cookie value; None if unknown or expired."""
    if not secret or len(secret) > 200:
        return None
    row = session.execute(
        sa.select(LoginSession, User)
        .join(User, User.id == LoginSession.user_id)
        .where(LoginSession.token_hash == sha256(secret))
    ).first()
    if row is None:
        return None
    login, user = row
    if login.expires_at <= now or set_ahead(login.expires_at, now, LIFETIME):
        return None
    if due(login.last_seen_at, now, LAST_SEEN_EVERY):
        # After the request's transaction, best effort (see tokens.LAST_USED_EVERY).
        after_commit(
            session,
            sa.update(LoginSession).where(LoginSession.id == login.id).values(last_seen_at=now),
        )
    return login, user


def csrf_ok(login: LoginSession, header: str | None) -> bool:
    if not header:
        return False
    # As bytes: compare_digest refuses str with non-ASCII characters (a TypeError, so a
    # 500), and header values arrive decoded as latin-1, whatever the client sent.
    sent = header.encode("utf-8", "surrogateescape")
    return hmac.compare_digest(login.csrf_token.encode(), sent)


def end_session(session: Session, secret: str) -> None:
    """End the session a cookie names, whatever its state (unknown: nothing happens)."""
    session.execute(sa.delete(LoginSession).where(LoginSession.token_hash == sha256(secret)))


def purge_expired(session: Session, *, now: dt.datetime) -> None:
    """Expired sessions are useless; drop them when someone logs in (cheap, indexed by id)."""
    session.execute(sa.delete(LoginSession).where(LoginSession.expires_at <= now))
