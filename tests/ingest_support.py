"""Helpers for ingest tests: a project with its key, envelopes, encodings."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import brotli
import orjson
import zstandard
from sqlalchemy.orm import Session

from errortrack.projects.service import active_key, create_project

ENCODERS = {
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
    "identity": lambda b: b,
}


def make_project(
    session: Session, name: str = "shop", retention_days: int | None = None
) -> tuple[int, str]:
    project = create_project(session, name=name)
    project.retention_days = retention_days
    key = active_key(session, project.id)
    assert key is not None
    session.commit()
    return project.id, key.public_key


def log_envelope(
    logs: list[dict[str, Any]], *, with_length: bool = True, header: dict[str, Any] | None = None
) -> bytes:
    payload = orjson.dumps({"version": 2, "items": logs})
    item: dict[str, Any] = {
        "type": "log",
        "item_count": len(logs),
        "content_type": "application/vnd.sentry.items.log+json",
    }
    if with_length:
        item["length"] = len(payload)
    return orjson.dumps(header or {}) + b"\n" + orjson.dumps(item) + b"\n" + payload + b"\n"


def spooled_log_line(project_id: int, body: str, at: float, **changes: Any) -> bytes:
    """A logs row as the spool holds it (one JSONEachRow line), dated ``at`` (tests pass
    now: ClickHouse's TTL runs on the real clock); ``changes`` override its columns."""
    row = {
        "project_id": project_id,
        "timestamp": at,
        "ingested_at": at + 0.5,
        "level": "info",
        "severity_number": 9,
        "body": body,
        "trace_id": "",
        "span_id": "",
        "attributes": "{}",
        "attr_string": {},
        "attr_int": {},
        "attr_float": {},
        "attr_bool": {},
        "retention_days": 90,
        **changes,
    }
    return orjson.dumps(row) + b"\n"


def sentry_auth(key: str) -> dict[str, str]:
    return {"X-Sentry-Auth": f"Sentry sentry_key={key}, sentry_version=7, sentry_client=test/1.0"}


def send_events(world: Any, project_id: int, events: list[dict[str, Any]]) -> None:
    """Each event as an SDK sends it (an envelope of one event item) through a
    ``tests.access_world`` world's served app, then the writer's batch through the
    grouping hook into both stores."""
    with world.state.sessions() as s:
        key = active_key(s, project_id).public_key
    for event in events:
        payload = orjson.dumps(event)
        body = b"\n".join(
            [
                orjson.dumps({"event_id": event["event_id"]}),
                orjson.dumps({"type": "event", "length": len(payload)}),
                payload,
            ]
        )
        resp = world.client.simulate_post(
            f"/api/{project_id}/envelope/", body=body, headers=sentry_auth(key)
        )
        assert resp.status_code == 200, resp.text
    world.state.ingest.writer.drain()


def ingest_auth(sessions: Callable[[], Session], project_id: int) -> dict[str, str]:
    """The auth header for a project's active key, read from the relational store."""
    with sessions() as session:
        key = active_key(session, project_id)
        assert key is not None
        return sentry_auth(key.public_key)


def create_project_in(database_url: str, name: str = "e2e") -> tuple[int, str]:
    """A project with its key, written straight into a server's relational store."""
    from errortrack import db

    engine = db.make_engine(database_url)
    try:
        with db.make_sessionmaker(engine)() as session:
            return make_project(session, name)
    finally:
        engine.dispose()


_READ = """
import sys, clickhouse_connect
client = clickhouse_connect.get_client(dsn="chdb://" + sys.argv[1], database="errortrack")
sys.stdout.buffer.write(client.raw_query(sys.argv[2] + " FORMAT JSONEachRow"))
"""


def query_data_dir(data_dir: Path, sql: str) -> list[dict[str, Any]]:
    """Rows from the embedded ClickHouse of a STOPPED server (chDB allows one process per
    data dir, and this test process already has its own engine open)."""
    done = subprocess.run(
        [sys.executable, "-c", _READ, str((data_dir / "clickhouse").resolve()), sql],
        capture_output=True,
        timeout=120,
        env={**os.environ, "TZ": "UTC"},
    )
    assert done.returncode == 0, done.stderr.decode()
    return [orjson.loads(line) for line in done.stdout.splitlines()]


LOG_COLUMNS = (
    "body, level, severity_number, trace_id, span_id, attributes, retention_days, "
    "toUnixTimestamp64Micro(timestamp) AS ts_us, toUnixTimestamp64Micro(ingested_at) AS ingested_us, "
    "toString(id) AS id, attr_string, attr_int, attr_float, attr_bool"
)


def stored_logs(data_dir: Path, project_id: int) -> list[dict[str, Any]]:
    return query_data_dir(
        data_dir,
        f"SELECT {LOG_COLUMNS} FROM logs WHERE project_id = {int(project_id)} ORDER BY timestamp",
    )


def spool_empty(data_dir: Path) -> bool:
    """No segment left in any worker's spool under the server's data dir."""
    return not list((data_dir / "spool").glob("*/*.seg"))


def wait_spool_empty(data_dir: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not spool_empty(data_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert spool_empty(data_dir), "the spool did not drain"
