"""Password login: one answer for every failure, and a throttle on repeated failures.

An unknown email is checked against a dummy argon2 hash, so that it takes as long as a
wrong password for a real account and answers the same 401 "invalid email or password".
The throttle reserves the attempt before the password check, so parallel guesses cannot
all pass it before the first failure is counted.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.auth import sessions
from errortrack.auth.passwords import MIN_LENGTH, hash_password, verify_password
from errortrack.auth.throttle import LoginThrottle
from errortrack.errors import Forbidden, Unauthorized, ValidationError
from errortrack.models import LoginSession, User
from errortrack.team.users import email_key


@functools.cache
def _dummy_hash() -> str:
    # Computed once, lazily: hashing at import time would slow every process start.
    return hash_password("not a real password, only here to spend the same time")


def login(
    session: Session,
    *,
    email: str,
    password: str,
    ip: str,
    throttle: LoginThrottle,
    now: dt.datetime,
) -> tuple[User, sessions.NewSession]:
    email = email_key(email)
    throttle.check(email, ip)  # reserves this attempt until failed/succeeded/release
    try:
        user = session.scalar(sa.select(User).where(User.email == email)) if email else None
        ok = verify_password(user.password_hash if user else _dummy_hash(), password or "")
        # Inside the try: its write can fail (a read-only standby, a lock wait timing
        # out), and the attempt reserved above was then never released: five such
        # logins locked the email out until a restart (diff review).
        ok = ok and user is not None and _still_the_same(session, user)
    except BaseException:
        throttle.release(email, ip)
        raise
    if user is None or not ok:
        throttle.failed(email, ip)
        raise Unauthorized("invalid email or password")
    throttle.succeeded(email, ip)
    sessions.purge_expired(session, now=now)
    return user, sessions.start_session(session, user_id=user.id, now=now)


def _still_the_same(session: Session, user: User) -> bool:
    """Whether ``user`` still has the password hash just checked, its row now locked
    until the login's session is stored.

    The check takes 0.2-0.4 s after the hash was read. A password change (which ends
    every session of the user) or the user's removal committed meanwhile came before the
    session's insert: the login then kept a 14-day session made with the old password (a
    leaked one, tried in a loop, always had a login in flight; 2 of 12 survived each
    change), or hit the removed user's foreign key, a 500 (security review, thirty-second
    session). A no-op UPDATE matching the hash read locks the row on PostgreSQL and on
    SQLite starts the write transaction, so a later change or removal waits for this
    login and then ends its session with the others."""
    seen: sa.CursorResult[Any] = session.execute(  # type: ignore[assignment]
        sa.update(User)
        .where(User.id == user.id, User.password_hash == user.password_hash)
        .values(password_hash=User.password_hash)
        .execution_options(synchronize_session=False)
    )
    return bool(seen.rowcount)


def change_password(
    session: Session,
    user: User,
    *,
    current: str,
    new: str,
    ip: str,
    throttle: LoginThrottle,
) -> None:
    """Set ``user``'s password to ``new`` once ``current`` is theirs, and end every login
    session of theirs, the caller's own included (the caller starts a new one: a cookie
    that had leaked from the caller's own browser must end too; Django cycles the
    session's key likewise). Before this, a password or a 14-day cookie that had leaked
    could only be stopped by deleting the user (review, twenty-fifth session). API
    tokens stay; each is revoked on its own. Wrong guesses count towards the login
    lockout of the user's email, so a stolen session or token cannot try passwords
    faster than a login could."""
    if len(new) < MIN_LENGTH:
        raise ValidationError(
            f"password must be at least {MIN_LENGTH} characters", field="new_password"
        )
    throttle.check(user.email, ip)
    try:
        ok = verify_password(user.password_hash, current)
        if ok:
            user.password_hash = hash_password(new)
    except BaseException:
        throttle.release(user.email, ip)
        raise
    if not ok:
        throttle.failed(user.email, ip)
        raise Forbidden("the current password is wrong")
    throttle.succeeded(user.email, ip)
    session.execute(sa.delete(LoginSession).where(LoginSession.user_id == user.id))
