"""The one permission check, shared by the JSON API, the dashboard and MCP.

Every front door first turns its credentials into a :class:`Principal` (the HTTP API
does it with ``errortrack.api.auth.principal(req)``; MCP and the CLI build one from a
verified token or user), then asks one of these functions before it touches data:

``require_project(session, principal, project_id, action) -> Project``
    ``action`` is one of

    - ``"read"``: project role ``viewer`` or above -- read issues, events, logs, traces,
      spans, project details, its member list and its ingest keys;
    - ``"write"``: ``editor`` or above -- resolve, mute and delete issues, update the
      project (name, retention);
    - ``"admin"``: project ``admin`` -- delete the project, add, change and remove members,
      create, disable and delete ingest keys.

    Global admins pass every action on every project without being members. Anyone else
    needs a membership row. Outcomes, in this order:

    1. the project does not exist, or the caller is a global member without membership
       -> :class:`~errortrack.errors.NotFound` (404): its existence is not revealed;
    2. the caller may see the project but its role is below ``action``
       -> :class:`~errortrack.errors.Forbidden` (403);
    3. otherwise the loaded :class:`~errortrack.models.Project` is returned.

``require_global_admin(principal) -> None``
    Team, invitation and user-role endpoints: :class:`Forbidden` (403) unless the caller
    is a global admin.

``project_role(session, principal, project_id) -> str | None``
    The caller's *effective* role on a project (``"admin"`` for global admins), or None
    when it cannot see it. ``visible_project_roles(session, principal)`` gives the same
    for every project the caller can see, in one query (for lists).

Typical use in a service or resource (issue ``resolve``)::

    project = require_project(db, principal, project_id, "write")

Authentication (401) is not decided here: a Principal always stands for a verified user.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.errors import Forbidden, NotFound
from errortrack.models import Project, ProjectMember, User

Action = Literal["read", "write", "admin"]

# Project roles in increasing power; an action needs at least the role named here.
_RANK = {"viewer": 1, "editor": 2, "admin": 3}
_NEEDS: dict[str, str] = {"read": "viewer", "write": "editor", "admin": "admin"}


@dataclasses.dataclass(frozen=True)
class Principal:
    """A verified caller. ``role`` is the global role, ``admin`` or ``member``.

    ``via`` says how it was authenticated (``"token"``, ``"session"`` or ``"cli"``);
    permissions never depend on it, only CSRF and logout do.
    """

    user_id: int
    role: str
    is_primary: bool = False
    via: str = "token"

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @classmethod
    def of(cls, user: User, via: str) -> Principal:
        """The principal for a verified user (e.g. MCP after ``authenticate_token``)."""
        return cls(user_id=user.id, role=user.role, is_primary=user.is_primary, via=via)


def role_allows(role: str | None, action: str) -> bool:
    """Whether a project role (or None: no access) is enough for ``action``."""
    if action not in _NEEDS:
        raise ValueError(f"unknown action {action!r}")
    return role is not None and _RANK[role] >= _RANK[_NEEDS[action]]


def project_role(session: Session, principal: Principal, project_id: int) -> str | None:
    """The caller's effective role on an existing project, None when it may not see it."""
    if principal.is_admin:
        return "admin"
    return session.scalar(
        sa.select(ProjectMember.role).where(
            ProjectMember.project_id == project_id, ProjectMember.user_id == principal.user_id
        )
    )


def require_project(
    session: Session, principal: Principal, project_id: int, action: Action
) -> Project:
    """Return the project if ``principal`` may do ``action`` on it; else 404 or 403."""
    project: Project | None
    role: str | None
    if principal.is_admin:
        project = session.get(Project, project_id)
        role = "admin"
    else:
        # One query, the project with the caller's membership: a missing project and one
        # the caller is no member of then cost the same, as they answer the same 404
        # (a second query for existing projects only would tell them apart by time).
        row = session.execute(
            sa.select(Project, ProjectMember.role)
            .outerjoin(
                ProjectMember,
                sa.and_(
                    ProjectMember.project_id == Project.id,
                    ProjectMember.user_id == principal.user_id,
                ),
            )
            .where(Project.id == project_id)
        ).first()
        project, role = (row[0], row[1]) if row is not None else (None, None)
    if project is None or role is None:
        raise NotFound("project not found")
    if not role_allows(role, action):
        raise Forbidden(f"your role on this project ({role}) does not allow {action}")
    return project


def require_global_admin(principal: Principal) -> None:
    if not principal.is_admin:
        raise Forbidden("only global admins may do this")


def visible_project_roles(session: Session, principal: Principal) -> dict[int, str]:
    """project_id -> effective role, for every project the caller can see."""
    if principal.is_admin:
        ids = session.scalars(sa.select(Project.id)).all()
        return dict.fromkeys(ids, "admin")
    rows = session.execute(
        sa.select(ProjectMember.project_id, ProjectMember.role).where(
            ProjectMember.user_id == principal.user_id
        )
    ).all()
    return {project_id: role for project_id, role in rows}
