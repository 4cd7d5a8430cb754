"""Invitations: the only way in besides ``errortrack bootstrap``.

A global admin invites an email with a global role. The invitation carries a random,
single-use token, kept in clear because the link ``<public_url>/invite/<token>`` must be
copyable again from the list of pending invitations (it is no credential for anything
but creating that one account, and it dies after 48 hours). No email is sent. Because
every admin can read every pending link, an admin losing that role (demoted or removed)
revokes all of them (``revoke_all_pending``).

Accepting sets a password and creates the account with the invitation's email and role;
the token then stops working. Expired, used and revoked tokens answer 410 Gone with a
message saying which; an unknown token is 404.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import secrets

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.auth.passwords import hash_password
from errortrack.errors import Conflict, Forbidden, Gone, NotFound, ValidationError
from errortrack.models import GLOBAL_ROLES, Invitation, User
from errortrack.state import CLOCK_SLACK, set_ahead
from errortrack.team.users import check_password, normalise_email

LIFETIME = dt.timedelta(hours=48)
# What an invitation's token can be: URL-safe base64, at most the column's length.
_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,64}")


def link(public_url: str, token: str) -> str:
    return f"{public_url.rstrip('/')}/invite/{token}"


def _pending(now: dt.datetime) -> sa.ColumnElement[bool]:
    return sa.and_(
        Invitation.accepted_at.is_(None),
        Invitation.revoked_at.is_(None),
        Invitation.expires_at > now,
        # Further than a lifetime away: made while the clock was ahead (state.set_ahead).
        Invitation.expires_at <= now + LIFETIME + CLOCK_SLACK,
    )


def create_invitation(
    session: Session, *, email: str, role: str, created_by: int | None, now: dt.datetime
) -> Invitation:
    email = normalise_email(email)
    if role not in GLOBAL_ROLES:
        raise ValidationError("role must be admin or member", field="role")
    _lock_email(session, email)
    if created_by is not None:
        _require_admin_now(session, created_by)
    if session.scalar(sa.select(User.id).where(User.email == email)) is not None:
        raise Conflict("a user with this email already exists", field="email")
    if session.scalar(sa.select(Invitation.id).where(Invitation.email == email, _pending(now))):
        raise Conflict("a pending invitation for this email exists; revoke it first", field="email")
    invitation = Invitation(
        email=email,
        role=role,
        token=secrets.token_urlsafe(32),
        created_by=created_by,
        created_at=now,
        expires_at=now + LIFETIME,
    )
    session.add(invitation)
    session.flush()
    return invitation


def _require_admin_now(session: Session, user_id: int) -> None:
    """403 unless ``user_id`` is a global admin now, its row locked until the commit.

    The caller's role was read, unlocked, when the request was authenticated. An admin
    making invitations while its demotion committed ended with links made after the
    demotion's revocation of every pending one, and accepted one to come back as an
    admin (4 of 80 in the security review, thirty-second session). FOR UPDATE waits for
    a role change in flight (``roster._lock_admins`` locks every admin's row) and reads
    the row as it then is; on SQLite, ``_lock_email``'s UPDATE has already started the
    write transaction, so the read is of the committed role."""
    role = session.scalar(sa.select(User.role).where(User.id == user_id).with_for_update())
    if role != "admin":
        raise Forbidden("only global admins may do this (your role changed)")


def _lock_email(session: Session, email: str) -> None:
    # Two admins inviting one email at once must not both pass the pending check. There is
    # no row to lock yet, and a unique index cannot say "pending" (that depends on the
    # clock), so: on Postgres a transaction-scoped advisory lock on the email; on SQLite a
    # no-op UPDATE, which starts the write transaction now (plain reads run outside one).
    # Either way the second creator waits for the first to commit, then sees its row.
    if session.get_bind().dialect.name == "postgresql":
        digest = hashlib.sha256(f"errortrack invitation {email}".encode()).digest()
        key = int.from_bytes(digest[:8], "big", signed=True)
        session.execute(sa.select(sa.func.pg_advisory_xact_lock(key)))
        return
    session.execute(
        sa.update(Invitation)
        .where(Invitation.email == email)
        .values(email=Invitation.email)
        .execution_options(synchronize_session=False)
    )


def list_pending(session: Session, *, now: dt.datetime) -> list[Invitation]:
    return list(session.scalars(sa.select(Invitation).where(_pending(now)).order_by(Invitation.id)))


def revoke_all_pending(session: Session, *, now: dt.datetime) -> None:
    """Revoke every pending invitation: a global admin is losing that role.

    Every admin can read every pending link (the list above), and a link, accepted with
    a password of the reader's choosing, makes an account with the invitation's role. An
    admin demoted or removed could otherwise come back in through any link pending when
    it lost the role; links made afterwards it never saw, and those stand.
    """
    session.execute(
        sa.update(Invitation)
        .where(_pending(now))
        .values(revoked_at=now)
        .execution_options(synchronize_session=False)
    )


def revoke_invitation(session: Session, *, invitation_id: int, now: dt.datetime) -> None:
    # Locked first (as ``find_usable(lock=True)`` does for an accept), then read as it is
    # now: an accept holds the row's lock while it hashes the password, and a revoke that
    # read the row before then answered 204 over the account just made, its row both
    # accepted and revoked (security review, thirty-second session). Now it waits for
    # the accept and answers 410.
    _lock(session, Invitation.id == invitation_id)
    invitation = session.get(Invitation, invitation_id, populate_existing=True)
    if invitation is None:
        raise NotFound("invitation not found")
    _check_usable(invitation, now)
    invitation.revoked_at = now
    session.flush()


def _lock(session: Session, where: sa.ColumnElement[bool]) -> None:
    """Lock the invitation ``where`` names until the commit, before it is read.

    SQLite ignores SELECT ... FOR UPDATE and reads outside a transaction: a no-op UPDATE
    starts the write transaction. On PostgreSQL that UPDATE made a new version of the
    row, and the later write of ``accepted_at`` or ``revoked_at`` to a row this
    transaction had updated checks its ``created_by`` foreign key again, taking a share
    lock on the creator's user row: a demotion holding the admins' rows and waiting for
    this invitation (``revoke_all_pending``) deadlocked with it (30-110 deadlocks a run
    under a mixed load; diff review, thirty-second session). FOR UPDATE makes no new
    version."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(sa.select(Invitation.id).where(where).with_for_update())
        return
    session.execute(
        sa.update(Invitation)
        .where(where)
        .values(token=Invitation.token)
        .execution_options(synchronize_session=False)
    )


def find_usable(
    session: Session, token: str, *, now: dt.datetime, lock: bool = False
) -> Invitation:
    """The invitation behind ``token`` if it can still be accepted; else 404 or 410."""
    if not _TOKEN.fullmatch(token):
        # Not one we make (secrets.token_urlsafe), so no invitation's: answered before
        # the query, as PostgreSQL refuses a NUL in text (a 500 for anyone, without
        # credentials, for /auth/invitations/abc%00def).
        raise NotFound("invitation not found")
    if lock:
        # Two accepts of one token queue up, and the second sees the first's accepted_at.
        _lock(session, Invitation.token == token)
    query = sa.select(Invitation).where(Invitation.token == token)
    # populate_existing: after waiting for the lock, read the row as it is now.
    invitation = session.scalar(query.execution_options(populate_existing=lock))
    if invitation is None:
        raise NotFound("invitation not found")
    _check_usable(invitation, now)
    return invitation


def accept_invitation(session: Session, *, token: str, password: str, now: dt.datetime) -> User:
    # Locked, so that two simultaneous accepts of one token cannot both succeed.
    invitation = find_usable(session, token, now=now, lock=True)
    check_password(password)
    if session.scalar(sa.select(User.id).where(User.email == invitation.email)) is not None:
        raise Conflict("a user with this email already exists", field="email")
    user = User(
        email=invitation.email,
        password_hash=hash_password(password),
        role=invitation.role,
        created_at=now,
    )
    session.add(user)
    invitation.accepted_at = now
    try:
        session.flush()
    except sa.exc.IntegrityError as exc:
        # Another invitation for this email (one from before creation was serialised) was
        # accepted at the same moment: the email's unique index decides, as the check above.
        raise Conflict("a user with this email already exists", field="email") from exc
    return user


def _check_usable(invitation: Invitation, now: dt.datetime) -> None:
    if invitation.accepted_at is not None:
        raise Gone("this invitation has already been used")
    if invitation.revoked_at is not None:
        raise Gone("this invitation has been revoked")
    # A 48-hour invitation made with the clock a year ahead could be accepted for a year.
    if invitation.expires_at <= now or set_ahead(invitation.expires_at, now, LIFETIME):
        raise Gone("this invitation has expired; ask an admin for a new one")
