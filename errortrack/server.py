"""The served application (ASGI): SDK ingest on the event loop, everything else in threads.

gunicorn's ``asgi`` worker runs one event loop per process. Ingest is many small,
CPU-cheap requests whose only wait is the spool's group fdatasync, so it is served on
the loop (``api/ingest.py``). The management API, the docs and health checks block on
SQLAlchemy and ClickHouse queries, so they stay a WSGI Falcon app (``app.create_app``)
run in a thread pool by a2wsgi. Measured (docs/INGEST.md, "Serving"): the gthread
worker topped out near 3,000 small requests/s on 2 cores, the asgi worker near 14,000.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Protocol
from urllib.parse import unquote_to_bytes

import falcon
import falcon.asgi
import orjson
from a2wsgi import WSGIMiddleware

from errortrack.api import health
from errortrack.api import ingest as ingest_api
from errortrack.api.errors import error_body
from errortrack.api.middleware import SECURITY_HEADERS
from errortrack.api.schemas import MAX_BODY_BYTES
from errortrack.app import AsgiApp, configure, create_app
from errortrack.config import Settings
from errortrack.errors import ErrortrackError, RequestTimeout
from errortrack.ingest import runtime as ingest_runtime
from errortrack.issues.grouping import GroupingHook
from errortrack.state import AppState

# Threads for the management API (a2wsgi's pool); `errortrack serve --threads`.
API_THREADS = 8
# Everything under these paths is ingest's, including a malformed project id (its 404).
_INGEST = re.compile(r"/api/[^/]+/(?:envelope|store)/?")
_HEALTHZ = re.compile(r"/healthz/?")
# Readiness is answered by the ASGI app too, on the loop (api/health.py, ReadyzOnLoop).
_READYZ = re.compile(r"/readyz/?")
# /healthz as the management app answers it (orjson's encoding of {"status": "ok"}).
_HEALTHZ_BODY = b'{"status":"ok"}'


class Lifecycle(Protocol):
    """The worker's background work (``asgi.Lifecycle``): each call is idempotent, as
    serve's gunicorn hooks and the ASGI lifespan both make it."""

    def start(self) -> None: ...
    def stop(self) -> None: ...


class ServerApp:
    """Dispatches by path: ingest to the ASGI app, the rest to the WSGI app."""

    def __init__(
        self,
        ingest: falcon.asgi.App,
        api: falcon.App,
        api_threads: int,
        lifecycle: Lifecycle | None = None,
    ) -> None:
        self.ingest = ingest
        self.api = WSGIMiddleware(api, workers=api_threads)  # type: ignore[arg-type]
        # None for apps the tests drive in process (falcon's test client runs the
        # lifespan around every request): they start and stop what they need themselves.
        self.lifecycle = lifecycle

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http" and not scope["path"].startswith("/"):
            scope = _origin_form(scope)
        if kind == "http" and (
            _INGEST.fullmatch(scope["path"]) or _READYZ.fullmatch(scope["path"])
        ):
            headers = scope.get("headers")
            # gunicorn gives a list (other servers may give a one-shot iterable: not read).
            expect = isinstance(headers, list) and any(h[0] == b"expect" for h in headers)
            body = ingest_api.IngestBody(receive, defer=expect)
            await self.ingest({**scope, ingest_api.IngestBody.KEY: body}, body, send)
        elif (
            kind == "http"
            and scope["method"] in ("GET", "HEAD")
            and _HEALTHZ.fullmatch(scope["path"])
        ):
            await _healthz(scope, send)
        elif kind == "http":
            await self._api(scope, receive, send)
        elif kind == "lifespan":
            await _lifespan(self.lifecycle, receive, send)
        # Websockets: none are served; the server closes the connection.

    async def _api(self, scope: Any, receive: Any, send: Any) -> None:
        """The management API, its request body read here on the loop first: a2wsgi
        reads it in the request's thread, so eight clients trickling a login body a byte
        at a time held all eight threads and the whole API (HTTP review, twenty-third
        session). Bodies are small (``MAX_BODY_BYTES``); past that, the app sees what
        was read and refuses it (413)."""
        # ASGI allows any iterable of headers, each any iterable of two (falcon's test
        # client sends one-shot iterators for both): read them once, as tuples.
        scope = {**scope, "headers": [tuple(h) for h in scope.get("headers", ())]}
        if not _body_to_read(scope["headers"]):
            await self.api(scope, receive, send)
            return
        try:
            body = await asyncio.wait_for(_read_body(receive, MAX_BODY_BYTES + 1), API_BODY_SECONDS)
        except TimeoutError:
            body = None
        if body is None:
            # Too slow, or cut off: gunicorn says "disconnect" both for a client gone and
            # for one silent for its timeout, who is still there to read the answer (it
            # got gunicorn's plain-text 500 when nothing was sent).
            await _answer(
                send,
                RequestTimeout(
                    f"the request body did not arrive whole within {API_BODY_SECONDS} s"
                ),
            )
            return
        # a2wsgi types the events as TypedDicts; these are the same dicts.
        await self.api(scope, _Replay(body, receive), send)  # type: ignore[arg-type]


