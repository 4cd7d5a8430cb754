"""SDK ingest endpoints: ``/api/<pid>/envelope/`` and the legacy ``/api/<pid>/store/``.

Thin: read the auth places and the (bounded, decompressed) body, call the service.
SDKs read only the status and the rate-limit headers; the body is ``{"id": ...}``.
"""

from __future__ import annotations

import falcon

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


class _IngestResource:
    def __init__(self, ingest: service.Ingest, max_body_bytes: int) -> None:
        self.ingest = ingest
        self.max_body_bytes = max_body_bytes

    def on_options(self, req: falcon.Request, resp: falcon.Response, project_id: int) -> None:
        resp.set_headers(CORS)
        resp.status = falcon.HTTP_200

    def _key(self, req: falcon.Request) -> str | None:
        return auth.key_from_request(
            req.get_header("X-Sentry-Auth"),
            req.get_header("Authorization"),
            req.get_param("sentry_key"),
        )

    def _body(self, req: falcon.Request) -> bytes:
        # Chunked bodies (Node) have no Content-Length; gunicorn's input ends at the last
        # chunk, while Falcon's bounded_stream would read nothing.
        stream = req.bounded_stream if req.content_length is not None else req.stream
        return body.read_body(stream, req.get_header("Content-Encoding"), self.max_body_bytes)


class Envelope(_IngestResource):
    def on_post(self, req: falcon.Request, resp: falcon.Response, project_id: int) -> None:
        resp.set_header("Access-Control-Allow-Origin", "*")
        resp.media = service.ingest_envelope(
            self.ingest, project_id, self._key(req), lambda: self._body(req)
        )


class Store(_IngestResource):
    def on_post(self, req: falcon.Request, resp: falcon.Response, project_id: int) -> None:
        resp.set_header("Access-Control-Allow-Origin", "*")
        resp.media = service.ingest_store(
            self.ingest, project_id, self._key(req), lambda: self._body(req)
        )
