"""GET /api/storage and POST /api/storage/cleanup in-process, on the real stores, with
data that came in through the real ingest endpoint where the test is about ingest."""

from __future__ import annotations

import datetime as dt

import pytest

from errortrack.ingest.auth import KeyCache
from tests import storage_rows as rows
from tests.access_world import build_world
from tests.ingest_support import log_envelope, make_project, sentry_auth

D = dt.timedelta(days=1)


@pytest.fixture
def world(state, client):
    return build_world(state, client)


def _ingest(world, pid, key, bodies):
    # Dated at the frozen clock, which starts at the real time (tests/support.py): a fixed
    # day would let ClickHouse's TTL drop a 7-day row once the real date is a week past it.
    now = world.state.clock().timestamp()
    logs = [{"timestamp": now, "level": "info", "body": b} for b in bodies]
    resp = world.client.simulate_post(
        f"/api/{pid}/envelope/", body=log_envelope(logs), headers=sentry_auth(key)
    )
    assert resp.status_code == 200, resp.text
    world.state.ingest.writer.drain()


def test_usage_counts_match_what_was_ingested(world):
    with world.state.sessions() as s:
        p1, k1 = make_project(s, "one")
        p2, k2 = make_project(s, "two")
    _ingest(world, p1, k1, [f"a{i}" for i in range(12)])
    _ingest(world, p2, k2, ["b1", "b2", "b3"])
    resp = world.call("admin", "GET", "/api/storage")
    assert resp.status_code == 200, resp.text
    report = resp.json
    assert report["tables"]["logs"]["rows"] == 15
    by_id = {p["project_id"]: p for p in report["projects"]}
    assert by_id[p1]["tables"]["logs"]["rows"] == 12
    assert by_id[p2]["tables"]["logs"]["rows"] == 3
    assert by_id[p1]["name"] == "one"
    assert report["total"]["rows"] == 15 and report["total"]["bytes_on_disk"] > 0
    assert report["retention"]["default_days"] == world.state.settings.retention_days
    assert "estimated" in report["estimates"]
    assert report["relational"]["bytes"] > 0


def test_project_override_wins_and_applies_to_data_ingested_afterwards(world, clickhouse):
    keys_time = [0.0]
    world.state.ingest.ingest.keys = KeyCache(clock=lambda: keys_time[0])
    with world.state.sessions() as s:
        own, own_key = make_project(s, "own", retention_days=7)
        dflt, dflt_key = make_project(s, "default")
    _ingest(world, own, own_key, ["before"])
    _ingest(world, dflt, dflt_key, ["default"])
    resp = world.call("admin", "PATCH", f"/api/projects/{own}", {"retention_days": 400})
    assert resp.status_code == 200, resp.text
    keys_time[0] += 60  # past the ingest key cache's expiry
    _ingest(world, own, own_key, ["after"])
    got = dict(clickhouse.query_rows("SELECT body, retention_days FROM logs"))
    default_days = world.state.settings.retention_days
    assert got == {"before": 7, "after": 400, "default": default_days}
    usage = world.call("admin", "GET", "/api/storage").json
    shown = {p["project_id"]: p["retention_days"] for p in usage["projects"]}
    assert shown[own] == 400 and shown[dflt] == default_days


def test_cleanup_over_http_dry_run_then_for_real(world, clickhouse):
    now = world.state.clock()
    rows.add_all(
        clickhouse, world.project_id, [now - 40 * D, now - 31 * D, now - D], retention=3650
    )
    body = {"older_than_days": 30, "dry_run": True}
    dry = world.call("primary", "POST", "/api/storage/cleanup", body)
    assert dry.status_code == 200, dry.text
    assert dry.json["removed"] == {"logs": 2, "events": 2, "spans": 2}
    assert dry.json["dry_run"] is True
    assert rows.counts(clickhouse) == {"logs": 3, "events": 3, "spans": 3}
    done = world.call("primary", "POST", "/api/storage/cleanup", {"older_than_days": 30})
    assert done.status_code == 200, done.text
    assert done.json["removed"] == dry.json["removed"]
    assert done.json["partitions_dropped"] == {"logs": 2, "events": 2, "spans": 2}
    assert rows.counts(clickhouse) == {"logs": 1, "events": 1, "spans": 1}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "older_than_days"),
        ({"older_than_days": 0}, "older_than_days"),
        ({"older_than_days": "30"}, "older_than_days"),
        ({"older_than_days": 30, "project_id": -2}, "project_id"),
        ({"older_than_days": 30, "project_id": 2**31}, "project_id"),  # was a 500 on PG
        ({"older_than_days": 30, "project_id": 2**63}, "project_id"),  # and on SQLite
        ({"older_than_days": 30, "project_id": 2**64 - 1, "dry_run": True}, "project_id"),
        ({"older_than_days": 30, "dry_run": "perhaps"}, "dry_run"),
        ({"older_than_days": 30, "everything": True}, "everything"),
    ],
)
def test_bad_cleanup_bodies_are_400_and_delete_nothing(world, clickhouse, body, field):
    now = world.state.clock()
    rows.add_all(clickhouse, world.project_id, [now - 40 * D], retention=3650)
    resp = world.call("admin", "POST", "/api/storage/cleanup", body)
    assert resp.status_code == 400, resp.text
    assert resp.json["error"]["field"] == field
    assert rows.counts(clickhouse) == {"logs": 1, "events": 1, "spans": 1}


@pytest.mark.parametrize("caller", ["outsider", "viewer", "editor", "padmin"])
def test_only_global_admins_may_clean_up(world, clickhouse, caller):
    now = world.state.clock()
    rows.add_all(clickhouse, world.project_id, [now - 40 * D], retention=3650)
    body = {"older_than_days": 30, "project_id": world.project_id}
    assert world.call(caller, "POST", "/api/storage/cleanup", body).status_code == 403
    assert world.call(caller, "GET", "/api/storage").status_code == 403
    assert world.call("anonymous", "GET", "/api/storage").status_code == 401
    assert rows.counts(clickhouse) == {"logs": 1, "events": 1, "spans": 1}