# Seconds a management request's body may take to arrive whole.
API_BODY_SECONDS = 30


def _body_to_read(headers: list[Any]) -> bool:
    """Whether the request has a body to read before the app: one chunked, or one of a
    length the app takes. A declared length over the cap goes to the app unread, which
    refuses it by its header alone (413): reading it first sent ``100 Continue`` to a
    client that asked, which then uploaded a body refused anyway (diff review)."""
    for name, value in headers:
        if name == b"transfer-encoding":
            return True
        if name == b"content-length":
            length = value.strip()
            return length.isdigit() and 0 < int(length) <= MAX_BODY_BYTES
    return False


async def _read_body(receive: Any, limit: int) -> bytes | None:
    """At most ``limit`` bytes of the body (more are the app's to refuse), or None when
    the client went away first."""
    parts: list[bytes] = []
    size = 0
    while size < limit:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        parts.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(parts)


class _Replay:
    """``receive`` for the WSGI app: the body read on the loop, then the client's own."""

    __slots__ = ("_body", "_receive")

    def __init__(self, body: bytes, receive: Any) -> None:
        self._body: bytes | None = body
        self._receive = receive

    async def __call__(self) -> dict[str, Any]:
        if self._body is None:
            message: dict[str, Any] = await self._receive()
            return message
        body, self._body = self._body, None
        return {"type": "http.request", "body": body, "more_body": False}


