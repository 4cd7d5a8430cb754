"""Every error leaves as one JSON body: {"error": {"code", "message", "field"}}.

Domain errors, Falcon's own HTTP errors (unknown route, bad method, ...) and unexpected
exceptions are all mapped here, in one place.
"""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import Callable
from typing import Any

import falcon
import falcon.asgi
import psycopg
import sqlalchemy.exc
import sqlalchemy.orm.exc
from clickhouse_connect.driver import exceptions as clickhouse_errors

from errortrack.errors import (
    ErrortrackError,
    NotFound,
    QueryMemory,
    QueryTimeout,
    Unauthorized,
    Unavailable,
)
from errortrack.models import ApiToken, LoginSession

log = logging.getLogger(__name__)

# Falcon's status -> our error code, for errors Falcon raises itself.
_FALCON_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    411: "length_required",
    413: "payload_too_large",
    415: "unsupported_media_type",
    # A Range past the end of a docs asset (Falcon's static route).
    416: "range_not_satisfiable",
    429: "rate_limited",
    503: "unavailable",
}


def falcon_code(status: int) -> str:
    """The error code of a status Falcon raised: the table's, else its reason phrase in
    snake case (``451`` is ``unavailable_for_legal_reasons``): a status missing from the
    table was the generic ``error`` (416 was, found in review). ``error`` only for a
    status without a phrase."""
    known = _FALCON_CODES.get(status)
    if known is not None:
        return known
    phrase = falcon.code_to_http_status(status)[4:]
    words = re.findall(r"[a-z]+", phrase.lower().replace("'", ""))
    return "_".join(words) if words and phrase != "Unknown" else "error"


def error_body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "field": field}}


def _domain(req: falcon.Request, resp: falcon.Response, ex: ErrortrackError, _p: Any) -> None:
    resp.status = ex.status
    resp.media = error_body(ex.code, ex.message, ex.field)
    for name, value in ex.headers().items():
        resp.set_header(name, value)


def _falcon(req: falcon.Request, resp: falcon.Response, ex: falcon.HTTPError, _p: Any) -> None:
    status = ex.status_code
    message = ex.description or ex.title or "error"
    if status == 404:
        message = f"no resource at {req.path}"
    elif status == 405:
        message = f"method {req.method} not allowed on {req.path}"
    resp.status = status
    resp.media = error_body(falcon_code(status), message)
    if ex.headers:
        resp.set_headers(ex.headers)


# Seconds a client should wait after a 503 for a store that cannot serve (/readyz too).
RETRY_AFTER = 5


# SQLite's primary result codes that mean "cannot serve now": BUSY, LOCKED, READONLY,
# IOERR, FULL, CANTOPEN, PROTOCOL. Python's sqlite3 raises OperationalError for SQL
# mistakes too (no such table or column, syntax), and those are bugs: 500s.
_SQLITE_UNAVAILABLE = frozenset({5, 6, 8, 10, 13, 14, 15})


def _unavailable(store: str) -> Callable[[falcon.Request, falcon.Response, Exception, Any], None]:
    """The handler answering a ``store`` that cannot serve now: 503 with Retry-After, as
    /readyz answers an outage (it was a 500 internal_error, "a bug, don't retry"). Where
    the store lives and why it failed are logged, not answered (anyone may call
    /auth/login)."""

    def handler(req: falcon.Request, resp: falcon.Response, ex: Exception, p: Any) -> None:
        log.error("%s store unavailable on %s %s: %s", store, req.method, logged_path(req), ex)
        refusal = Unavailable(f"{store} store unavailable; retry later", retry_after=RETRY_AFTER)
        _domain(req, resp, refusal, p)

    return handler


_relational_unavailable = _unavailable("relational")


# Paths whose last part is a credential: an invitation's token (API and invite link), in
# every spelling that reaches it: an absolute-form target's scheme and authority, which
# the server drops (server._origin_form), and any number of leading slashes, which
# Falcon's router ignores. Both were logged with the token (found in review). The path
# is already percent-decoded (gunicorn's asgi worker decodes it, as the app sees it).
_CREDENTIAL_PATH = re.compile(
    r"^((?:https?://[^/]*)?/+(?:auth/invitations/|invite/))[^/]+", re.IGNORECASE
)


def redacted_path(path: str) -> str:
    """A raw request path as the server log may show it, before any routing: an
    invitation's token becomes ``{token}``."""
    return _CREDENTIAL_PATH.sub(r"\1{token}", path)


def logged_path(req: falcon.Request) -> str:
    """The request's path for the server log: a route whose path carries a credential
    (an invitation's token) is logged as its template. Its path in an error line let
    anyone reading the log accept a pending invitation, an admin's included."""
    template = req.uri_template or ""
    return template if "{token}" in template else req.path


_TIMEOUT_MESSAGE = (
    "the query ran longer than the {store} store's limit and was stopped; "
    "narrow the request (a shorter time range, more filters) or retry later"
)


_MEMORY_MESSAGE = (
    "the query needed more memory than the analytics store's limit and was stopped; "
    "narrow the request (fewer rows per page, an earlier page, a shorter time range)"
)


