"""One relational transaction per request: opened lazily, committed on success."""

from __future__ import annotations

from typing import Any

import falcon
from sqlalchemy.orm import Session, sessionmaker


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
