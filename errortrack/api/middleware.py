"""One relational transaction per request: opened lazily, committed on success; and
JSON answers rendered before it ends."""

from __future__ import annotations

import logging
from typing import Any

import falcon
import orjson
from sqlalchemy.orm import Session, sessionmaker

from errortrack.api.errors import error_body

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
                session.commit()
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
            log.exception("answer of %s %s cannot be encoded", req.method, req.path)
            resp.status = falcon.HTTP_500
            resp.data = orjson.dumps(error_body("internal_error", "internal server error"))
        resp.content_type = falcon.MEDIA_JSON