def _timed_out(store: str, req: falcon.Request, resp: falcon.Response, p: Any) -> None:
    log.warning("%s query timed out on %s %s", store, req.method, logged_path(req))
    message = _TIMEOUT_MESSAGE.format(store=store)
    _domain(req, resp, QueryTimeout(message, retry_after=RETRY_AFTER), p)


def _relational_error(req: falcon.Request, resp: falcon.Response, ex: Exception, p: Any) -> None:
    # The relational store refused or dropped the connection (restarting, full, locked,
    # read-only). Integrity and programming errors stay 500s. sqlite3 raises its SQL
    # mistakes as OperationalError too, so its result code decides. psycopg files
    # connection, resource, shutdown, lock and serialization failures as OperationalError,
    # but a read-only transaction (25006: a standby after a failover) as InternalError:
    # it was a 500 on every write, and on every read with a token (it records last use).
    orig = getattr(ex, "orig", None)
    if isinstance(orig, psycopg.errors.QueryCanceled):  # statement_timeout (db.py)
        _timed_out("relational", req, resp, p)
        return
    if isinstance(orig, sqlite3.Error):
        code = getattr(orig, "sqlite_errorcode", None)
        if code is None or code & 0xFF not in _SQLITE_UNAVAILABLE:
            _unexpected(req, resp, ex, p)
            return
    elif not isinstance(
        ex, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError
    ) and not isinstance(orig, psycopg.errors.ReadOnlySqlTransaction):
        _unexpected(req, resp, ex, p)
        return
    _relational_unavailable(req, resp, ex, p)


# The tables of the caller's own credentials, whose last-used time a request writes.
_CREDENTIALS = (f"'{ApiToken.__tablename__}'", f"'{LoginSession.__tablename__}'")


def _deleted_meanwhile(req: falcon.Request, resp: falcon.Response, ex: Exception, p: Any) -> None:
    # The ORM's UPDATE of a row it had read matched none: another request deleted the
    # row in between (resolving an issue a colleague was deleting was a 500). For this
    # caller the resource does not exist, as a moment later it would be told anyway;
    # unless the row was its own token or login session (SQLAlchemy names the table),
    # revoked meanwhile: then it is the caller who is no longer known.
    if any(table in str(ex) for table in _CREDENTIALS):
        refusal: ErrortrackError = Unauthorized("the credentials were revoked meanwhile")
    else:
        refusal = NotFound(f"no resource at {req.path}: it was deleted meanwhile")
    _domain(req, resp, refusal, p)


def _unexpected(req: falcon.Request, resp: falcon.Response, ex: Exception, _p: Any) -> None:
    log.exception("unhandled error on %s %s", req.method, logged_path(req))
    resp.status = 500
    resp.media = error_body("internal_error", "internal server error")


def _analytics_error(req: falcon.Request, resp: falcon.Response, ex: Exception, p: Any) -> None:
    # A read stopped by max_execution_time (AppState.api_clickhouse); chDB and the HTTP
    # driver both name the error so. Any other query error is a bug: a 500.
    if "TIMEOUT_EXCEEDED" in str(ex):
        _timed_out("analytics", req, resp, p)
    elif "MEMORY_LIMIT_EXCEEDED" in str(ex):
        log.warning("analytics query over its memory limit on %s %s", req.method, logged_path(req))
        _domain(req, resp, QueryMemory(_MEMORY_MESSAGE, retry_after=RETRY_AFTER), p)
    elif _CHDB_ENGINE_BUSY in str(ex):
        # The embedded engine's directory is held by another process: during a reload
        # (SIGHUP) the old worker holds it while it drains, and every API read was a 500
        # with a traceback. /readyz says 503 then too.
        _unavailable("analytics")(req, resp, ex, p)
    else:
        _unexpected(req, resp, ex, p)


# chDB's words (through clickhouse-connect) when it cannot open its directory.
_CHDB_ENGINE_BUSY = "Unable to open the chdb engine"


_HANDLERS: list[tuple[type[Exception], Any]] = [
    # Falcon picks the most specific handler by the exception's class hierarchy.
    (Exception, _unexpected),
    (falcon.HTTPError, _falcon),
    (ErrortrackError, _domain),
    (sqlalchemy.exc.DBAPIError, _relational_error),
    (sqlalchemy.orm.exc.StaleDataError, _deleted_meanwhile),
    # The connection pool's wait ran out (every connection busy): the store is
    # overloaded, not broken (it was a 500).
    (sqlalchemy.exc.TimeoutError, _relational_unavailable),
    # clickhouse-connect's OperationalError: a ClickHouse server that cannot be reached or
    # drops the connection (its query errors, and chDB's, are other classes).
    (clickhouse_errors.DatabaseError, _analytics_error),
    (clickhouse_errors.OperationalError, _unavailable("analytics")),
]


def install(app: falcon.App) -> None:
    for exc, handler in _HANDLERS:
        # An ASGI app takes coroutine handlers only; the handlers do no I/O.
        app.add_error_handler(exc, _coroutine(handler) if _is_asgi(app) else handler)


def _is_asgi(app: falcon.App) -> bool:
    return isinstance(app, falcon.asgi.App)


def _coroutine(handler: Any) -> Any:
    async def run(req: Any, resp: Any, ex: Exception, params: Any, **_: Any) -> None:
        handler(req, resp, ex, params)

    return run
