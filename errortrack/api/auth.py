"""Who is calling: ``principal(req) -> Principal`` for any resource.

Usage in a Falcon responder (the only thing a resource needs)::

    from errortrack.api.auth import principal
    from errortrack.api.middleware import session
    from errortrack.auth.permissions import require_project

    def on_get(self, req, resp, project_id: int):
        me = principal(req)                       # 401 unless authenticated
        require_project(session(req), me, project_id, "read")   # 404 / 403
        ...

``principal(req)`` authenticates lazily, once per request (cached on ``req.context``),
so unauthenticated routes (ingest, health, login) pay nothing. It accepts:

- ``Authorization: Bearer <api token>`` -- always wins when the header is present; a
  malformed header or an unknown/revoked token is 401 even if a cookie is also sent;
- the dashboard's session cookie (``errortrack_session``). For writes (any method but
  GET, HEAD, OPTIONS) it also requires the header ``X-CSRF-Token`` equal to the
  session's CSRF token, else 403. Bearer tokens need no CSRF header: browsers never
  attach them by themselves.

No credentials, or expired/unknown ones -> :class:`~errortrack.errors.Unauthorized` (401).
The middleware :class:`Authentication` must be installed (``create_app`` does it).
"""

from __future__ import annotations

from typing import Any

import falcon

from errortrack.api.middleware import session
from errortrack.auth import sessions, tokens
from errortrack.auth.permissions import Principal
from errortrack.errors import Forbidden, Unauthorized
from errortrack.models import LoginSession
from errortrack.state import Clock

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class Authentication:
    """Falcon middleware: makes the clock available to ``principal(req)``."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.auth_clock = self._clock
        req.context.principal = None
        req.context.login_session = None


def principal(req: falcon.Request) -> Principal:
    """The authenticated caller; raises 401 (or 403 for a cookie write without CSRF)."""
    cached: Principal | None = req.context.principal
    if cached is None:
        cached = _authenticate(req)
        req.context.principal = cached
    return cached


def login_session(req: falcon.Request) -> LoginSession | None:
    """The cookie session behind ``principal(req)``, None when it came from a token."""
    principal(req)
    found: LoginSession | None = req.context.login_session
    return found


def _authenticate(req: falcon.Request) -> Principal:
    now = req.context.auth_clock()
    header = req.get_header("Authorization")
    if header is not None:
        scheme, _, secret = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise Unauthorized("expected Authorization: Bearer <token>")
        user = tokens.authenticate_token(session(req), secret.strip(), now=now)
        if user is None:
            raise Unauthorized("invalid or revoked API token")
        return Principal.of(user, "token")
    cookie = session_cookie(req)
    if cookie is None:
        raise Unauthorized("authentication required: a bearer token or a login session")
    found = sessions.resolve_session(session(req), cookie, now=now)
    if found is None:
        raise Unauthorized("login session expired or invalid; log in again")
    login, user = found
    if req.method not in SAFE_METHODS and not sessions.csrf_ok(
        login, req.get_header("X-CSRF-Token")
    ):
        raise Forbidden("missing or wrong X-CSRF-Token header for a cookie-authenticated write")
    req.context.login_session = login
    return Principal.of(user, "session")


def session_cookie(req: falcon.Request) -> str | None:
    """The login session's secret the request's cookie holds, if it sends one."""
    values: list[Any] = req.get_cookie_values(sessions.COOKIE_NAME) or []
    return str(values[0]) if values else None
