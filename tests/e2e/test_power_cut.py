"""Rows answered 200 survive a power cut (twenty-fifth session's disk review).

The spool writer deletes a segment once ClickHouse acknowledges its insert, and
ClickHouse did not fsync new parts: for up to ~30 s (the kernel's writeback delay) the
rows were in the page cache only, and a power cut lost 792 of 800 acknowledged
envelopes. The cut is simulated as fstests' ``godown`` does: ``FS_IOC_SHUTDOWN`` with
``NOLOGFLUSH`` on an ext4 filesystem in a file (a loop mount) holding the data dir, which
drops its dirty pages and its uncommitted journal. Needs root and loop devices; skipped
elsewhere.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import time
import uuid
from pathlib import Path

import httpx
import orjson
import pytest

from tests.support import (
    CAN_MOUNT,
    Server,
    errortrack,
    loop_filesystem,
    once,
    run,
    scratch_database,
    server_env,
)

pytestmark = [
    pytest.mark.skipif(
        not CAN_MOUNT, reason="a power cut is simulated on a loop-mounted ext4: needs root"
    ),
    once,
]

FS_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
NOLOGFLUSH = 2
LOGS_PER_ENVELOPE = 10


def _unmount(mount: Path) -> bool:
    """The killed server's processes let go of the filesystem a moment after they die."""
    for _ in range(40):
        if run("umount", mount).returncode == 0:
            return True
        time.sleep(0.25)
    return False


def _holders(mount: Path) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            links = [str(p.readlink()) for p in (proc / "fd").iterdir()]
            links.append(str((proc / "cwd").readlink()))
            maps = (proc / "maps").read_text()
            if any(str(mount) in x for x in links) or str(mount) in maps:
                found.append(f"{proc.name} {(proc / 'cmdline').read_text()[:80]}")
    return found


def _power_cut(mount: Path) -> None:
    fd = os.open(mount, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, FS_IOC_SHUTDOWN, struct.pack("I", NOLOGFLUSH))
    finally:
        os.close(fd)


def _envelope(seq: int) -> tuple[str, bytes]:
    event_id = uuid.uuid4().hex
    now = time.time()
    event = orjson.dumps(
        {
            "event_id": event_id,
            "timestamp": now,
            "platform": "python",
            "level": "error",
            "exception": {"values": [{"type": "PowerCut", "value": f"boom {seq}"}]},
        }
    )
    logs = orjson.dumps(
        {
            "items": [
                {"timestamp": now, "level": "info", "body": f"seq-{seq}-{i}"}
                for i in range(LOGS_PER_ENVELOPE)
            ]
        }
    )
    return event_id, b"\n".join(
        [
            orjson.dumps({"event_id": event_id}),
            orjson.dumps({"type": "event", "length": len(event)}),
            event,
            orjson.dumps({"type": "log", "length": len(logs), "item_count": LOGS_PER_ENVELOPE}),
            logs,
            b"",
        ]
    )


def test_acknowledged_rows_survive_a_power_cut(tmp_path):
    image, mount = tmp_path / "disk.img", tmp_path / "mnt"
    with loop_filesystem(image, mount), scratch_database(tmp_path) as url:
        # The data dir is the filesystem itself: the server's log (beside the data dir,
        # held open by this process) stays off it, or it could not be unmounted.
        env = server_env(mount, url, ERRORTRACK_BOOTSTRAP_PASSWORD="primary password")
        assert errortrack("bootstrap", "--email", "root@example.com", env=env).returncode == 0
        made = errortrack(
            "token", "create", "--email", "root@example.com", "--description", "t", env=env
        )
        bearer = {"Authorization": f"Bearer {made.stdout.strip()}"}
        server = Server(env, threads=2).start()
        try:
            project = httpx.post(
                f"{server.url}/api/projects", json={"name": "cut"}, headers=bearer
            ).json()
            key = project["dsn"].split("//", 1)[1].split("@", 1)[0]
            os.sync()  # the set-up itself is on disk
            acknowledged: list[str] = []
            with httpx.Client(headers={"X-Sentry-Auth": f"Sentry sentry_key={key}"}) as sdk:
                deadline = time.monotonic() + 5
                seq = 0
                while time.monotonic() < deadline:
                    event_id, body = _envelope(seq)
                    resp = sdk.post(f"{server.url}/api/{project['id']}/envelope/", content=body)
                    if resp.status_code == 200:
                        acknowledged.append(event_id)
                    seq += 1
                    time.sleep(0.02)
            # The writer inserts within a second and then deletes the spool's segments:
            # from then on ClickHouse's parts are the only copy.
            time.sleep(1.5)
            _power_cut(mount)
        finally:
            server.kill()
        # The "reboot": the journal is replayed and the filesystem checked.
        assert _unmount(mount), _holders(mount)
        run("e2fsck", "-fy", image)
        assert run("mount", "-o", "loop", image, mount).returncode == 0
        server = Server(env, threads=2).start()
        try:
            path = f"{server.url}/api/projects/{project['id']}"
            stored: set[str] = set()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # the spool's leftovers are replayed
                stored = set()
                page = httpx.get(f"{path}/events?per_page=100", headers=bearer).json()
                while True:
                    stored |= {item["event_id"].replace("-", "") for item in page["items"]}
                    if not page["next_cursor"]:
                        break
                    page = httpx.get(
                        f"{path}/events?per_page=100&cursor={page['next_cursor']}",
                        headers=bearer,
                    ).json()
                if stored >= set(acknowledged):
                    break
                time.sleep(1)
            assert len(acknowledged) > 50
            missing = set(acknowledged) - stored
            assert not missing, f"{len(missing)} of {len(acknowledged)} acknowledged events lost"
            logs = httpx.get(f"{path}/logs?per_page=1", headers=bearer).json()
            assert logs["total_count"] >= LOGS_PER_ENVELOPE * len(acknowledged)
        finally:
            server.stop()
