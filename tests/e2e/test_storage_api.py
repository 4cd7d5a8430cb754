"""GET /api/storage and POST /api/storage/cleanup in-process, on the real stores, with
data that came in through the real ingest endpoint where the test is about ingest."""

from __future__ import annotations

import datetime as dt
import sqlite3
import time

import orjson
import pytest
import sqlalchemy as sa

from errortrack.auth.tokens import sha256
from errortrack.ingest.auth import KeyCache
from errortrack.models import ApiToken
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
        # Read as booleans by marshmallow's Bool until the nineteenth session: "no" and 0
        # deleted for real.
        ({"older_than_days": 30, "dry_run": "no"}, "dry_run"),
        ({"older_than_days": 30, "dry_run": "off"}, "dry_run"),
        ({"older_than_days": 30, "dry_run": "0"}, "dry_run"),
        ({"older_than_days": 30, "dry_run": 0}, "dry_run"),
        ({"older_than_days": 30, "dry_run": "yes"}, "dry_run"),
        ({"older_than_days": 30, "dry_run": 1}, "dry_run"),
        ({"older_than_days": 30, "dry_run": None}, "dry_run"),
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


def _relational_writes_free(world, database_url) -> bool:
    """Whether another writer could write now: on SQLite, take the database's one write
    lock; on PostgreSQL, update the token rows (the request's own update locks its row)."""
    if database_url.startswith("sqlite"):
        path = database_url.removeprefix("sqlite:///")
        other = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("COMMIT")
            return True
        except sqlite3.OperationalError:  # database is locked
            return False
        finally:
            other.close()
    with world.state.engine.connect() as conn:
        conn.execute(sa.text("SET lock_timeout = '200ms'"))
        try:
            conn.execute(sa.text("UPDATE api_tokens SET last_used_at = last_used_at"))
        except sa.exc.OperationalError:  # lock not available
            return False
        return True


@pytest.mark.parametrize("request_", ["cleanup", "usage"])
def test_storage_requests_hold_no_relational_lock_during_clickhouse_work(
    world, clickhouse, database_url, monkeypatch, request_
):
    """A token last used over a minute ago (or never) has its last_used_at written by
    the request. Until the nineteenth session that write's transaction stayed open
    through the ClickHouse work: on SQLite the database's only write lock, held through
    every drop, delete and scan (seconds for a project's cleanup), stalled the ingest
    writer's grouping hook, logins and every other writer."""
    now = world.state.clock()
    rows.add_all(clickhouse, world.project_id, [now - 40 * D, now - 39 * D], retention=3650)
    token = world.add_token(world.users["admin"])  # never used: its first use writes
    free: list[bool] = []
    if request_ == "cleanup":
        method, path, body = "POST", "/api/storage/cleanup", {
            "older_than_days": 30, "project_id": world.project_id
        }  # fmt: skip
        name, marker = "command", "DELETE FROM"
    else:
        method, path, body = "GET", "/api/storage", None
        name, marker = "query_rows", "system.parts"
    real = getattr(clickhouse, name)

    def watched(sql, *args, **kwargs):
        if marker in sql:
            free.append(_relational_writes_free(world, database_url))
        return real(sql, *args, **kwargs)

    monkeypatch.setattr(clickhouse, name, watched)
    resp = world.client.simulate_request(
        method, path, json=body, headers={"Authorization": f"Bearer {token}"}
    )
    assert resp.status_code == 200, resp.text
    assert free and all(free), free
    with world.state.sessions() as s:  # and the token's use was recorded all the same
        query = sa.select(ApiToken.last_used_at).where(ApiToken.token_hash == sha256(token))
        assert s.scalar(query) == now


def test_deleting_a_project_deletes_its_rows(world, clickhouse):
    """Its logs, events and spans stayed on disk until their retention ended (months at
    a long retention), unreachable but there: in the storage report as a project that
    no longer exists."""
    with world.state.sessions() as s:
        gone, gone_key = make_project(s, "gone")
        kept, kept_key = make_project(s, "kept")
    _ingest(world, gone, gone_key, ["a", "b"])
    _ingest(world, kept, kept_key, ["c"])
    now = world.state.clock()
    rows.add_events(clickhouse, gone, [now])
    rows.add_spans(clickhouse, gone, [now, now])
    assert world.call("admin", "DELETE", f"/api/projects/{gone}").status_code == 204
    # Scheduled, not waited for: ClickHouse applies the DELETE in the background.
    deadline = time.monotonic() + 30
    while rows.counts(clickhouse, f"project_id = {gone}") != dict.fromkeys(rows.TIME, 0):
        assert time.monotonic() < deadline, rows.counts(clickhouse, f"project_id = {gone}")
        time.sleep(0.1)
    assert rows.counts(clickhouse, f"project_id = {kept}") == {"logs": 1, "events": 0, "spans": 0}
    listed = world.call("admin", "GET", "/api/storage").json["projects"]
    assert [p["project_id"] for p in listed if p["project_id"] in (gone, kept)] == [kept]


def test_rows_a_cleanup_dropped_do_not_come_back_with_a_retried_segment(world, clickhouse):
    """A segment whose logs went in and whose events insert failed is kept and retried.
    ClickHouse forgets the insert tokens of the parts a DROP PARTITION removes, so the
    retry's logs, removed by a cleanup in between (and counted in its answer), went in
    again (review, thirty-second session)."""
    with world.state.sessions() as s:
        pid, key = make_project(s, "p")
    old = world.state.clock().timestamp() - 3 * 86400
    logs = [{"timestamp": old, "level": "info", "body": f"old {i}"} for i in range(5)]
    now = world.state.clock().timestamp()
    event = {"event_id": "a" * 32, "message": "boom", "timestamp": now}
    for body in (log_envelope(logs), _event_envelope(event)):
        resp = world.client.simulate_post(
            f"/api/{pid}/envelope/", body=body, headers=sentry_auth(key)
        )
        assert resp.status_code == 200, resp.text
    writer = world.state.ingest.writer
    insert = writer.insert

    def events_down(table: str, data: bytes, token: str) -> None:
        if table == "events":
            raise ConnectionError("ClickHouse went away")
        insert(table, data, token)

    def stored() -> int:
        return rows.counts(clickhouse, f"project_id = {pid}")["logs"]

    writer.spool.seal()
    writer.insert = events_down
    with pytest.raises(ConnectionError):
        writer.step()
    writer.insert = insert
    assert stored() == 5
    resp = world.call("admin", "POST", "/api/storage/cleanup", {"older_than_days": 1})
    assert resp.status_code == 200, resp.text
    assert resp.json["removed"]["logs"] == 5 and resp.json["partitions_dropped"]["logs"] >= 1
    writer.drain()  # the retry: events go in, the logs not again
    assert stored() == 0
    assert rows.counts(clickhouse, f"project_id = {pid}")["events"] == 1


def _event_envelope(event: dict) -> bytes:
    payload = orjson.dumps(event)
    header = orjson.dumps({"type": "event", "length": len(payload)})
    return b"\n".join([orjson.dumps({"event_id": event["event_id"]}), header, payload])
