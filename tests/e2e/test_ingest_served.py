"""Ingest as served by `errortrack serve`: the asgi worker's event loop for ingest, the
management API beside it in threads (errortrack/server.py). Real server, real stores."""

from __future__ import annotations

import concurrent.futures
import time
from pathlib import Path

import httpx
import pytest

from tests.ingest_support import create_project_in, log_envelope, query_data_dir, sentry_auth
from tests.support import Server, scratch_database, server_env

pytestmark = pytest.mark.e2e

CAP = 50_000


def _logs(bodies: list[str]) -> bytes:
    return log_envelope([{"timestamp": time.time(), "level": "info", "body": b} for b in bodies])


def _chunks(data: bytes, size: int = 4096):
    # A generator body: httpx sends it with Transfer-Encoding: chunked, no Content-Length,
    # as @sentry/node does.
    for i in range(0, len(data), size):
        yield data[i : i + size]


def _is_error(resp: httpx.Response, status: int, code: str) -> None:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body


def test_served_ingest_and_api_side_by_side(tmp_path):
    data = tmp_path / "data"
    with scratch_database(tmp_path) as url:
        server = Server(server_env(data, url, ERRORTRACK_MAX_BODY_BYTES=str(CAP))).start()
        try:
            pid, key = create_project_in(url)
            post = f"{server.url}/api/{pid}/envelope/"
            with httpx.Client(timeout=10) as client:
                # Chunked, under and over the cap (counted as it comes: no length to check).
                ok = client.post(
                    post, content=_chunks(_logs(["chunked"])), headers=sentry_auth(key)
                )
                assert ok.status_code == 200, ok.text
                huge = _logs(["z" * (CAP + 1000)])
                _is_error(
                    client.post(post, content=_chunks(huge), headers=sentry_auth(key)),
                    413,
                    "payload_too_large",
                )
                # With a length over the cap; and a bad key is refused before the body.
                _is_error(
                    client.post(post, content=huge, headers=sentry_auth(key)),
                    413,
                    "payload_too_large",
                )
                _is_error(
                    client.post(post, content=huge, headers=sentry_auth("f" * 32)), 403, "forbidden"
                )
                _is_error(
                    client.post(f"{server.url}/api/abc/envelope/", content=b"{}"), 404, "not_found"
                )
                # The management API answers from its threads with the same error shape.
                _is_error(client.get(f"{server.url}/api/me"), 401, "unauthorized")
                assert client.get(f"{server.url}/healthz").status_code == 200
                # The worker runs chDB without pyarrow and numpy (errortrack/asgi.py).
                maps = [Path(f"/proc/{w}/maps").read_text() for w in server.workers()]
                assert maps and all("_chdb" in m and "libarrow" not in m for m in maps)

            # Many requests at once on the one loop: every one acknowledged.
            def send(i: int) -> int:
                with httpx.Client(timeout=30) as c:
                    body = _logs([f"many-{i}-{j}" for j in range(10)])
                    return c.post(post, content=body, headers=sentry_auth(key)).status_code

            with concurrent.futures.ThreadPoolExecutor(32) as pool:
                statuses = list(pool.map(send, range(200)))
            assert statuses == [200] * 200
        finally:
            server.stop()  # worker_exit flushes the spool into ClickHouse
    rows = query_data_dir(
        data, f"SELECT body, count() AS n FROM logs WHERE project_id = {pid} GROUP BY body"
    )
    counts = {r["body"]: int(r["n"]) for r in rows}
    expected = {"chunked": 1} | {f"many-{i}-{j}": 1 for i in range(200) for j in range(10)}
    assert counts == expected
