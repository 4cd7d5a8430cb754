"""One relational transaction per request: opened lazily, committed on success; and
JSON answers rendered before it ends."""

from __future__ import annotations

import logging
from typing import Any

import falcon
import orjson
from sqlalchemy.orm import Session, sessionmaker

from errortrack import db
from errortrack.api import docs
from errortrack.api.errors import error_body, logged_path
from errortrack.api.params import NoQuery, load_query

log = logging.getLogger(__name__)


class RequestSession:
    """The request's session, created on first use so that requests without SQL pay nothing."""

    def __init__(self, factory: sessionmaker[Session]) -> None:
        self._factory = factory
        self._session: Session | None = None

    def get(self) -> Session:
        if self._session is None:
            self._session = self._factory()
        return self._session

    def finish(self, succeeded: bool) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        try:
            if succeeded:
                db.commit(session)
            else:
                session.rollback()
        finally:
            session.close()


class DatabaseSessions:
    def __init__(self, factory: sessionmaker[Session]) -> None:
        self._factory = factory

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.db = RequestSession(self._factory)

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool
    ) -> None:
        db: RequestSession | None = getattr(req.context, "db", None)
        if db is not None:
            # A handled domain error (4xx) must not leave half a change behind either.
            status = resp.status if isinstance(resp.status, int) else int(str(resp.status)[:3])
            db.finish(req_succeeded and status < 400)


def session(req: falcon.Request) -> Session:
    db: RequestSession = req.context.db
    return db.get()


class RenderJSON:
    """Encodes ``resp.media`` in the middleware, not when Falcon writes the body: an answer
    that cannot be encoded (found: a trace nested past orjson's 255 levels) then left
    after every error handler had run, as a 500 with an empty body, and a change made by
    the request stayed committed. Here it becomes the one error shape's 500, and the
    request's transaction (``DatabaseSessions``, listed before this) is rolled back."""

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool
    ) -> None:
        if resp.media is None or resp.text is not None or resp.data is not None:
            return
        if resp.content_type not in (None, falcon.MEDIA_JSON):
            return
        try:
            resp.data = orjson.dumps(resp.media)
        except TypeError:  # orjson.JSONEncodeError: not encodable, or nested too deep
            log.exception("answer of %s %s cannot be encoded", req.method, logged_path(req))
            resp.status = falcon.HTTP_500
            resp.data = orjson.dumps(error_body("internal_error", "internal server error"))
        resp.content_type = falcon.MEDIA_JSON


