"""Logs over HTTP: read-only, a list per project and a tail to follow it."""

from __future__ import annotations

import falcon

from errortrack.api.auth import principal
from errortrack.api.middleware import session
from errortrack.api.params import load_query
from errortrack.api.schemas import api_doc
from errortrack.api.schemas.logs import LogPageOut, LogsQuery, LogsTailQuery, LogTailOut
from errortrack.auth.permissions import require_project
from errortrack.logs.query import list_logs
from errortrack.logs.tail import tail_logs
from errortrack.state import AppState


class ProjectLogs:
    def __init__(self, state: AppState) -> None:
        self._state = state

    @api_doc(
        "List a project's logs, newest first, with filters",
        query=LogsQuery,
        response=LogPageOut,
        tags=("logs",),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, project_id: int) -> None:
        # Access first: a caller who may not see the project learns nothing from a 400.
        require_project(session(req), principal(req), project_id, "read")
        args = load_query(req, LogsQuery)
        # The service returns exactly LogPageOut's shape (a test holds it to that), so it
        # is not dumped again through marshmallow: that would cost more than the query.
        resp.media = list_logs(
            self._state.api_clickhouse,
            project_id,
            args["filter"],
            args["page"],
            cursor=args["cursor"],
        )


class ProjectLogsTail:
    def __init__(self, state: AppState) -> None:
        self._state = state

    @api_doc(
        "Follow a project's logs in the order they are stored",
        query=LogsTailQuery,
        response=LogTailOut,
        tags=("logs",),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, project_id: int) -> None:
        require_project(session(req), principal(req), project_id, "read")
        args = load_query(req, LogsTailQuery)
        resp.media = tail_logs(
            self._state.api_clickhouse,
            project_id,
            args["filter"],
            args["per_page"],
            cursor=args["cursor"],
        )
