"""A trace over HTTP: its span tree with the logs and error events that happened in it."""

from __future__ import annotations

import falcon

from errortrack.api.auth import principal
from errortrack.api.middleware import session
from errortrack.api.params import load_query
from errortrack.api.schemas import api_doc
from errortrack.api.schemas.traces import SpanPageOut, SpansQuery, TraceOut, TracePath
from errortrack.auth.permissions import require_project
from errortrack.logs.filters import parse_trace_id
from errortrack.state import AppState
from errortrack.traces.story import trace_spans, trace_story


class ProjectTrace:
    def __init__(self, state: AppState) -> None:
        self._state = state

    @api_doc(
        "A trace's spans as a tree, with its logs and error events",
        response=TraceOut,
        path=TracePath,
        tags=("traces",),
    )
    def on_get(
        self, req: falcon.Request, resp: falcon.Response, project_id: int, trace_id: str
    ) -> None:
        require_project(session(req), principal(req), project_id, "read")
        story = trace_story(self._state.api_clickhouse, project_id, parse_trace_id(trace_id))
        # Built by the service in TraceOut's shape (a test holds it to that); dumping a
        # deep span tree again through marshmallow would only copy it.
        resp.media = story


class TraceSpans:
    def __init__(self, state: AppState) -> None:
        self._state = state

    @api_doc(
        "A trace's spans as a flat list in start order, paged (past the trace view's cap)",
        query=SpansQuery,
        response=SpanPageOut,
        path=TracePath,
        tags=("traces",),
    )
    def on_get(
        self, req: falcon.Request, resp: falcon.Response, project_id: int, trace_id: str
    ) -> None:
        require_project(session(req), principal(req), project_id, "read")
        args = load_query(req, SpansQuery)
        page = trace_spans(
            self._state.api_clickhouse,
            project_id,
            parse_trace_id(trace_id),
            args["page"],
            cursor=args["cursor"],
        )
        resp.media = page
