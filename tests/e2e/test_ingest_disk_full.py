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

import os
import resource
import subprocess
import sys
import time

import httpx
import pytest

from errortrack.spool.segments import FREE_CHECK_SECONDS
from tests.ingest_support import (
    create_project_in,
    log_envelope,
    query_data_dir,
    sentry_auth,
    wait_spool_empty,
)
from tests.support import (
    CAN_MOUNT,
    Server,
    loop_filesystem,
    once,
    run,
    scratch_database,
    server_env,
)

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
            # A new connection per request: the one kept alive idles through the sleep
            # below, about gunicorn's keep-alive timeout (2 s), and the server may close
            # it just as the next request goes out ("Server disconnected", 1 run in ~8).
            no_keepalive = httpx.Limits(max_keepalive_connections=0)
            with httpx.Client(timeout=10, limits=no_keepalive) as client:

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
                    # /readyz says so (it said nothing while every ingest was a 503).
                    ready = client.get(f"{server.url}/readyz").json()
                    assert ready["spool"]["write_failures"] == 20
                    # Long enough for the writer to seal and try to insert the logs
                    # acknowledged before: the engine cannot write its parts either.
                    time.sleep(2)
                finally:
                    resource.prlimit(worker, resource.RLIMIT_FSIZE, (hard, hard))
                for n in range(10):
                    send(f"after-{n}")
            # Every request while the disk was full was refused, and only those.
            assert statuses == [200] * 10 + [503] * 20 + [200] * 10
            assert httpx.get(f"{server.url}/readyz").json()["spool"]["write_failures"] == 0
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


_INSERT_FILES = """
import os, sys, time
from pathlib import Path
from errortrack.analytics import ClickHouse
from errortrack.analytics import migrate
from errortrack.spool.writer import clickhouse_insert

data = Path(sys.argv[1])
(data / "tmp").mkdir(parents=True)
(data / "tmp" / "tmp-left-by-a-crash.raw").write_bytes(b"x" * 100)
store = ClickHouse(f"chdb://{data}", database="t")
migrate.apply(store)
print("left", (data / "tmp" / "tmp-left-by-a-crash.raw").exists())
opened = []
sys.addaudithook(
    lambda event, args: opened.append(args[0])
    if event == "open" and isinstance(args[0], str) and args[0].endswith(".raw") else None
)
# Dated now and kept 30 days: the TTL is timestamp + retention_days on the real clock, and
# a part all expired (retention_days defaults to 0) may be dropped before the count.
now = time.time()
row = (
    b'{"project_id":1,"timestamp":%f,"ingested_at":%f,"level":"info","body":"b",'
    b'"retention_days":30}' % (now, now)
)
clickhouse_insert(store)("logs", row + b"\\n", "token-1")
print("rows", store.command("SELECT count() FROM logs"))
for path in opened:
    print("opened", path, os.path.exists(path))
"""


def test_the_engines_insert_files_live_beside_its_data(tmp_path):
    """The chDB client's per-insert temporary file goes in the engine's own tmp directory,
    not the system's (/tmp may be a small tmpfs), and one left by a crash is cleared
    when the engine opens. Run in a child: chDB is one engine per process, and an audit
    hook, which sees every file Python opens, cannot be removed."""
    data = tmp_path / "clickhouse"
    out = subprocess.run(
        [sys.executable, "-c", _INSERT_FILES, str(data)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.splitlines()
    assert "left False" in out
    assert "rows 1" in out
    opened = [line.split() for line in out if line.startswith("opened")]
    assert opened, out  # the insert did pass through a file
    for _, path, exists in opened:
        assert path.startswith(f"{data}/tmp/"), path
        assert exists == "False", path  # removed after the insert


def _post(client: httpx.Client, url: str, pid: int, key: str) -> httpx.Response:
    body = log_envelope([{"timestamp": time.time(), "body": "x"}])
    return client.post(f"{url}/api/{pid}/envelope/", content=body, headers=sentry_auth(key))


@pytest.mark.skipif(not CAN_MOUNT, reason="fills a loop-mounted ext4: needs root")
@once
def test_ingest_leaves_the_last_of_the_disk_free(tmp_path):
    """A disk filled to the last byte could not be freed by errortrack: ClickHouse needs
    1 MiB to drop a partition (retention, the cap, the cleanup API) and SQLite room for
    its -wal to start. Ingest now stops at a floor (ERRORTRACK_MIN_FREE_BYTES, at most 5 %
    of the filesystem) and goes on once there is room again."""
    image, mount = tmp_path / "disk.img", tmp_path / "mnt"
    with loop_filesystem(image, mount, "200M"), scratch_database(tmp_path) as url:
        env = server_env(mount, url, ERRORTRACK_MIN_FREE_BYTES=str(8 * 2**20))
        server = Server(env).start()
        try:
            pid, key = create_project_in(url)
            with httpx.Client(timeout=10) as client:
                assert _send(client, server.url, pid, key, "roomy")[0] == 200
                fs = os.statvfs(mount)
                left = 4 * 2**20
                filler = mount / "filler"
                run("fallocate", "-l", str(fs.f_bavail * fs.f_frsize - left), filler)
                time.sleep(FREE_CHECK_SECONDS + 0.1)
                resp = _post(client, server.url, pid, key)
                assert resp.status_code == 503, resp.text
                assert "nearly full" in resp.json()["error"]["message"]
                assert resp.headers["Retry-After"]
                # The rest of the server goes on with the room the floor kept, and /readyz
                # and the log say why ingest is refused.
                ready = client.get(f"{server.url}/readyz")
                assert ready.status_code == 200 and ready.json()["spool"]["disk_low"] is True
                assert ready.json()["spool"]["free_bytes"] < 8 * 2**20
                assert "ingest refused: the disk is below its free-space floor" in server.log()
                filler.unlink()
                time.sleep(FREE_CHECK_SECONDS + 0.1)
                assert _send(client, server.url, pid, key, "room again")[0] == 200
                assert client.get(f"{server.url}/readyz").json()["spool"]["disk_low"] is False
            server.stop()
            # Too full already at start: refused from the first request, and taken again
            # once there is room, though no request got as far as the spool meanwhile.
            fs = os.statvfs(mount)
            run("fallocate", "-l", str(fs.f_bavail * fs.f_frsize - left), filler)
            server = Server(env).start()
            with httpx.Client(timeout=10) as client:
                assert _post(client, server.url, pid, key).status_code == 503
                filler.unlink()
                time.sleep(FREE_CHECK_SECONDS * 2 + 0.1)
                assert _send(client, server.url, pid, key, "after start")[0] == 200
        finally:
            server.stop()
