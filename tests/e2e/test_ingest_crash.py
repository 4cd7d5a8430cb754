"""SIGKILL while clients send: after a restart every acknowledged log is stored exactly once."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.ingest_support import (
    create_project_in,
    log_envelope,
    query_data_dir,
    sentry_auth,
    spool_empty,
    wait_spool_empty,
)
from tests.support import Server, scratch_database, server_env

pytestmark = pytest.mark.e2e


def _sender(
    url: str, pid: int, key: str, name: str, acked: list[str], stop: threading.Event
) -> None:
    with httpx.Client(timeout=5) as client:
        n = 0
        while not stop.is_set():
            bodies = [f"{name}-{n}-{i}" for i in range(20)]
            logs = [
                {"timestamp": time.time(), "level": "info", "body": b, "trace_id": "0" * 32}
                for b in bodies
            ]
            try:
                resp = client.post(
                    f"{url}/api/{pid}/envelope/",
                    content=log_envelope(logs),
                    headers=sentry_auth(key),
                )
            except httpx.HTTPError:
                return  # the server is gone
            if resp.status_code == 200:
                acked.extend(bodies)
            n += 1


def test_sigkill_loses_and_duplicates_nothing_acknowledged(tmp_path):
    data = tmp_path / "data"
    with scratch_database(tmp_path) as url:
        # Large batches and a long age: at the kill most rows are still only in the spool.
        env = server_env(
            data, url, ERRORTRACK_WRITER_MAX_AGE_MS="700", ERRORTRACK_WRITER_BATCH_ROWS="3000"
        )
        server = Server(env).start()
        pid, key = create_project_in(url)
        acked: list[str] = []
        stop = threading.Event()
        threads = [
            threading.Thread(target=_sender, args=(server.url, pid, key, f"c{i}", acked, stop))
            for i in range(4)
        ]
        for t in threads:
            t.start()
        time.sleep(3)
        server.kill()  # SIGKILL to the whole process group: no hook runs
        stop.set()
        for t in threads:
            t.join(10)
        assert len(acked) > 500
        assert not spool_empty(data)  # something really was left to replay
        restarted = Server(env).start()
        try:
            wait_spool_empty(data)
        finally:
            restarted.stop()
    rows = query_data_dir(
        data, f"SELECT body, count() AS n FROM logs WHERE project_id = {pid} GROUP BY body"
    )
    counts = {r["body"]: int(r["n"]) for r in rows}
    assert {b: counts.get(b, 0) for b in acked} == dict.fromkeys(acked, 1)
    assert max(counts.values()) == 1  # nothing at all duplicated, acknowledged or not
