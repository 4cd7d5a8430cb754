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
        settings = self._state.settings
        report = usage.usage(
            session(req),
            self._state.clickhouse,
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
        body = load(req, CleanupIn)
        result = cleanup.cleanup(
            session(req), self._state.clickhouse, now=self._state.clock(), **body
        )
        resp.media = CleanupOut().dump(result.as_dict())
