"""The real sentry-sdk against a real server; every log read back from ClickHouse."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from errortrack.projects.service import dsn
from tests.ingest_support import create_project_in, stored_logs
from tests.support import Server, scratch_database, server_env

pytestmark = pytest.mark.e2e
APP = Path(__file__).with_name("sdk_python_app.py")
SEVERITY = {"trace": 1, "debug": 5, "info": 9, "warn": 13, "error": 17, "fatal": 21}
EXPECTED_ATTRS = {
    "s": {"value": "text", "type": "string"},
    "i": {"value": 42, "type": "integer"},
    "big": {"value": 2**53 + 1, "type": "integer"},
    "d": {"value": 2.5, "type": "double"},
    "b": {"value": True, "type": "boolean"},
    "a": {"value": ["x", "y"], "type": "array"},
}


def test_python_sdk_logs_land_field_by_field(tmp_path):
    data = tmp_path / "data"
    with scratch_database(tmp_path) as url:
        # A batch age of 10 minutes: the rows can only reach ClickHouse through the
        # worker's exit hook, which this test therefore checks too.
        env = server_env(data, url, ERRORTRACK_WRITER_MAX_AGE_MS="600000")
        server = Server(env).start()
        try:
            pid, key = create_project_in(url)
            done = subprocess.run(
                [sys.executable, str(APP), dsn(server.url, key, pid)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stderr
        finally:
            server.stop()  # graceful: the worker flushes the spool on exit
        assert "Traceback" not in server.log(), server.log()
    sent = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert len(sent) == 13
    rows = {r["body"]: r for r in stored_logs(data, pid)}
    assert set(rows) == {s["body"] for s in sent}
    for s in sent:
        row = rows[s["body"]]
        level = "warn" if s["level"] == "warning" else s["level"]  # the SDK sends "warn"
        assert row["level"] == level
        assert row["severity_number"] == SEVERITY[level]
        assert row["span_id"] == (s["span_id"] or "")
        assert row["trace_id"] == (s["trace_id"] or "")
        attrs = orjson.loads(row["attributes"])
        for name, expected in EXPECTED_ATTRS.items():
            assert attrs[name] == expected, name
        assert attrs["sentry.environment"] == {"value": "test", "type": "string"}
        assert row["attr_int"]["i"] == 42 and row["attr_bool"]["b"] is True
        assert row["attr_float"]["d"] == 2.5 and row["attr_string"]["s"] == "text"
        assert s["t0"] * 1e6 - 1 <= row["ts_us"] <= s["t1"] * 1e6 + 1
        assert row["ingested_us"] >= row["ts_us"]
        assert row["retention_days"] == 90
    assert len({r["id"] for r in rows.values()}) == 13
