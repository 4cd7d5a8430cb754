"""A project's members: list, add or change (PUT), remove.

Rule (409 Conflict): the last admin of a project can be neither removed from it nor
demoted. The project row is locked first so that two concurrent changes cannot both
pass that check, and the caller's role is checked again under that lock. Callers check
``require_project(..., "admin")`` first.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.auth.permissions import Principal
from errortrack.errors import Conflict, Forbidden, NotFound, ValidationError
from errortrack.models import PROJECT_ROLES, Project, ProjectMember, User


def list_members(session: Session, project_id: int) -> list[dict[str, Any]]:
    rows = session.execute(
        sa.select(ProjectMember, User.email)
        .join(User, User.id == ProjectMember.user_id)
        .where(ProjectMember.project_id == project_id)
        .order_by(ProjectMember.user_id)
    ).all()
    return [_record(member, email) for member, email in rows]


def put_member(
    session: Session, actor: Principal, *, project_id: int, user_id: int, role: str
) -> dict[str, Any]:
    """Add ``user_id`` with ``role``, or change their role if already a member."""
    if role not in PROJECT_ROLES:
        raise ValidationError("role must be viewer, editor or admin", field="role")
    _lock_project(session, project_id, actor)
    user = session.get(User, user_id)
    if user is None:
        raise ValidationError("no user with this user_id", field="user_id")
    member = session.get(ProjectMember, (project_id, user_id))
    try:
        # In a savepoint (flushed on leaving it), so that the user can be looked up again
        # after a failed insert.
        with session.begin_nested():
            if member is None:
                member = ProjectMember(project_id=project_id, user_id=user_id, role=role)
                session.add(member)
            elif member.role != role:
                if member.role == "admin":
                    _refuse_if_last_admin(session, project_id, "demoted")
                member.role = role
    except sa.exc.IntegrityError:
        # The user was removed (DELETE /api/team/{id}) between the lookup above and the
        # insert, which Postgres reports as a foreign key violation: answer as for an
        # unknown user. Anything else is a real error.
        if session.scalar(sa.select(User.id).where(User.id == user_id)) is None:
            raise ValidationError("no user with this user_id", field="user_id") from None
        raise
    return _record(member, user.email)


def change_member(
    session: Session, actor: Principal, *, project_id: int, user_id: int, role: str
) -> dict[str, Any]:
    """Change an existing member's role; 404 when the user is not a member."""
    _lock_project(session, project_id, actor)
    if session.get(ProjectMember, (project_id, user_id)) is None:
        raise NotFound("this user is not a member of the project")
    return put_member(session, actor, project_id=project_id, user_id=user_id, role=role)


def remove_member(session: Session, actor: Principal, *, project_id: int, user_id: int) -> None:
    _lock_project(session, project_id, actor)
    member = session.get(ProjectMember, (project_id, user_id))
    if member is None:
        raise NotFound("this user is not a member of the project")
    if member.role == "admin":
        _refuse_if_last_admin(session, project_id, "removed")
    session.delete(member)
    session.flush()


def _lock_project(session: Session, project_id: int, actor: Principal) -> None:
    # A no-op UPDATE rather than SELECT ... FOR UPDATE: it row-locks on Postgres, and on
    # SQLite (which ignores FOR UPDATE and runs plain SELECTs outside a transaction) it
    # starts the write transaction now, so the admin count read next cannot go stale.
    session.execute(
        sa.update(Project)
        .where(Project.id == project_id)
        .values(name=Project.name)
        .execution_options(synchronize_session=False)
    )
    # The caller's role again, now that changes to this project's members queue here:
    # read when the request was authenticated, it let two of a project's three admins
    # demote each other at once (12 of 20 rounds on SQLite, 16 of 20 on PostgreSQL;
    # security review, thirty-second session).
    if session.scalar(sa.select(User.role).where(User.id == actor.user_id)) == "admin":
        return
    role = session.scalar(
        sa.select(ProjectMember.role).where(
            ProjectMember.project_id == project_id, ProjectMember.user_id == actor.user_id
        )
    )
    if role != "admin":
        raise Forbidden("your role on this project no longer allows admin")


def _refuse_if_last_admin(session: Session, project_id: int, what: str) -> None:
    admins = session.scalar(
        sa.select(sa.func.count())
        .select_from(ProjectMember)
        .where(ProjectMember.project_id == project_id, ProjectMember.role == "admin")
    )
    if (admins or 0) <= 1:
        raise Conflict(f"the last admin of a project cannot be {what}")


def _record(member: ProjectMember, email: str) -> dict[str, Any]:
    return {
        "user_id": member.user_id,
        "email": email,
        "role": member.role,
        "created_at": member.created_at,
    }
