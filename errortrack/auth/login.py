"""Password login: one answer for every failure, and a throttle on repeated failures.

An unknown email is checked against a dummy argon2 hash, so that it takes as long as a
wrong password for a real account and answers the same 401 "invalid email or password".
The throttle reserves the attempt before the password check, so parallel guesses cannot
all pass it before the first failure is counted.
"""

from __future__ import annotations

import datetime as dt
import functools

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.auth import sessions
from errortrack.auth.passwords import hash_password, verify_password
from errortrack.auth.throttle import LoginThrottle
from errortrack.errors import Unauthorized
from errortrack.models import User
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
    except BaseException:
        throttle.release(email, ip)
        raise
    if user is None or not ok:
        throttle.failed(email, ip)
        raise Unauthorized("invalid email or password")
    throttle.succeeded(email, ip)
    sessions.purge_expired(session, now=now)
    return user, sessions.start_session(session, user_id=user.id, now=now)
