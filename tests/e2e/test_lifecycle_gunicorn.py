"""``gunicorn -k asgi 'errortrack.asgi:build()'``, the entry point asgi.py names, without
``errortrack serve``: the ASGI lifespan starts and stops the background work (spool
writer, retention) that serve's gunicorn hooks start, and takes the data dir's lock.
Real gunicorn process, real stores."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
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
from tests.support import ROOT, errortrack, free_port, scratch_database, server_env

pytestmark = pytest.mark.e2e

ENTRY = ["errortrack.asgi:build()"]


def _logs(bodies: list[str]) -> bytes:
    return log_envelope([{"timestamp": time.time(), "level": "info", "body": b} for b in bodies])


def test_plain_gunicorn_inserts_what_it_acknowledges_and_flushes_on_stop(tmp_path):
    data = tmp_path / "data"
    with scratch_database(tmp_path) as url:
        # A long age: the second batch is still spooled when the server is told to stop.
        env = server_env(data, url, ERRORTRACK_WRITER_MAX_AGE_MS="3000")
        migrated = errortrack("migrate", env=env)
        assert migrated.returncode == 0, migrated.stderr
        pid, key = create_project_in(url)
        port = free_port()
        log_path = tmp_path / "gunicorn.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "-k", "asgi", "-b", f"127.0.0.1:{port}", *ENTRY],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                start_new_session=True,
            )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                assert proc.poll() is None, log_path.read_text()
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                        break
                time.sleep(0.1)
            post = f"{base}/api/{pid}/envelope/"
            first = httpx.post(post, content=_logs(["first"]), headers=sentry_auth(key))
            assert first.status_code == 200, first.text
            assert not spool_empty(data)
            wait_spool_empty(data, timeout=10)  # the writer runs: it was never started

            # The data dir is this server's: `serve` beside it is refused in one line.
            second = errortrack("serve", "--port", str(free_port()), env=env, timeout=60)
            assert second.returncode == 1
            assert second.stderr.strip().splitlines() == [
                f"Error: another errortrack server is already running on data dir "
                f"{data.resolve()}; stop it or choose another ERRORTRACK_DATA_DIR"
            ]

            last = httpx.post(post, content=_logs(["last"]), headers=sentry_auth(key))
            assert last.status_code == 200, last.text
            os.killpg(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=30) == 0, log_path.read_text()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        assert spool_empty(data), log_path.read_text()  # flushed by the lifespan's shutdown
    rows = query_data_dir(
        data, f"SELECT body, count() AS n FROM logs WHERE project_id = {pid} GROUP BY body"
    )
    assert {r["body"]: int(r["n"]) for r in rows} == {"first": 1, "last": 1}
