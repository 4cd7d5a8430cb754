"""THE permission table: every endpoint x every kind of caller -> expected HTTP status.

``tests/e2e/test_permission_matrix.py`` drives each row with each caller and checks the
status; ``docs/permissions.md`` is generated from the same rows (a test fails when it is
stale). Regenerate it with::

    .venv/bin/python -m tests.access_matrix        # or: make permissions

Adding an endpoint (e.g. issues, logs, traces): append a ``Row``. ``prepare(world, caller)``
returns ``(method, path, json_body)``; it runs once per caller, so a row that destroys or
consumes something (delete, accept) creates a fresh target each time. ``world`` is a
``tests.access_world.World``: ``world.project_id`` is a project where the ``viewer``,
``editor`` and ``padmin`` callers have those roles; ``world.add_project()`` makes another
such project; ``world.state`` gives the stores.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from errortrack import db
from errortrack.auth.tokens import create_token
from errortrack.team.invitations import create_invitation
from tests.access_world import CALLERS, PASSWORD, World

Request = tuple[str, str, Any]
ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "permissions.md"
_serial = itertools.count(1)

COLUMN_TITLES = {
    "anonymous": "no credentials",
    "bad_token": "bad token",
    "primary": "primary admin",
    "admin": "global admin",
    "outsider": "member outside project",
    "viewer": "project viewer",
    "editor": "project editor",
    "padmin": "project admin",
}


@dataclasses.dataclass(frozen=True)
class Row:
    endpoint: str  # "METHOD /path/{param}" as documented in docs/API.md
    expected: str  # statuses in CALLERS order, space-separated
    prepare: Callable[[World, str], Request]
    case: str = ""

    def statuses(self) -> dict[str, int]:
        codes = [int(code) for code in self.expected.split()]
        assert len(codes) == len(CALLERS), self.endpoint
        return dict(zip(CALLERS, codes, strict=True))


def _new_invitation(world: World) -> Any:
    with db.unit_of_work(world.factory) as s:
        return create_invitation(
            s,
            email=f"invitee{next(_serial)}@example.com",
            role="member",
            created_by=world.users["primary"],
            now=world.state.clock(),
        )


def _invitation(world: World) -> str:
    return str(_new_invitation(world).token)


def _invitation_id(world: World) -> int:
    return int(_new_invitation(world).id)


def _fresh_member(world: World) -> int:
    user_id = world.add_user()
    world.add_member(world.project_id, user_id, "viewer")
    return user_id


def _key_id(world: World) -> int:
    """A fresh ingest key of ``world.project_id`` (rows that change or delete it)."""
    from errortrack.projects.keys import create_key

    with db.unit_of_work(world.factory) as s:
        return int(create_key(s, world.project_id, label="matrix").id)


def _token_id(world: World, owner: str) -> int:
    """A new token of ``owner`` (the primary user's for callers without an account)."""
    user = owner if owner in world.users else "primary"
    with db.unit_of_work(world.factory) as s:
        new = create_token(s, user_id=world.users[user], description="x", now=world.state.clock())
        return int(new.token.id)


def _issue(world: World) -> int:
    """A fresh issue with one event in ``world.project_id`` (rows that change it get their own)."""
    from tests.issue_data import add_event, add_issue

    issue_id = add_issue(world.state, world.project_id, "boom")
    add_event(world.state, world.project_id, issue_id, at=1)
    return issue_id


def _issue_event(world: World) -> tuple[int, str]:
    """A fresh issue in ``world.project_id`` and the id of its one event (32 hex)."""
    from tests.issue_data import add_event, add_issue

    issue_id = add_issue(world.state, world.project_id, "boom")
    event = add_event(world.state, world.project_id, issue_id, at=1)
    return issue_id, str(event["event_id"])


def _event_path(world: World) -> str:
    issue_id, event_id = _issue_event(world)
    return f"/api/projects/{world.project_id}/issues/{issue_id}/events/{event_id}"


def _project_event_path(world: World) -> str:
    _, event_id = _issue_event(world)
    return f"/api/projects/{world.project_id}/events/{event_id}"


def _trace(world: World) -> str:
    from tests.issue_data import add_span

    trace_id = "5e" * 16
    add_span(world.state, world.project_id, trace_id, "a" * 16, is_segment=True)
    return trace_id


P = "/api/projects/{project_id}"

ROWS: list[Row] = [
    Row(
        "POST /auth/register",
        "403 403 403 403 403 403 403 403",
        lambda w, c: ("POST", "/auth/register", {"email": "x@example.com", "password": "p" * 12}),
    ),
    Row(
        "POST /auth/login",
        "200 200 200 200 200 200 200 200",
        lambda w, c: ("POST", "/auth/login", {"email": "viewer@example.com", "password": PASSWORD}),
        "right password (credentials sent along are ignored)",
    ),
    Row(
        "POST /auth/login",
        "401 401 401 401 401 401 401 401",
        lambda w, c: (
            "POST",
            "/auth/login",
            {"email": f"{c}@example.com", "password": "wrong password"},
        ),
        "wrong password for the caller's email (no such account without one)",
    ),
    Row(
        "POST /auth/logout",
        "401 401 204 204 204 204 204 204",
        lambda w, c: ("POST", "/auth/logout", None),
    ),
    Row("GET /api/me", "401 401 200 200 200 200 200 200", lambda w, c: ("GET", "/api/me", None)),
    Row(
        "POST /api/me/password",
        "401 401 200 200 200 200 200 200",
        lambda w, c: (
            "POST",
            "/api/me/password",
            {"current_password": PASSWORD, "new_password": PASSWORD},
        ),
        "the caller's own password, set to the same again",
    ),
    Row(
        "GET /auth/invitations/{token}",
        "200 200 200 200 200 200 200 200",
        lambda w, c: ("GET", f"/auth/invitations/{_invitation(w)}", None),
    ),
    Row(
        "POST /auth/invitations/{token}/accept",
        "201 201 201 201 201 201 201 201",
        lambda w, c: ("POST", f"/auth/invitations/{_invitation(w)}/accept", {"password": PASSWORD}),
    ),
    Row(
        "GET /api/team", "401 401 200 200 403 403 403 403", lambda w, c: ("GET", "/api/team", None)
    ),
    Row(
        "PATCH /api/team/{user_id}",
        "401 401 200 200 403 403 403 403",
        lambda w, c: ("PATCH", f"/api/team/{w.add_user()}", {"role": "admin"}),
    ),
    Row(
        "DELETE /api/team/{user_id}",
        "401 401 204 204 403 403 403 403",
        lambda w, c: ("DELETE", f"/api/team/{w.add_user()}", None),
    ),
    Row(
        "GET /api/invitations",
        "401 401 200 200 403 403 403 403",
        lambda w, c: ("GET", "/api/invitations", None),
    ),
    Row(
        "POST /api/invitations",
        "401 401 201 201 403 403 403 403",
        lambda w, c: (
            "POST",
            "/api/invitations",
            {"email": f"new-{c}@example.com", "role": "member"},
        ),
    ),
    Row(
        "DELETE /api/invitations/{invitation_id}",
        "401 401 204 204 403 403 403 403",
        lambda w, c: ("DELETE", f"/api/invitations/{_invitation_id(w)}", None),
    ),
    Row(
        "GET /api/projects",
        "401 401 200 200 200 200 200 200",
        lambda w, c: ("GET", "/api/projects", None),
    ),
    Row(
        "POST /api/projects",
        "401 401 201 201 201 201 201 201",
        lambda w, c: ("POST", "/api/projects", {"name": f"made by {c}"}),
    ),
    Row(
        f"GET {P}",
        "401 401 200 200 404 200 200 200",
        lambda w, c: ("GET", f"/api/projects/{w.project_id}", None),
    ),
    Row(
        f"GET {P}",
        "401 401 404 404 404 404 404 404",
        lambda w, c: ("GET", "/api/projects/999999", None),
        "project does not exist",
    ),
    Row(
        f"PATCH {P}",
        "401 401 200 200 404 403 200 200",
        lambda w, c: ("PATCH", f"/api/projects/{w.project_id}", {"name": f"renamed by {c}"}),
    ),
    Row(
        f"DELETE {P}",
        "401 401 204 204 404 403 403 204",
        lambda w, c: ("DELETE", f"/api/projects/{w.add_project()}", None),
    ),
    Row(
        f"GET {P}/members",
        "401 401 200 200 404 200 200 200",
        lambda w, c: ("GET", f"/api/projects/{w.project_id}/members", None),
    ),
    Row(
        f"PUT {P}/members",
        "401 401 200 200 404 403 403 200",
        lambda w, c: (
            "PUT",
            f"/api/projects/{w.project_id}/members",
            {"user_id": w.add_user(), "role": "viewer"},
        ),
    ),
    Row(
        f"PATCH {P}/members/{{user_id}}",
        "401 401 200 200 404 403 403 200",
        lambda w, c: (
            "PATCH",
            f"/api/projects/{w.project_id}/members/{_fresh_member(w)}",
            {"role": "editor"},
        ),
    ),
    Row(
        f"DELETE {P}/members/{{user_id}}",
        "401 401 204 204 404 403 403 204",
        lambda w, c: ("DELETE", f"/api/projects/{w.project_id}/members/{_fresh_member(w)}", None),
    ),
    Row(
        f"GET {P}/keys",
        "401 401 200 200 404 200 200 200",
        lambda w, c: ("GET", f"/api/projects/{w.project_id}/keys", None),
    ),
    Row(
        f"POST {P}/keys",
        "401 401 201 201 404 403 403 201",
        lambda w, c: ("POST", f"/api/projects/{w.project_id}/keys", {"label": "web"}),
    ),
    Row(
        f"GET {P}/keys/{{key_id}}",
        "401 401 200 200 404 200 200 200",
        lambda w, c: ("GET", f"/api/projects/{w.project_id}/keys/{_key_id(w)}", None),
    ),
    Row(
        f"PATCH {P}/keys/{{key_id}}",
        "401 401 200 200 404 403 403 200",
        lambda w, c: (
            "PATCH",
            f"/api/projects/{w.project_id}/keys/{_key_id(w)}",
            {"is_active": False},
        ),
    ),
    Row(
        f"DELETE {P}/keys/{{key_id}}",
        "401 401 204 204 404 403 403 204",
        lambda w, c: ("DELETE", f"/api/projects/{w.project_id}/keys/{_key_id(w)}", None),
    ),
    Row(
        "GET /api/tokens",
        "401 401 200 200 200 200 200 200",
        lambda w, c: ("GET", "/api/tokens", None),
    ),
    Row(
        "POST /api/tokens",
        "401 401 201 201 201 201 201 201",
        lambda w, c: ("POST", "/api/tokens", {"description": "ci"}),
    ),
    Row(
        "DELETE /api/tokens/{token_id}",
        "401 401 204 204 204 204 204 204",
        lambda w, c: ("DELETE", f"/api/tokens/{_token_id(w, c)}", None),
        "own token",
    ),
    Row(
        "DELETE /api/tokens/{token_id}",
        "401 401 404 404 404 404 404 404",
        lambda w, c: (
            "DELETE",
            f"/api/tokens/{_token_id(w, 'outsider' if c != 'outsider' else 'viewer')}",
            None,
        ),
        "someone else's token",
    ),
    # Storage (issue 7): global admins only; the cleanup row is a dry run (deletes nothing).
    Row(
        "GET /api/storage",
        "401 401 200 200 403 403 403 403",
        lambda w, c: ("GET", "/api/storage", None),
    ),
    Row(
        "POST /api/storage/cleanup",
        "401 401 200 200 403 403 403 403",
        lambda w, c: ("POST", "/api/storage/cleanup", {"older_than_days": 30, "dry_run": True}),
        "dry run",
    ),
    # Logs, issues and traces (issue 6): read for viewers and up; issue changes for editors.
    Row(
        f"GET {P}/logs",
        "401 401 200 200 404 200 200 200",
        lambda w, c: ("GET", f"/api/projects/{w.project_id}/logs?level=error,fatal", None),
    ),
    Row(
        f"GET {P}/logs/tail",
        "401 401 200 200 404 200 200 200",
        lambda w, c: ("GET", f"/api/projects/{w.project_id}/logs/tail?level=error", None),
    ),
    Row(
        f"GET {P}/issues",
        "401 401 200 200 404 200 200 200",
        lambda w, c: ("GET", f"/api/projects/{w.project_id}/issues", None),
    ),
    Row(
        f"GET {P}/issues",
        "401 401 200 200 404 200 200 200",
        lambda w, c: (
            "GET",
            f"/api/projects/{w.project_id}/issues?level=error&q=boom&environment=production",
            None,
        ),
        "filtered",
    ),
    Row(
        f"GET {P}/issues/{{issue_id}}",
        "401 401 200 200 404 200 200 200",
        lambda w, c: ("GET", f"/api/projects/{w.project_id}/issues/{_issue(w)}", None),
    ),
    Row(
        f"DELETE {P}/issues/{{issue_id}}",
        "401 401 204 204 404 403 204 204",
        lambda w, c: ("DELETE", f"/api/projects/{w.project_id}/issues/{_issue(w)}", None),
    ),
    Row(
        f"GET {P}/issues/{{issue_id}}/events",
        "401 401 200 200 404 200 200 200",
        lambda w, c: ("GET", f"/api/projects/{w.project_id}/issues/{_issue(w)}/events", None),
    ),
    Row(
        f"GET {P}/issues/{{issue_id}}/events/latest",
        "401 401 200 200 404 200 200 200",
        lambda w, c: (
            "GET",
            f"/api/projects/{w.project_id}/issues/{_issue(w)}/events/latest",
            None,
        ),
    ),
    Row(
        f"GET {P}/issues/{{issue_id}}/events/{{event_id}}",
        "401 401 200 200 404 200 200 200",
        lambda w, c: ("GET", _event_path(w), None),
    ),
    *[
        Row(
            f"POST {P}/issues/{{issue_id}}/{action}",
            "401 401 200 200 404 403 200 200",
            lambda w, c, action=action: (
                "POST",
                f"/api/projects/{w.project_id}/issues/{_issue(w)}/{action}",
                None,
            ),
        )
        for action in ("resolve", "mute", "unresolve")
    ],
    Row(
        f"GET {P}/events",
        "401 401 200 200 404 200 200 200",
        lambda w, c: ("GET", f"/api/projects/{w.project_id}/events?trace_id={'5e' * 16}", None),
    ),
    Row(
        f"GET {P}/events/{{event_id}}",
        "401 401 200 200 404 200 200 200",
        lambda w, c: ("GET", _project_event_path(w), None),
    ),
    Row(
        f"GET {P}/traces/{{trace_id}}",
        "401 401 200 200 404 200 200 200",
        lambda w, c: ("GET", f"/api/projects/{w.project_id}/traces/{_trace(w)}", None),
    ),
    Row(
        f"GET {P}/traces/{{trace_id}}/spans",
        "401 401 200 200 404 200 200 200",
        lambda w, c: ("GET", f"/api/projects/{w.project_id}/traces/{_trace(w)}/spans", None),
    ),
]


def render_markdown() -> str:
    """docs/permissions.md, generated from ROWS."""
    titles = [COLUMN_TITLES[c] for c in CALLERS]
    lines = [
        "# Permissions: who gets which status from which endpoint",
        "",
        "Generated from `tests/access_matrix.py` (the table the permission-matrix test",
        "checks every endpoint against); do not edit by hand. Regenerate with",
        "`make permissions` (`.venv/bin/python -m tests.access_matrix`).",
        "",
        "Columns: no `Authorization` header and no cookie; a bearer token that does not",
        "exist; the primary user (global admin); another global admin; a global member who",
        "is in no project; global members who are viewer, editor or admin of the project.",
        "Callers authenticate with bearer tokens here; a session cookie gives the same",
        "results (plus the CSRF rule for writes, see docs/API.md).",
        "401 no or bad credentials, 403 not allowed, 404 project not visible (its existence",
        "is not revealed) or not found.",
        "",
        "| endpoint | case | " + " | ".join(titles) + " |",
        "|---|---|" + "---|" * len(titles),
    ]
    for row in ROWS:
        codes = " | ".join(str(code) for code in row.statuses().values())
        lines.append(f"| `{row.endpoint}` | {row.case} | {codes} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    DOC.write_text(render_markdown())
    sys.stdout.write(f"wrote {DOC.relative_to(ROOT)} ({len(ROWS)} rows)\n")
