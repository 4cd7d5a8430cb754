"""Project records as the API shows them, and updating and deleting projects.

Callers check ``require_project`` (or list with ``visible_project_roles``) first; these
functions only read and write. A record carries the project's DSN (built from its
first active key) and the caller's effective role on it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.auth.permissions import Principal, visible_project_roles
from errortrack.config import MAX_RETENTION_DAYS
from errortrack.errors import NotFound, ValidationError
from errortrack.models import Project, ProjectKey
from errortrack.projects.service import active_key, dsn
from errortrack.storage import deleted


def record(session: Session, project: Project, *, role: str, public_url: str) -> dict[str, Any]:
    key = active_key(session, project.id)
    return {
        "id": project.id,
        "name": project.name,
        "retention_days": project.retention_days,
        "created_at": project.created_at,
        "dsn": dsn(public_url, key.public_key, project.id) if key else None,
        "role": role,
    }


def list_visible(
    session: Session, principal: Principal, *, public_url: str
) -> list[dict[str, Any]]:
    roles = visible_project_roles(session, principal)
    if not roles:
        return []
    projects = session.scalars(
        sa.select(Project).where(Project.id.in_(list(roles))).order_by(Project.id)
    ).all()
    # One query for every key instead of one per project.
    keys: dict[int, str] = {}
    for key in session.scalars(
        sa.select(ProjectKey)
        .where(ProjectKey.project_id.in_(list(roles)), ProjectKey.is_active.is_(True))
        .order_by(ProjectKey.id.desc())
    ):
        keys[key.project_id] = key.public_key  # descending: the first active key wins
    return [
        {
            "id": p.id,
            "name": p.name,
            "retention_days": p.retention_days,
            "created_at": p.created_at,
            "dsn": dsn(public_url, keys[p.id], p.id) if p.id in keys else None,
            "role": roles[p.id],
        }
        for p in projects
    ]


def update_project(session: Session, project: Project, changes: dict[str, Any]) -> Project:
    """Apply ``name`` and/or ``retention_days`` (None: the instance default)."""
    if "name" in changes:
        name = (changes["name"] or "").strip()
        if not name or len(name) > 200:
            raise ValidationError("name must be 1 to 200 characters", field="name")
        project.name = name
    if "retention_days" in changes:
        days = changes["retention_days"]
        if days is not None and not 1 <= days <= MAX_RETENTION_DAYS:
            raise ValidationError(
                f"retention_days must be 1 to {MAX_RETENTION_DAYS} or null", field="retention_days"
            )
        project.retention_days = days
    session.flush()
    return project


def delete_project(session: Session, project: Project, *, now: dt.datetime) -> None:
    # Keys, members and issues go with it (ON DELETE CASCADE). Its rows in ClickHouse are
    # deleted once this commits, and by later retention passes (storage/deleted.py).
    # The row first: two deletes at once both passed require_project, and the second
    # waits here for the first's row lock (Postgres) or write transaction (SQLite), then
    # matches nothing: the 404 of a delete after the first, before it records the id a
    # second time (a primary key violation, a 500).
    gone = session.execute(sa.delete(Project).where(Project.id == project.id))
    if gone.rowcount == 0:  # type: ignore[attr-defined]
        raise NotFound("project not found")
    session.expunge(project)
    deleted.record(session, project.id, now=now)
    session.flush()
