"""The team: list users, change a user's global role, remove a user.

Rules (each a 409 Conflict): nobody removes themself, the primary user or the last
remaining admin; the primary user is never demoted, nor is the last admin. Removing a
user deletes their login sessions and API tokens in the same transaction (the foreign
keys cascade too; the explicit deletes make it independent of that), and their project
memberships. Invitations they sent stay, with ``created_by`` set to NULL, unless they
were an admin: an admin demoted or removed revokes every pending invitation, whose links
it could read (``invitations.revoke_all_pending``).

Callers check ``require_global_admin`` first; these functions check it again under their
locks (``_lock_admins``) and enforce the team rules.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.auth.permissions import Principal
from errortrack.errors import Conflict, Forbidden, NotFound, ValidationError
from errortrack.models import GLOBAL_ROLES, ApiToken, LoginSession, ProjectMember, User
from errortrack.team.invitations import revoke_all_pending


def list_users(session: Session) -> list[User]:
    return list(session.scalars(sa.select(User).order_by(User.id)))


def get_user(session: Session, user_id: int, *, lock: bool = False) -> User:
    query = sa.select(User).where(User.id == user_id)
    user = session.scalar(query.with_for_update() if lock else query)
    if user is None:
        raise NotFound("user not found")
    return user


def _lock_admins(session: Session, actor: Principal) -> int:
    """Lock every admin's row (in id order) and return how many there are; 403 when the
    caller is no longer one of them.

    Taken first, before the target's row, and always in the same order: concurrent role
    changes then queue instead of deadlocking. The caller's role was read, unlocked, when
    the request was authenticated: two admins demoting each other at once both passed
    (20 of 20 rounds on SQLite, 17 of 20 on PostgreSQL), as did an admin's changes while
    its own demotion committed (security review, thirty-second session). So the caller
    is checked again here, under the lock. SQLite ignores FOR UPDATE and reads outside a
    transaction: a no-op UPDATE of the same rows starts its write transaction first.
    """
    if session.get_bind().dialect.name == "sqlite":
        session.execute(
            sa.update(User)
            .where(User.role == "admin")
            .values(role=User.role)
            .execution_options(synchronize_session=False)
        )
    ids = list(
        session.scalars(
            sa.select(User.id).where(User.role == "admin").order_by(User.id).with_for_update()
        )
    )
    if actor.user_id not in ids:
        raise Forbidden("only global admins may do this (your role changed)")
    return len(ids)


def change_role(
    session: Session, actor: Principal, *, user_id: int, role: str, now: dt.datetime
) -> User:
    if role not in GLOBAL_ROLES:
        raise ValidationError("role must be admin or member", field="role")
    admins = _lock_admins(session, actor)
    user = get_user(session, user_id, lock=True)
    if user.role == role:
        return user
    if user.is_primary:
        raise Conflict("the primary user cannot be demoted")
    if user.role == "admin" and admins <= 1:
        raise Conflict("the last remaining admin cannot be demoted")
    if user.role == "admin":
        revoke_all_pending(session, now=now)
    user.role = role
    session.flush()
    return user


def remove_user(session: Session, actor: Principal, *, user_id: int, now: dt.datetime) -> None:
    admins = _lock_admins(session, actor)
    user = get_user(session, user_id, lock=True)
    if user.id == actor.user_id:
        raise Conflict("you cannot remove yourself")
    if user.is_primary:
        raise Conflict("the primary user cannot be removed")
    if user.role == "admin" and admins <= 1:
        raise Conflict("the last remaining admin cannot be removed")
    if user.role == "admin":
        revoke_all_pending(session, now=now)
    for model in (LoginSession, ApiToken, ProjectMember):
        session.execute(sa.delete(model).where(model.user_id == user.id))
    session.delete(user)
    session.flush()
