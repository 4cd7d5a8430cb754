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
GUNICORN = [sys.executable, "-m", "gunicorn", "-k", "asgi"]


def _logs(bodies: list[str]) -> bytes:
    return log_envelope([{"timestamp": time.time(), "level": "info", "body": b} for b in bodies])


def _gunicorn(env: dict[str, str], log_path, *args: str) -> tuple[subprocess.Popen, str]:
    """A plain gunicorn serving the app, once /readyz answers 200."""
    port = free_port()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*GUNICORN, "-b", f"127.0.0.1:{port}", *args, *ENTRY],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, log_path.read_text()
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                break
        time.sleep(0.1)
    return proc, base


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_plain_gunicorn_inserts_what_it_acknowledges_and_flushes_on_stop(tmp_path):
    data = tmp_path / "data"
    with scratch_database(tmp_path) as url:
        # A long age: the second batch is still spooled when the server is told to stop.
        env = server_env(data, url, ERRORTRACK_WRITER_MAX_AGE_MS="3000")
        migrated = errortrack("migrate", env=env)
        assert migrated.returncode == 0, migrated.stderr
        pid, key = create_project_in(url)
        log_path = tmp_path / "gunicorn.log"
        proc, base = _gunicorn(env, log_path)
        try:
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
            _stop(proc)
        assert spool_empty(data), log_path.read_text()  # flushed by the lifespan's shutdown
    rows = query_data_dir(
        data, f"SELECT body, count() AS n FROM logs WHERE project_id = {pid} GROUP BY body"
    )
    assert {r["body"]: int(r["n"]) for r in rows} == {"first": 1, "last": 1}


def test_a_second_plain_gunicorn_worker_on_the_embedded_store_says_so_at_start(tmp_path):
    # chDB allows one process per directory: with -w 2 the second worker acknowledged
    # ingest its writer could never insert, and nothing said why until it stopped.
    data = tmp_path / "data"
    with scratch_database(tmp_path) as url:
        env = server_env(data, url)
        assert errortrack("migrate", env=env).returncode == 0
        log_path = tmp_path / "gunicorn.log"
        proc, _ = _gunicorn(env, log_path, "-w", "2")
        try:
            deadline = time.monotonic() + 30
            while "cannot be opened in this worker" not in log_path.read_text():
                assert time.monotonic() < deadline, log_path.read_text()
                time.sleep(0.2)
            assert "run plain gunicorn with one worker (-w 1)" in log_path.read_text()
        finally:
            _stop(proc)
