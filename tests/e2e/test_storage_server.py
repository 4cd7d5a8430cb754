"""The retention pass inside a real `errortrack serve` worker: logs sent over HTTP, an
old day dropped by the disk cap within a few intervals, today's logs kept, the removal
logged, and the storage endpoints answering over the network."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import httpx
import pytest

from tests.ingest_support import log_envelope, sentry_auth
from tests.support import Server, errortrack, scratch_database, server_env

pytestmark = pytest.mark.e2e

DAY = 86_400


def test_served_retention_pass_enforces_the_disk_cap(tmp_path):
    with scratch_database(tmp_path) as url:
        env = server_env(
            tmp_path / "data",
            url,
            ERRORTRACK_BOOTSTRAP_PASSWORD="primary password",
            ERRORTRACK_RETENTION_INTERVAL_SECONDS="0.5",
            # 1 byte: every past day is over the cap, today never goes.
            ERRORTRACK_DISK_CAP_BYTES="1",
        )
        assert errortrack("bootstrap", "--email", "root@example.com", env=env).returncode == 0
        server = Server(env, threads=2).start()
        try:
            _flow(server, env)
        finally:
            server.stop()


def _flow(server: Server, env: dict[str, str]) -> None:
    made = errortrack(
        "token", "create", "--email", "root@example.com", "--description", "ops", env=env
    )
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    admin = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"})
    project = admin.post("/api/projects", json={"name": "web"}).json()
    key = urlsplit(project["dsn"]).username
    now = time.time()
    logs = [{"timestamp": now - 3 * DAY, "level": "info", "body": f"old {i}"} for i in range(3)]
    logs += [{"timestamp": now, "level": "info", "body": f"new {i}"} for i in range(2)]
    sent = httpx.post(
        f"{server.url}/api/{project['id']}/envelope/", content=log_envelope(logs),
        headers=sentry_auth(key),
    )  # fmt: skip
    assert sent.status_code == 200, sent.text

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        report = admin.get("/api/storage").json()
        if report["tables"]["logs"]["rows"] == 2 and "over disk cap" in server.log():
            break
        time.sleep(0.3)
    else:
        pytest.fail(f"the old day was not dropped: {report}\n{server.log()[-3000:]}")
    assert report["retention"]["disk_cap_bytes"] == 1
    assert "retention: dropped logs partition" in server.log()
    # Today's logs stay however small the cap, pass after pass.
    time.sleep(1.2)
    assert admin.get("/api/storage").json()["tables"]["logs"]["rows"] == 2

    dry = admin.post("/api/storage/cleanup", json={"older_than_days": 1, "dry_run": True})
    assert dry.status_code == 200, dry.text
    assert dry.json()["removed"]["logs"] == 0
