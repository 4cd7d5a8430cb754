"""The served application (ASGI): SDK ingest on the event loop, everything else in threads.

gunicorn's ``asgi`` worker runs one event loop per process. Ingest is many small,
CPU-cheap requests whose only wait is the spool's group fdatasync, so it is served on
the loop (``api/ingest.py``). The management API, the docs and health checks block on
SQLAlchemy and ClickHouse queries, so they stay a WSGI Falcon app (``app.create_app``)
run in a thread pool by a2wsgi. Measured (docs/INGEST.md, "Serving"): the gthread
worker topped out near 3,000 small requests/s on 2 cores, the asgi worker near 14,000.
"""

from __future__ import annotations

import re
from typing import Any

import falcon.asgi
from a2wsgi import WSGIMiddleware

from errortrack.api import ingest as ingest_api
from errortrack.app import configure, create_app
from errortrack.config import Settings
from errortrack.ingest import runtime as ingest_runtime
from errortrack.issues.grouping import GroupingHook
from errortrack.state import AppState

# Threads for the management API (a2wsgi's pool); `errortrack serve --threads`.
API_THREADS = 8
# Everything under these paths is ingest's, including a malformed project id (its 404).
_INGEST = re.compile(r"/api/[^/]+/(?:envelope|store)/?")


class ServerApp:
    """Dispatches by path: ingest to the ASGI app, the rest to the WSGI app."""

    def __init__(self, ingest: falcon.asgi.App, api: falcon.App, api_threads: int) -> None:
        self.ingest = ingest
        self.api = WSGIMiddleware(api, workers=api_threads)  # type: ignore[arg-type]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http" and _INGEST.fullmatch(scope["path"]):
            await self.ingest(scope, receive, send)
        elif kind == "http":
            await self.api(scope, receive, send)
        elif kind == "lifespan":
            await _lifespan(receive, send)
        # Websockets: none are served; the server closes the connection.


async def _lifespan(receive: Any, send: Any) -> None:
    # Background work starts and stops in gunicorn's worker hooks (cli.py), which also
    # run where there is no lifespan protocol; here there is nothing to do.
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def create_server_app(
    settings: Settings | None = None,
    *,
    state: AppState | None = None,
    api_threads: int = API_THREADS,
) -> ServerApp:
    if state is None:
        state = AppState.build(settings or Settings.from_env())
    if state.ingest is None:
        # The events hook groups each batch into issues in the writer thread.
        grouping = GroupingHook(state.sessions, store=state.clickhouse, clock=state.clock)
        state.ingest = ingest_runtime.build(state, hooks={"events": grouping})
        state.background.append(state.ingest)
    app = falcon.asgi.App()
    configure(app)
    max_body = state.settings.max_body_bytes
    app.add_route(
        "/api/{project_id:int}/envelope", ingest_api.Envelope(state.ingest.ingest, max_body)
    )
    app.add_route("/api/{project_id:int}/store", ingest_api.Store(state.ingest.ingest, max_body))
    return ServerApp(app, create_app(state=state), api_threads)
