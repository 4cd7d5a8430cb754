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
from errortrack.models import ProjectKey
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
    session.add(key)
    session.flush()
    return key


def get_key(session: Session, project_id: int, key_id: int) -> ProjectKey:
    key = session.get(ProjectKey, key_id)
    # Another project's key is as unknown as a key that does not exist.
    if key is None or key.project_id != project_id:
        raise NotFound("key not found")
    return key


def update_key(session: Session, key: ProjectKey, changes: dict[str, Any]) -> ProjectKey:
    if "label" in changes:
        key.label = _label(changes["label"])
    if "is_active" in changes:
        key.is_active = bool(changes["is_active"])
    session.flush()
    return key


def delete_key(session: Session, key: ProjectKey) -> None:
    session.delete(key)
    session.flush()


def _label(label: str | None) -> str | None:
    """Trimmed; blank means none."""
    if label is None:
        return None
    label = label.strip()
    if len(label) > MAX_LABEL:
        raise ValidationError(f"label must be at most {MAX_LABEL} characters", field="label")
    return label or None
