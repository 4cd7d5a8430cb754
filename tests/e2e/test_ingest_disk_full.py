"""A full disk under the running server: 503s that say retry later, then every log whose
request got a 200 stored exactly once when the space is back.

The disk is made "full" for the server's worker process alone, for real: its largest file
may not grow past a few KiB (``prlimit`` of RLIMIT_FSIZE on the worker; Python ignores
SIGXFSZ, so a write past the limit is short, then fails with EFBIG, as one on a full
disk is short, then fails with ENOSPC). That covers the spool's writes and the writer's
inserts alike (the chDB client passes each batch through a temporary file, which then
cannot be written: the insert fails and is retried until the space is back).
"""

from __future__ import annotations

import resource
import time

import httpx
import pytest

from tests.ingest_support import (
    create_project_in,
    log_envelope,
    query_data_dir,
    sentry_auth,
    wait_spool_empty,
)
from tests.support import Server, scratch_database, server_env

pytestmark = pytest.mark.e2e

# Bytes a file may hold while the disk is "full": less than one request's record (20 logs
# of ~500 bytes), so that no request fits, not even into a segment started meanwhile.
FULL = 4096


def _send(client: httpx.Client, url: str, pid: int, key: str, name: str) -> tuple[int, list[str]]:
    bodies = [f"{name}-{i} " + "x" * 500 for i in range(20)]
    logs = [{"timestamp": time.time(), "level": "info", "body": b} for b in bodies]
    resp = client.post(
        f"{url}/api/{pid}/envelope/", content=log_envelope(logs), headers=sentry_auth(key)
    )
    if resp.status_code != 200:
        assert resp.status_code == 503, resp.text
        assert resp.json()["error"]["code"] == "unavailable"
        assert "the ingest spool cannot write" in resp.json()["error"]["message"]
        assert int(resp.headers["Retry-After"]) > 0
    return resp.status_code, bodies


def test_a_full_disk_answers_503_and_loses_nothing_acknowledged(tmp_path):
    data = tmp_path / "data"
    with scratch_database(tmp_path) as url:
        env = server_env(data, url, ERRORTRACK_WRITER_MAX_AGE_MS="300")
        server = Server(env).start()
        try:
            (worker,) = server.workers()
            pid, key = create_project_in(url)
            acked: list[str] = []
            statuses: list[int] = []
            with httpx.Client(timeout=10) as client:

                def send(name: str) -> None:
                    status, bodies = _send(client, server.url, pid, key, name)
                    statuses.append(status)
                    if status == 200:
                        acked.extend(bodies)

                for n in range(10):
                    send(f"before-{n}")
                _, hard = resource.prlimit(worker, resource.RLIMIT_FSIZE)
                resource.prlimit(worker, resource.RLIMIT_FSIZE, (FULL, hard))
                try:
                    for n in range(20):
                        send(f"full-{n}")
                    # Long enough for the writer to seal and try to insert the logs
                    # acknowledged before: the engine cannot write its parts either.
                    time.sleep(2)
                finally:
                    resource.prlimit(worker, resource.RLIMIT_FSIZE, (hard, hard))
                for n in range(10):
                    send(f"after-{n}")
            # Every request while the disk was full was refused, and only those.
            assert statuses == [200] * 10 + [503] * 20 + [200] * 10
            wait_spool_empty(data)
            assert server.proc is not None and server.proc.poll() is None  # still serving
        finally:
            server.stop()
    rows = query_data_dir(
        data, f"SELECT body, count() AS n FROM logs WHERE project_id = {pid} GROUP BY body"
    )
    counts = {r["body"]: int(r["n"]) for r in rows}
    assert counts == dict.fromkeys(acked, 1)
    assert len(acked) == 20 * 20
