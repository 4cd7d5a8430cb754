"""Storage usage and cleanup (global admins only; docs/RETENTION.md)."""

from __future__ import annotations

import falcon

from errortrack.api.auth import principal
from errortrack.api.middleware import session
from errortrack.api.schemas import api_doc, load
from errortrack.api.schemas.storage import CleanupIn, CleanupOut, UsageOut
from errortrack.auth.permissions import require_global_admin
from errortrack.state import AppState
from errortrack.storage import cleanup, usage


def _end_auth_transaction(req: falcon.Request) -> None:
    """Commit what authenticating wrote (a token's or login session's last-used time,
    due once a minute) before any ClickHouse work. On SQLite that write opened the
    request's write transaction, and the database's one write lock was then held
    through every drop, delete or scan of the request (seconds for a project's
    cleanup), stalling the ingest writer's grouping hook, logins and every other
    writer meanwhile. The middleware still commits (or rolls back) what the handler
    writes after this, e.g. cleanup's removal of issues."""
    session(req).commit()


class Storage:
    def __init__(self, state: AppState) -> None:
        self._state = state

    @api_doc(
        "Rows, bytes and time span per table and project (global admin)",
        response=UsageOut,
        tags=("storage",),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        require_global_admin(principal(req))
        _end_auth_transaction(req)
        settings = self._state.settings
        report = usage.usage(
            session(req),
            self._state.api_clickhouse,
            default_retention_days=settings.retention_days,
            disk_cap_bytes=settings.disk_cap_bytes,
        )
        resp.media = UsageOut().dump(report)


class StorageCleanup:
    def __init__(self, state: AppState) -> None:
        self._state = state

    @api_doc(
        "Delete logs, events and spans older than N days, or count them (dry run)",
        request=CleanupIn,
        response=CleanupOut,
        tags=("storage",),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        require_global_admin(principal(req))
        _end_auth_transaction(req)
        body = load(req, CleanupIn)
        result = cleanup.cleanup(
            session(req), self._state.api_clickhouse, now=self._state.clock(), **body
        )
        resp.media = CleanupOut().dump(result.as_dict())