async def _answer(send: Any, error: ErrortrackError) -> None:
    """``error`` in the one JSON shape, for the management app from outside it; a client
    already gone is not an error (gunicorn drops what is sent to a closed connection).
    With the headers the app's SecurityHeaders gives every answer it makes (this 408 had
    none of them): nothing here is cacheable."""
    body = orjson.dumps(error_body(error.code, error.message, error.field))
    await send(
        {
            "type": "http.response.start",
            "status": error.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
                (b"cache-control", b"no-store"),
                *_SECURITY_HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


_SECURITY_HEADERS = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]


# An absolute-form request target's scheme and authority ("http://host:port").
_ABSOLUTE = re.compile(r"https?://[^/]*", re.IGNORECASE)
_ABSOLUTE_RAW = re.compile(rb"https?://[^/]*", re.IGNORECASE)


def _origin_form(scope: Any) -> Any:
    """The scope of an absolute-form request (``GET http://host/healthz HTTP/1.1``) with
    the path alone, as an origin-form request has it. RFC 9112 3.2.2: a server MUST
    accept the absolute form; gunicorn's asgi worker hands the whole URI over as
    ``path`` and ``raw_path`` (gunicorn/asgi/parser.py), and every such request was a
    404. Only http and https: other targets stay as they are (no route; a 404). The
    authority is not checked against Host, as Host is not checked either; the query is
    already apart, in ``query_string``."""
    raw = scope.get("raw_path") or b""
    found = _ABSOLUTE_RAW.match(raw)
    if found is not None:
        # From the bytes as received, decoded as gunicorn decodes a path: a "%2F" in the
        # authority must not end it.
        raw_path = raw[found.end() :] or b"/"
        path = unquote_to_bytes(raw_path).decode("utf-8", "replace")
        return {**scope, "path": path, "raw_path": raw_path}
    found_path = _ABSOLUTE.match(scope["path"])
    if found_path is None:
        return scope
    # A server that gives no raw_path: the decoded path is all there is.
    return {**scope, "path": scope["path"][found_path.end() :] or "/"}


async def _no_ingest_route(
    req: falcon.asgi.Request, resp: falcon.asgi.Response | None, **_: Any
) -> None:
    """An ingest path with a malformed project id (``/api/abc/envelope/``,
    ``/api/٢/envelope/``, ``/api/0/store/``): the common 404, with the CORS headers of
    every ingest answer (``ingest_api.AnswerCors``)."""
    raise falcon.HTTPNotFound()


async def _healthz(scope: Any, send: Any) -> None:
    """Liveness, answered on the event loop: the management API's threads can all be
    held by requests waiting on a store that does not answer (a network partition),
    and a liveness probe that waited behind them would get a working process killed."""
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(_HEALTHZ_BODY)).encode()),
            ],
        }
    )
    body = b"" if scope["method"] == "HEAD" else _HEALTHZ_BODY
    await send({"type": "http.response.body", "body": body})


async def _lifespan(lifecycle: Lifecycle | None, receive: Any, send: Any) -> None:
    # The served app starts its background work (spool writer, retention) here as well
    # as in serve's gunicorn hooks (cli.py, which also run where there is no lifespan,
    # e.g. on a quick shutdown): under a plain ``gunicorn -k asgi`` the hooks are not
    # there, and ingest answered 200 while nothing ever inserted the spool.
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                if lifecycle is not None:
                    lifecycle.start()
            except Exception as exc:
                # gunicorn stops on this (it does not boot the worker again and again).
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                return
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            if lifecycle is not None:
                # In a thread: the flush waits for inserts, and the loop must go on
                # waking the requests whose records the spool syncs meanwhile.
                await asyncio.to_thread(lifecycle.stop)
            await send({"type": "lifespan.shutdown.complete"})
            return


def create_server_app(
    settings: Settings | None = None,
    *,
    state: AppState | None = None,
    api_threads: int = API_THREADS,
    lifecycle: Lifecycle | None = None,
) -> ServerApp:
    if state is None:
        state = AppState.build(settings or Settings.from_env())
    if state.ingest is None:
        # The events hook groups each batch into issues in the writer thread.
        grouping = GroupingHook(state.sessions, store=state.clickhouse, clock=state.clock)
        state.ingest = ingest_runtime.build(state, hooks={"events": grouping})
        state.background.append(state.ingest)
    app = AsgiApp(middleware=[ingest_api.AnswerCors()])
    configure(app)
    max_body = state.settings.max_body_bytes
    max_envelope = state.settings.max_envelope_bytes
    # One budget for both routes: they share the worker's memory.
    budget = state.ingest.bodies
    app.add_route(
        "/api/{project_id:int}/envelope",
        ingest_api.Envelope(state.ingest.ingest, max_body, max_envelope, budget=budget),
    )
    app.add_route(
        "/api/{project_id:int}/store",
        ingest_api.Store(state.ingest.ingest, max_body, budget=budget),
    )
    app.add_route("/readyz", health.ReadyzOnLoop(health.Readyz(state)))
    # Only ingest paths and /readyz reach this app (_INGEST, _READYZ), so whatever no
    # route takes is an ingest path.
    app.add_sink(_no_ingest_route)
    return ServerApp(app, create_app(state=state), api_threads, lifecycle)
