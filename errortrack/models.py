"""Relational models: users, projects and their keys, members, invitations, tokens,
login sessions and issues. Logs, events and spans live in ClickHouse, not here."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from errortrack.db import Base, UTCDateTime

GLOBAL_ROLES = ("admin", "member")
PROJECT_ROLES = ("viewer", "editor", "admin")
ISSUE_STATUSES = ("unresolved", "resolved", "muted")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    # Stored lower-cased so that logins and invitations match case-insensitively.
    email: Mapped[str] = mapped_column(sa.String(320), unique=True)
    password_hash: Mapped[str] = mapped_column(sa.String(255))
    role: Mapped[str] = mapped_column(sa.String(16))
    is_primary: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)

    __table_args__ = (
        sa.CheckConstraint("role IN ('admin', 'member')", name="role"),
        # At most one primary user: two `errortrack bootstrap` runs at once both counted
        # no users before either inserted.
        sa.Index(
            "uq_users_primary",
            "is_primary",
            unique=True,
            sqlite_where=sa.text("is_primary"),
            postgresql_where=sa.text("is_primary"),
        ),
        # The API names users by id: SQLite without AUTOINCREMENT gave a deleted user's
        # id to the next one, and a script holding it acted on someone else (0008).
        {"sqlite_autoincrement": True},
    )


class Project(Base):
    __tablename__ = "projects"
    # ClickHouse's rows are keyed by the project's id, and a deleted project's may still
    # arrive from the spool: SQLite without AUTOINCREMENT gives the highest id again, and
    # a new project would inherit them (PostgreSQL's sequences never reuse one).
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(200))
    # Per-project override of the instance retention; NULL means the instance default.
    retention_days: Mapped[int | None] = mapped_column(default=None)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class DeletedProject(Base):
    """The id of a deleted project, kept for good: its rows in ClickHouse are deleted with
    it, and again by each retention pass, as long as any turn up (rows the spool still
    held for it). Only recorded ids are: a project id with rows but no project could be a
    project that a relational store restored from an older backup lacks
    (errortrack/storage/deleted.py)."""

    __tablename__ = "deleted_projects"

    project_id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    deleted_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())


class ProjectKey(Base):
    """A public ingest key (the user part of a DSN). A project may have several."""

    __tablename__ = "project_keys"
    # Keys are named by id over the API: never reuse a deleted one's (as users, 0008).
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(sa.ForeignKey("projects.id", ondelete="CASCADE"))
    public_key: Mapped[str] = mapped_column(sa.String(64), unique=True)
    # What the key is for ("web", "rotated after a leak"), as Sentry's key names.
    label: Mapped[str | None] = mapped_column(sa.String(200), default=None)
    is_active: Mapped[bool] = mapped_column(default=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ProjectMember(Base):
    __tablename__ = "project_members"

    project_id: Mapped[int] = mapped_column(
        sa.ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[int] = mapped_column(
        sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    role: Mapped[str] = mapped_column(sa.String(16))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)

    __table_args__ = (sa.CheckConstraint("role IN ('viewer', 'editor', 'admin')", name="role"),)


class Invitation(Base):
    __tablename__ = "invitations"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(sa.String(320))
    role: Mapped[str] = mapped_column(sa.String(16))
    # Kept in clear: the link must be copyable again from the list of pending invitations.
    token: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_by: Mapped[int | None] = mapped_column(
        sa.ForeignKey("users.id", ondelete="SET NULL"), default=None
    )
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    accepted_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), default=None)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), default=None)

    __table_args__ = (sa.CheckConstraint("role IN ('admin', 'member')", name="role"),)


class ApiToken(Base):
    __tablename__ = "api_tokens"
    # Tokens are named by id over the API: never reuse a revoked one's (as users, 0008).
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(sa.ForeignKey("users.id", ondelete="CASCADE"), index=True)
    description: Mapped[str] = mapped_column(sa.String(200))
    # The first characters of the secret, shown in lists so people can tell tokens apart.
    prefix: Mapped[str] = mapped_column(sa.String(16))
    # SHA-256 of the secret: the secret itself is random and high-entropy, so a fast hash
    # is enough and lets each request look the token up by an index.
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_used_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), default=None)


class LoginSession(Base):
    __tablename__ = "login_sessions"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(sa.ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    csrf_token: Mapped[str] = mapped_column(sa.String(64))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    last_seen_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), default=None)


class Issue(Base):
    """A group of error events sharing a fingerprint within a project."""

    __tablename__ = "issues"

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(sa.ForeignKey("projects.id", ondelete="CASCADE"))
    fingerprint: Mapped[str] = mapped_column(sa.String(64))
    title: Mapped[str] = mapped_column(sa.Text())
    culprit: Mapped[str] = mapped_column(sa.Text(), default="")
    level: Mapped[str] = mapped_column(sa.String(16), default="error")
    status: Mapped[str] = mapped_column(sa.String(16), default="unresolved")
    # When it was last resolved, while it is resolved (NULL otherwise): an event dated
    # before that, less the grouping's REGRESSION_MARGIN (55 min), is counted without
    # reopening it (an SDK's offline buffer, a backlog).
    resolved_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime(), default=None)
    first_seen: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    last_seen: Mapped[dt.datetime] = mapped_column(UTCDateTime())
    event_count: Mapped[int] = mapped_column(sa.BigInteger(), default=0)

    __table_args__ = (
        sa.UniqueConstraint("project_id", "fingerprint"),
        # One per order and status filter of the issues list, each ending on the id the
        # orders end on (relational migrations 0010 and 0011).
        sa.Index("ix_issues_project_last_seen_id", "project_id", "last_seen", "id"),
        sa.Index("ix_issues_project_first_seen_id", "project_id", "first_seen", "id"),
        sa.Index("ix_issues_project_count_id", "project_id", "event_count", "id"),
        sa.Index(
            "ix_issues_project_status_last_seen_id", "project_id", "status", "last_seen", "id"
        ),
        sa.Index("ix_issues_project_status_count_id", "project_id", "status", "event_count", "id"),
        # The id orders (sort=id, -id; relational migration 0011).
        sa.Index("ix_issues_project_id", "project_id", "id"),
        sa.Index("ix_issues_project_status_id", "project_id", "status", "id"),
        sa.CheckConstraint("status IN ('unresolved', 'resolved', 'muted')", name="status"),
        # Its events stay in ClickHouse keyed by its id, and some may land after a
        # delete: a reused id would list them under an unrelated new issue (0004).
        {"sqlite_autoincrement": True},
    )


class GroupedBatch(Base):
    """A writer batch whose events were already counted into issues.

    The grouping hook records the batch token in the same transaction as the counts, so
    that a batch replayed after a crash (same token) is not counted twice.
    """

    __tablename__ = "grouped_batches"

    token: Mapped[str] = mapped_column(sa.String(200), primary_key=True)
    processed_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), index=True)
