"""Project services: plain functions over a session."""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.errors import ValidationError
from errortrack.models import Project, ProjectKey, ProjectMember, User


def new_public_key() -> str:
    # 32 hex characters, the shape Sentry SDKs expect in a DSN's user part.
    return secrets.token_hex(16)


def create_project(session: Session, *, name: str, creator: User | None = None) -> Project:
    """Create a project with one active ingest key. A global member who creates a project
    becomes its admin (global admins see every project without membership)."""
    name = (name or "").strip()
    if not name or len(name) > 200:
        raise ValidationError("name must be 1 to 200 characters", field="name")
    project = Project(name=name)
    session.add(project)
    session.flush()
    session.add(ProjectKey(project_id=project.id, public_key=new_public_key()))
    if creator is not None and creator.role != "admin":
        session.add(ProjectMember(project_id=project.id, user_id=creator.id, role="admin"))
    session.flush()
    return project


def active_key(session: Session, project_id: int) -> ProjectKey | None:
    return session.scalar(
        sa.select(ProjectKey)
        .where(ProjectKey.project_id == project_id, ProjectKey.is_active.is_(True))
        .order_by(ProjectKey.id)
        .limit(1)
    )


def dsn(public_url: str, public_key: str, project_id: int) -> str:
    """``<scheme>://<key>@<host>[:port]/<project_id>``, as Sentry SDKs expect."""
    parts = urlsplit(public_url)
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{public_key}@{parts.netloc}{path}/{project_id}"
