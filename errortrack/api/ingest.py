"""SDK ingest endpoints: ``/api/<pid>/envelope/`` and the legacy ``/api/<pid>/store/``.

These run on the server's event loop (Falcon ASGI, see ``errortrack/server.py``), not in
a thread like the management API: one event request is ~150 us of Python, and a thread
per request cost several times that in GIL hand-offs (docs/INGEST.md, "Serving").
Nothing here may block the loop: a key missing from the cache is loaded in a thread,
and the spool's fdatasync runs in its syncer thread while the request awaits it.

SDKs read only the status and the rate-limit headers; the body is ``{"id": ...}``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
from typing import Any

import falcon
import falcon.asgi

from errortrack.errors import BadRequest, RequestTimeout, Unauthorized, Unavailable
from errortrack.ingest import auth, body, envelope, items, service, skim, surrogates

# A browser SDK reads the rate-limit headers of the POST's answer only when it names them.
EXPOSE = "x-sentry-rate-limits, retry-after"
CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "POST, OPTIONS",
    "Access-Control-Allow-Headers": (
        "x-sentry-auth, content-type, content-encoding, authorization, sentry-trace, baggage"
    ),
    "Access-Control-Expose-Headers": EXPOSE,
    "Access-Control-Max-Age": "3600",
}
ENVELOPE_TYPE = "application/x-sentry-envelope"
# On every answer of an ingest path, whatever made it: a browser SDK that cannot read an
# answer sees a CORS failure, not its status (a 405 and the 404 of a malformed id had none).
ANSWER_CORS = {"Access-Control-Allow-Origin": "*", "Access-Control-Expose-Headers": EXPOSE}


class AnswerCors:
    """``ANSWER_CORS`` on every answer of the ingest app but the probe ``/readyz``, which
    shares the app and is no ingest path. Set on the way out, so that errors raised
    anywhere (a responder, a middleware, no route) carry them too."""

    async def process_response(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, resource: Any, ok: bool
    ) -> None:
        if req.path != "/readyz":
            resp.set_headers(ANSWER_CORS)


def _load_done(loading: dict[str, Any], key: str) -> Any:
    def done(future: asyncio.Future[Any]) -> None:
        loading.pop(key, None)
        # Nobody may be waiting (a known key's request answered from its last answer):
        # the failure is logged where it happened (Ingest._load_key), not again here.
        if not future.cancelled():
            future.exception()

    return done


# Key loads run on threads of their own: on the loop's default executor, loads stuck on a
# locked or frozen relational store queued every other use of it (/readyz took 43 s).
_KEY_LOADS = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="ingest-keys")
# How long a request waits for its key. A frozen store (no answer, no error) holds a
# load's thread beyond any server-side timeout; the request is told 503 meanwhile.
KEY_WAIT_SECONDS = 10.0
# How long a request of a key read before waits for its reload before its last answer
# serves it: a healthy store answers in milliseconds, so a key disabled (or a project's
# retention changed) takes effect once the cache entry expires, as before; a locked or
# frozen one holds the request no longer than this.
KNOWN_KEY_WAIT_SECONDS = 0.5


class IngestBody:
    """The ingest app's ``receive``, which remembers whether the body arrived whole.

    gunicorn reports a client that went away, or that sent nothing for its ``timeout``,
    as ``http.disconnect``, and Falcon's stream reads that as the end of the body: what
    had arrived was parsed and stored, and a stalled client even got a 200, for part of
    what it sent (HTTP review). ``cut`` says so, and the resource refuses the request
    (``_IngestResource.on_post``).

    For a request that says ``Expect: 100-continue`` (``defer``), the first call answers
    an empty chunk without asking the server: Falcon asks before routing, and gunicorn
    sent ``100 Continue`` on that ask, so a client waiting for it uploaded its body even
    when the key was refused. Other requests are asked at once, as before: a client that
    sends its whole body and closes has it taken before the loop can see the close."""

    KEY = "errortrack.ingest_body"
    __slots__ = ("_asked", "_receive", "_whole", "cut")

    def __init__(self, receive: Any, *, defer: bool = False) -> None:
        self._receive = receive
        self._asked = not defer
        self._whole = False
        self.cut = False

    async def __call__(self) -> dict[str, Any]:
        if not self._asked:
            self._asked = True
            return {"type": "http.request", "body": b"", "more_body": True}
        message: dict[str, Any] = await self._receive()
        kind = message["type"]
        if kind == "http.request" and not message.get("more_body", False):
            self._whole = True
        elif kind == "http.disconnect" and not self._whole:
            self.cut = True
        return message


def body_cut(scope: dict[str, Any]) -> bool:
    """Whether the request's body ended before it was whole (``IngestBody``)."""
    body = scope.get(IngestBody.KEY)
    return body is not None and body.cut


def _cut_off() -> RequestTimeout:
    return RequestTimeout(
        "the request body ended before it was whole (the client went away or stopped "
        "sending); nothing of it was stored"
    )


