"""A project's ingest keys (the public part of its DSNs): list, create, update, delete.

Callers check ``require_project`` first (reading needs ``read``, changes ``admin``, as
Sentry keeps client keys to project admins); these functions only read and write. A
project may hold several keys, so a leaked DSN is rotated by creating a new key, moving
the SDKs to it, then disabling or deleting the old one. Ingest caches keys for
``KeyCache.ttl`` seconds (10) in each serving process, so a disabled or deleted key is
refused (403) within that time, not at once.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.errors import NotFound, ValidationError
from errortrack.models import Project, ProjectKey
from errortrack.projects.service import dsn, new_public_key

MAX_LABEL = 200


def record(key: ProjectKey, *, public_url: str) -> dict[str, Any]:
    return {
        "id": key.id,
        "label": key.label,
        "public_key": key.public_key,
        "dsn": dsn(public_url, key.public_key, key.project_id),
        "is_active": key.is_active,
        "created_at": key.created_at,
    }


def list_keys(session: Session, project_id: int) -> list[ProjectKey]:
    return list(
        session.scalars(
            sa.select(ProjectKey).where(ProjectKey.project_id == project_id).order_by(ProjectKey.id)
        )
    )


def create_key(session: Session, project_id: int, *, label: str | None = None) -> ProjectKey:
    key = ProjectKey(project_id=project_id, public_key=new_public_key(), label=_label(label))
    try:
        with session.begin_nested():  # a savepoint, so the session stays usable after
            session.add(key)
    except sa.exc.IntegrityError:
        # The project was deleted since the caller's permission check (a foreign key
        # violation): as for any project that does not exist.
        if session.get(Project, project_id) is None:
            raise NotFound("project not found") from None
        raise
    return key


def get_key(session: Session, project_id: int, key_id: int) -> ProjectKey:
    key = session.get(ProjectKey, key_id)
    # Another project's key is as unknown as a key that does not exist.
    if key is None or key.project_id != project_id:
        raise NotFound("key not found")
    return key


def update_key(
    session: Session, project_id: int, key_id: int, changes: dict[str, Any]
) -> ProjectKey:
    values: dict[str, Any] = {}
    if "label" in changes:
        values["label"] = _label(changes["label"])
    if "is_active" in changes:
        values["is_active"] = bool(changes["is_active"])
    if values:
        # One statement, its row count read: a key deleted by a concurrent request is a
        # 404, where an ORM flush of the loaded object failed with StaleDataError (500).
        done = session.execute(
            sa.update(ProjectKey).where(*_this(project_id, key_id)).values(**values),
            execution_options={"synchronize_session": False},
        )
        if _count(done) == 0:
            raise NotFound("key not found")
        session.expire_all()
    return get_key(session, project_id, key_id)


def delete_key(session: Session, project_id: int, key_id: int) -> None:
    done = session.execute(
        sa.delete(ProjectKey).where(*_this(project_id, key_id)),
        execution_options={"synchronize_session": False},
    )
    if _count(done) == 0:
        raise NotFound("key not found")


def _this(project_id: int, key_id: int) -> tuple[sa.ColumnElement[bool], ...]:
    return ProjectKey.id == key_id, ProjectKey.project_id == project_id


def _count(result: Any) -> int:
    return int(result.rowcount)


def _label(label: str | None) -> str | None:
    """Trimmed; blank means none."""
    if label is None:
        return None
    label = label.strip()
    if len(label) > MAX_LABEL:
        raise ValidationError(f"label must be at most {MAX_LABEL} characters", field="label")
    return label or None
