"""Domain errors, mapped to HTTP in one place (``errortrack.api.errors``).

Services raise these; they never see a request or a response. Every error reaches the
client as the same JSON body::

    {"error": {"code": "not_found", "message": "project not found", "field": null}}
"""

from __future__ import annotations


class ErrortrackError(Exception):
    status = 500
    code = "internal_error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def headers(self) -> dict[str, str]:
        return {}


class BadRequest(ErrortrackError):
    status = 400
    code = "bad_request"


class ValidationError(BadRequest):
    """Invalid input; ``field`` names the offending field or query parameter."""

    code = "invalid"


class Unauthorized(ErrortrackError):
    status = 401
    code = "unauthorized"


class Forbidden(ErrortrackError):
    status = 403
    code = "forbidden"


class NotFound(ErrortrackError):
    """Also used for things that exist but that the caller may not see."""

    status = 404
    code = "not_found"


class Conflict(ErrortrackError):
    status = 409
    code = "conflict"


class Gone(ErrortrackError):
    """Existed once but can no longer be used (an expired, used or revoked invitation)."""

    status = 410
    code = "gone"


class NotSupported(ErrortrackError):
    """What this deployment cannot do (following logs on a ClickHouse cluster)."""

    status = 501
    code = "not_supported"


class RequestTimeout(ErrortrackError):
    """The request's body did not arrive whole: the client went away, or sent nothing
    for the server's wait (gunicorn's ``timeout``) or the whole body's deadline. Nothing
    of it is acted on; a client still there gets this answer."""

    status = 408
    code = "request_timeout"


class PayloadTooLarge(ErrortrackError):
    status = 413
    code = "payload_too_large"


class UnsupportedMediaType(ErrortrackError):
    status = 415
    code = "unsupported_media_type"


class UnsupportedContentEncoding(UnsupportedMediaType):
    """A body in a content coding the server does not decode. RFC 9110 15.5.16: the
    answer says which codings it takes (the management API: only identity)."""

    def __init__(
        self, message: str, *, field: str | None = None, accepted: str = "identity"
    ) -> None:
        super().__init__(message, field=field)
        self.accepted = accepted

    def headers(self) -> dict[str, str]:
        return {"Accept-Encoding": self.accepted}


class _RetryLater(ErrortrackError):
    def __init__(self, message: str, *, retry_after: int, **kwargs: str | None) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class RateLimited(_RetryLater):
    status = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: int, sentry_limits: str = "") -> None:
        super().__init__(message, retry_after=retry_after)
        self.sentry_limits = sentry_limits

    def headers(self) -> dict[str, str]:
        headers = super().headers()
        if self.sentry_limits:
            headers["X-Sentry-Rate-Limits"] = self.sentry_limits
        return headers


class Unavailable(_RetryLater):
    status = 503
    code = "unavailable"


class PasswordBusy(Unavailable):
    """As many password checks as may run or wait are under way (``auth/passwords.py``):
    each holds one of the API's threads, so the rest of the API is kept free of them. A
    retry after ``Retry-After`` (a second, about one check's time) answers."""

    code = "password_busy"


class QueryMemory(Unavailable):
    """A ClickHouse read needed more than ``ERRORTRACK_QUERY_MAX_MEMORY_BYTES`` and was
    stopped: a narrower request (fewer or shorter rows per page, an earlier page, a
    shorter time range) answers."""

    code = "query_memory"


class QueryTimeout(Unavailable):
    """A statement ran past ``ERRORTRACK_QUERY_TIMEOUT_SECONDS`` and was stopped: the
    store is up but the request asked too much of it (a long time range, a text search
    over months); a narrower request, or a retry once the store is less busy, answers."""

    code = "query_timeout"