class HeadAsGet:
    """HEAD wherever GET is served (RFC 9110): routed and answered as the GET, then
    Falcon, seeing HEAD again, sends the GET's status and headers (its Content-Length
    too) without the body. Only the health probes had ``on_head``; every API route was a
    405. Done here rather than with an ``on_head`` per resource so that the routes, the
    OpenAPI document and the permission table keep listing GET alone."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.method == "HEAD":
            req.context.head = True
            req.method = "GET"

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: Any
    ) -> None:
        if getattr(req.context, "head", False) and getattr(resource, "on_get", None) is None:
            # No GET here: the route's 405 (or the static route) answers the HEAD as such.
            req.method = "HEAD"

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool
    ) -> None:
        if getattr(req.context, "head", False):
            req.method = "HEAD"
        allow = resp.get_header("Allow")
        if allow:
            methods = [m.strip() for m in allow.split(",")]
            if "GET" in methods and "HEAD" not in methods:
                methods.insert(methods.index("GET") + 1, "HEAD")
            # Falcon's own OPTIONS answer leaves OPTIONS out of its Allow, its 405 puts
            # it in: one route gave two lists (found in the twenty-second session's docs
            # audit). OPTIONS is answered on every route, so it is listed.
            if "OPTIONS" not in methods:
                methods.append("OPTIONS")
            resp.set_header("Allow", ", ".join(methods))


# On every management answer (SecurityHeaders), those server.py makes itself too.
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


class SecurityHeaders:
    """Headers on every answer of the management app (the API, /auth, the docs):
    - ``Cache-Control: no-store`` on every answer but the probes' and the docs'
      (``cacheable``): answers carry API tokens (shown once), invitation links, CSRF
      tokens and users' data, none of which a browser's or a proxy's cache should keep
      (RFC 6749 5.1 asks it of token answers);
    - ``X-Content-Type-Options: nosniff``: a browser takes each answer as its stated type;
    - ``X-Frame-Options: DENY`` and ``Referrer-Policy: no-referrer``: no page is to be
      framed by another site (the docs page had no such header), and no invitation link
      leaves in a Referer.
    A review found none of them (twenty-fifth session). Ingest is the SDKs' protocol and
    keeps its own headers."""

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool
    ) -> None:
        resp.set_headers(SECURITY_HEADERS)
        if not cacheable(req) and not resp.get_header("Cache-Control"):
            resp.set_header("Cache-Control", "no-store")


# The routes whose answers carry nothing of anyone's: a cache in front may keep them.
_CACHEABLE_ROUTES = frozenset({"/healthz", "/readyz", docs.DOCUMENT_PATH, "/docs", "/docs/init.js"})


def cacheable(req: falcon.Request) -> bool:
    """Whether an answer may be cached: decided by the route that answered, not by the
    path as spelled, and refused unless the route is known to be harmless. Falcon's
    router ignores leading slashes, so ``//api/tokens`` created a token whose secret went
    out cacheable when the header followed a ``/api/`` prefix (found in review).
    Swagger UI's files (the static route, which has no template) are cacheable under
    their one spelling; any other path with no route is a 404, not kept either."""
    if req.uri_template is not None:
        return req.uri_template in _CACHEABLE_ROUTES
    return req.path.startswith(f"{docs.ASSETS_PATH}/")


# The challenge every management 401 carries (RFC 9110 11.6.1: a 401 MUST send one).
# Bearer, the scheme API tokens use (RFC 6750); no browser shows a login dialog for it.
CHALLENGE = 'Bearer realm="errortrack"'


class AuthChallenge:
    """``WWW-Authenticate`` on every 401 of the management API, however it was raised.
    Not on ingest's: Sentry's protocol defines those (X-Sentry-Auth, docs/INGEST.md)."""

    def process_response(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, req_succeeded: bool
    ) -> None:
        if falcon.http_status_to_code(resp.status) == 401 and not resp.get_header(
            "WWW-Authenticate"
        ):
            resp.set_header("WWW-Authenticate", CHALLENGE)


class RefuseUndeclaredQuery:
    """A 400 naming the first query parameter sent to a responder that declares no query
    schema (``ApiDoc.query``), the answer the lists give a parameter they do not know:
    ``/api/projects?page=2`` answered the whole list, as if paged. Responders with a
    query schema check their own (``load_query``); responders without an ``ApiDoc``
    (health checks, the OpenAPI document, Swagger UI) take any query, as probes and
    cache-busting clients send one. Checked before the responder runs, so before
    credentials and ids: the answer is the same for every caller and every id."""

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: Any
    ) -> None:
        if resource is None or not req.params:
            return
        responder = getattr(resource, f"on_{req.method.lower()}", None)
        doc = getattr(responder, "__api_doc__", None)
        if doc is not None and doc.query is None:
            load_query(req, NoQuery)


class UnknownMethods:
    """405 with the route's ``Allow`` for a method Falcon does not know (``FOO``), as it
    answers one it knows but the route does not serve (``PROPFIND``); Falcon answered
    400 "Invalid HTTP method". Also for ``WEBSOCKET``, Falcon's name for a websocket
    connection, which ``configure`` lets through as an HTTP method: no HTTP request may
    reach an ``on_websocket`` responder. A path with no route stays a 404. In both apps
    (the ASGI ingest app awaits ``process_resource_async``)."""

    def process_resource(
        self, req: falcon.Request, resp: falcon.Response, resource: Any, params: Any
    ) -> None:
        if resource is not None and req.method not in _KNOWN_METHODS:
            raise falcon.HTTPMethodNotAllowed(allowed_methods(resource))

    async def process_resource_async(self, req: Any, resp: Any, resource: Any, params: Any) -> None:
        self.process_resource(req, resp, resource, params)


# Without WEBSOCKET, which is no method an HTTP request may have (see above).
_KNOWN_METHODS = frozenset(falcon.COMBINED_METHODS) - {"WEBSOCKET"}


def allowed_methods(resource: Any) -> list[str]:
    """The ``Allow`` Falcon's own 405 gives ``resource`` (falcon.routing.util,
    set_default_responders): its responders in order, then OPTIONS, which Falcon
    answers for every route. HeadAsGet adds HEAD beside GET on the way out."""
    methods = [m for m in sorted(falcon.routing.map_http_methods(resource)) if m != "WEBSOCKET"]
    if "OPTIONS" not in methods:
        methods.append("OPTIONS")
    return methods