class _IngestResource:
    def __init__(
        self,
        ingest: service.Ingest,
        max_body_bytes: int,
        max_envelope_bytes: int = 0,
        *,
        budget: body.BodyBudget,
    ) -> None:
        self.ingest = ingest
        self.budget = budget
        self.max_body_bytes = max_body_bytes
        # ERRORTRACK_MAX_ENVELOPE_BYTES, with the payloads of items not stored (skim.py,
        # whose read_envelope takes max_body_bytes when this is smaller).
        self.max_envelope_bytes = max_envelope_bytes
        self._loading: dict[str, asyncio.Future[auth.KeyInfo | None]] = {}

    async def _authorize(self, project_id: int, key: str) -> auth.KeyInfo:
        hit, info = self.ingest.keys.cached(key)
        if not hit:
            info = await self._load_key(key)
        return auth.authorize(info, project_id)

    async def _load_key(self, key: str) -> auth.KeyInfo | None:
        """Load a key missing from the cache (a relational query) in a thread, off the
        loop. One load per key at a time: when the cache entry expires under load, the
        requests in flight for that key wait for the same query instead of each sending
        one (and queueing for the connection pool). A key read before (within
        ``auth.STALE_SECONDS``) is waited for only ``KNOWN_KEY_WAIT_SECONDS``: then its
        last answer serves the request while the load goes on, so a store that is locked
        or frozen (no error, no answer) holds a request of a known key no longer."""
        loading = self._loading.get(key)
        if loading is None:
            loop = asyncio.get_running_loop()
            started = loop.run_in_executor(_KEY_LOADS, self.ingest.key_info, key)
            started.add_done_callback(_load_done(self._loading, key))
            self._loading[key] = loading = started
        known, info = self.ingest.keys.stale(key)
        try:
            # Shielded: one request cancelled (or out of time) must not cancel the load.
            wait = KNOWN_KEY_WAIT_SECONDS if known else KEY_WAIT_SECONDS
            return await asyncio.wait_for(asyncio.shield(loading), wait)
        except TimeoutError:
            if known:
                return info
            raise Unavailable("project keys cannot be read now", retry_after=5) from None

    async def on_options(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, project_id: int
    ) -> None:
        resp.set_headers(CORS)
        resp.status = falcon.HTTP_200

    async def on_post(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, project_id: int
    ) -> None:
        # CORS: AnswerCors, on errors too (a 429's headers are what a browser SDK reads).
        surrogates.start_request()
        key = auth.key_from_request(
            req.get_header("X-Sentry-Auth"),
            req.get_header("Authorization"),
            req.get_param("sentry_key"),
        )
        # A bad key in a header is refused before the body is read. Its answer stands
        # for the whole request: the entry may expire while the body uploads, and a
        # second lookup then would be a second query.
        info = None if key is None else await self._authorize(project_id, key)
        charge = body.Charge(self.budget, req.stream, self.max_body_bytes)
        try:
            data = await self._whole_body(req, charge)
            charge.take(len(data))
            accepted = await self.accept(project_id, info, data, req.content_type)
            await self.ingest.store(accepted)
        finally:
            charge.release()
        if accepted.rate_limits:
            # Items were dropped by the rate limit: SDKs read this header on a 200 too.
            resp.set_header("X-Sentry-Rate-Limits", accepted.rate_limits)
        resp.media = accepted.response

    async def _whole_body(self, req: falcon.asgi.Request, stream: body.AsyncReadable) -> bytes:
        """``read``, refused (408, nothing stored) when the body did not arrive whole
        (``IngestBody``), also when what arrived reads as malformed: a compressed body,
        or a skipped attachment, cut short."""
        try:
            data = await self.read(req, stream)
        except BadRequest:
            if body_cut(req.scope):
                raise _cut_off() from None
            raise
        if body_cut(req.scope):
            raise _cut_off()
        return data

    async def read(self, req: falcon.asgi.Request, stream: body.AsyncReadable) -> bytes:
        """The body (``stream``: ``req.stream``, charged), decompressed (413 over
        ``max_body_bytes``)."""
        raw = await body.read_wire(stream, req.content_length, self.max_body_bytes)
        return body.read_body(
            io.BytesIO(raw), req.get_header("Content-Encoding"), self.max_body_bytes
        )

    async def accept(
        self,
        project_id: int,
        info: auth.KeyInfo | None,
        data: bytes,
        content_type: str | None,
    ) -> service.Accepted:
        parsed = envelope.parse(data)
        if info is None:
            info = await self._authorize(project_id, service.envelope_key(parsed))
        return service.accept_envelope(self.ingest, info, parsed)


class Envelope(_IngestResource):
    async def read(self, req: falcon.asgi.Request, stream: body.AsyncReadable) -> bytes:
        """As ``_IngestResource.read``, but an envelope over the cap only because of items
        that are not stored (attachments, replays, profiles) is read without their
        payloads, up to ``max_envelope_bytes`` (ingest/skim.py)."""
        return await skim.read_envelope(
            stream,
            req.content_length,
            req.get_header("Content-Encoding"),
            items.HANDLERS.__contains__,
            self.max_body_bytes,
            self.max_envelope_bytes,
        )


class Store(_IngestResource):
    async def accept(
        self,
        project_id: int,
        info: auth.KeyInfo | None,
        data: bytes,
        content_type: str | None,
    ) -> service.Accepted:
        # As Relay: an envelope posted here (by its content type) is read as one; any
        # other body is one JSON event, possibly base64 (of zlib) as raven clients send.
        if falcon.parse_header(content_type or "")[0].lower() == ENVELOPE_TYPE:
            return await super().accept(project_id, info, data, content_type)
        if info is None:
            raise Unauthorized("no sentry_key: send X-Sentry-Auth or ?sentry_key=")
        data = body.legacy_store_body(data, self.max_body_bytes)
        return service.accept_store(self.ingest, info, data)
