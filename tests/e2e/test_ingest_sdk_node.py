"""The real @sentry/node (npm, tests/e2e/node) against a real server, read back field by field."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

from errortrack.projects.service import dsn
from tests.ingest_support import create_project_in, stored_logs
from tests.support import Server, scratch_database, server_env

pytestmark = pytest.mark.e2e
NODE_DIR = Path(__file__).with_name("node")
SEVERITY = {"trace": 1, "debug": 5, "info": 9, "warn": 13, "error": 17, "fatal": 21}
EXPECTED_ATTRS = {
    "s": {"value": "text", "type": "string"},
    "i": {"value": 42, "type": "integer"},
    "d": {"value": 2.5, "type": "double"},
    "b": {"value": True, "type": "boolean"},
    "a": {"value": ["x", "y"], "type": "array"},
}


def test_node_sdk_logs_land_field_by_field(tmp_path):
    node = shutil.which("node")
    assert node, "node is required (see README: make test installs tests/e2e/node)"
    assert (NODE_DIR / "node_modules" / "@sentry" / "node").is_dir(), (
        "run: npm ci --prefix tests/e2e/node"
    )
    data = tmp_path / "data"
    with scratch_database(tmp_path) as url:
        server = Server(server_env(data, url)).start()
        try:
            pid, key = create_project_in(url)
            done = subprocess.run(
                [node, "app.mjs", dsn(server.url, key, pid)],
                cwd=NODE_DIR,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stderr
        finally:
            server.stop()
        assert "Traceback" not in server.log(), server.log()
    sent = orjson.loads(done.stdout.strip().splitlines()[-1])
    assert len(sent) == 13
    rows = {r["body"]: r for r in stored_logs(data, pid)}
    assert set(rows) == {s["body"] for s in sent}
    for s in sent:
        row = rows[s["body"]]
        assert row["level"] == s["level"]
        assert row["severity_number"] == SEVERITY[s["level"]]
        # Node sends no top-level span_id: the span comes from sentry.trace.parent_span_id.
        assert row["span_id"] == (s["span_id"] or "")
        assert row["trace_id"] == (s["trace_id"] or "")
        attrs = orjson.loads(row["attributes"])
        for name, expected in EXPECTED_ATTRS.items():
            assert attrs[name] == expected, name
        assert attrs["sentry.release"] == {"value": "e2e-node@1", "type": "string"}
        assert row["attr_int"]["i"] == 42 and row["attr_float"]["d"] == 2.5
        assert row["attr_bool"]["b"] is True and row["attr_string"]["a"] == '["x","y"]'
        assert s["t0"] * 1e6 - 50_000 <= row["ts_us"] <= s["t1"] * 1e6 + 50_000
        assert row["retention_days"] == 90
