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
import io
from collections.abc import Callable

import falcon
import falcon.asgi

from errortrack.ingest import auth, body, service

CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "POST, OPTIONS",
    "Access-Control-Allow-Headers": (
        "x-sentry-auth, content-type, content-encoding, authorization, sentry-trace, baggage"
    ),
    "Access-Control-Expose-Headers": "x-sentry-rate-limits, retry-after",
    "Access-Control-Max-Age": "3600",
}

Accept = Callable[[service.Ingest, int, "str | None", Callable[[], bytes]], service.Accepted]
Decode = Callable[[bytes, int], bytes]
ENVELOPE_TYPE = "application/x-sentry-envelope"


class _IngestResource:
    def __init__(self, ingest: service.Ingest, max_body_bytes: int) -> None:
        self.ingest = ingest
        self.max_body_bytes = max_body_bytes
        self._loading: dict[str, asyncio.Future[auth.KeyInfo | None]] = {}

    async def _load_key(self, key: str) -> None:
        """Load a key missing from the cache (a relational query) in a thread, off the
        loop. One load per key at a time: when the cache entry expires under load, the
        requests in flight for that key wait for the same query instead of each sending
        one (and queueing for the connection pool)."""
        loading = self._loading.get(key)
        if loading is None:
            started = asyncio.ensure_future(asyncio.to_thread(self.ingest.key_info, key))
            started.add_done_callback(lambda _: self._loading.pop(key, None))
            self._loading[key] = loading = started
        await asyncio.shield(loading)  # one request cancelled must not cancel the load

    async def on_options(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, project_id: int
    ) -> None:
        resp.set_headers(CORS)
        resp.status = falcon.HTTP_200

    async def on_post(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, project_id: int
    ) -> None:
        resp.set_header("Access-Control-Allow-Origin", "*")
        key = auth.key_from_request(
            req.get_header("X-Sentry-Auth"),
            req.get_header("Authorization"),
            req.get_param("sentry_key"),
        )
        if key is not None:
            if not self.ingest.keys.fresh(key):
                await self._load_key(key)
            # From the cache: a bad key is refused here, before the body is read.
            self.ingest.authorize(project_id, key)
        raw = await body.read_wire(req.stream, req.content_length, self.max_body_bytes)
        encoding = req.get_header("Content-Encoding")
        cap = self.max_body_bytes
        accept, decode = self.reader(req.content_type)
        accepted = accept(
            self.ingest,
            project_id,
            key,
            lambda: decode(body.read_body(io.BytesIO(raw), encoding, cap), cap),
        )
        if accepted.rows:
            await self.ingest.spool.append_async(accepted.tables, accepted.rows)
        resp.media = accepted.response

    def reader(self, content_type: str | None) -> tuple[Accept, Decode]:
        """How this request's body is read: what parses it, and what undoes an encoding
        of its own after the HTTP ``Content-Encoding`` (none for envelopes)."""
        return service.accept_envelope, _as_is


def _as_is(data: bytes, cap: int) -> bytes:
    return data


class Envelope(_IngestResource):
    pass


class Store(_IngestResource):
    def reader(self, content_type: str | None) -> tuple[Accept, Decode]:
        # As Relay: an envelope posted here (by its content type) is read as one; any
        # other body is one JSON event, possibly base64 (of zlib) as raven clients send.
        if falcon.parse_header(content_type or "")[0].lower() == ENVELOPE_TYPE:
            return service.accept_envelope, _as_is
        return service.accept_store, body.legacy_store_body
