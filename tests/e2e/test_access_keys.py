"""A project's ingest keys over the API: rotate a DSN by creating a key, then disabling
or deleting the old one; the real ingest endpoint then refuses it (403)."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from errortrack.ingest.auth import KeyCache
from tests.access_world import build_world
from tests.ingest_support import log_envelope, sentry_auth


@pytest.fixture
def world(state, client):
    keys_time = [0.0]
    state.ingest.ingest.keys = KeyCache(clock=lambda: keys_time[0])
    built = build_world(state, client)
    built.keys_time = keys_time
    return built


def _keys(world, caller="padmin"):
    resp = world.call(caller, "GET", f"/api/projects/{world.project_id}/keys")
    assert resp.status_code == 200, resp.text
    return resp.json


def _send(world, public_key):
    now = world.state.clock().timestamp()
    body = log_envelope([{"timestamp": now, "level": "info", "body": "x"}])
    return world.client.simulate_post(
        f"/api/{world.project_id}/envelope/", body=body, headers=sentry_auth(public_key)
    ).status_code


def _expire_cached_keys(world):
    world.keys_time[0] += KeyCache().ttl + 1


def test_rotating_a_dsn(world):
    pid = world.project_id
    [first] = _keys(world, "viewer")  # the key the project was made with
    assert set(first) == {"id", "label", "public_key", "dsn", "is_active", "created_at"}
    assert first["is_active"] is True and first["label"] is None
    assert first["dsn"] == f"http://{first['public_key']}@127.0.0.1:8000/{pid}"
    project = world.call("viewer", "GET", f"/api/projects/{pid}").json
    assert project["dsn"] == first["dsn"]

    made = world.call("padmin", "POST", f"/api/projects/{pid}/keys", {"label": "  web  "})
    assert made.status_code == 201, made.text
    new = made.json
    assert new["label"] == "web" and new["is_active"] is True
    assert re.fullmatch(r"[0-9a-f]{32}", new["public_key"]) and new["id"] > first["id"]
    assert [k["id"] for k in _keys(world)] == [first["id"], new["id"]]
    assert _send(world, new["public_key"]) == 200 and _send(world, first["public_key"]) == 200

    path = f"/api/projects/{pid}/keys/{first['id']}"
    off = world.call("padmin", "PATCH", path, {"is_active": False, "label": "leaked"})
    assert off.status_code == 200, off.text
    assert (off.json["is_active"], off.json["label"]) == (False, "leaked")
    assert world.call("viewer", "GET", path).json == off.json
    # The project's DSN is now the first key still active.
    assert world.call("viewer", "GET", f"/api/projects/{pid}").json["dsn"] == new["dsn"]
    listed = {p["id"]: p["dsn"] for p in world.call("viewer", "GET", "/api/projects").json}
    assert listed[pid] == new["dsn"]
    _expire_cached_keys(world)
    assert _send(world, first["public_key"]) == 403
    assert _send(world, new["public_key"]) == 200

    assert world.call("padmin", "PATCH", path, {"is_active": True}).json["is_active"] is True
    _expire_cached_keys(world)
    assert _send(world, first["public_key"]) == 200

    assert world.call("padmin", "DELETE", path).status_code == 204
    assert world.call("padmin", "GET", path).status_code == 404
    assert [k["id"] for k in _keys(world)] == [new["id"]]
    _expire_cached_keys(world)
    assert _send(world, first["public_key"]) == 403

    # No active key left: the project has no DSN, and a new key gives it one again.
    new_path = f"/api/projects/{pid}/keys/{new['id']}"
    assert world.call("padmin", "PATCH", new_path, {"is_active": False}).status_code == 200
    assert world.call("viewer", "GET", f"/api/projects/{pid}").json["dsn"] is None
    again = world.call("padmin", "POST", f"/api/projects/{pid}/keys", {}).json
    assert again["label"] is None
    assert world.call("viewer", "GET", f"/api/projects/{pid}").json["dsn"] == again["dsn"]


def test_another_projects_key_is_not_found(world):
    other = world.add_project()
    [theirs] = world.call("admin", "GET", f"/api/projects/{other}/keys").json
    path = f"/api/projects/{world.project_id}/keys/{theirs['id']}"
    for method, body in (("GET", None), ("PATCH", {"is_active": False}), ("DELETE", None)):
        resp = world.call("padmin", method, path, body)
        assert resp.status_code == 404, (method, resp.text)
        assert resp.json["error"]["code"] == "not_found"
    assert world.call("admin", "GET", f"/api/projects/{other}/keys").json == [theirs]
    too_big = f"/api/projects/{world.project_id}/keys/{2**63}"
    assert world.call("padmin", "GET", too_big).status_code == 404


@pytest.mark.parametrize(
    ("method", "body", "field"),
    [
        ("POST", {"label": "x" * 201}, "label"),
        ("POST", {"label": 5}, "label"),
        ("POST", {"public_key": "a" * 32}, "public_key"),
        ("PATCH", {"is_active": 0}, "is_active"),
        ("PATCH", {"is_active": "false"}, "is_active"),
        ("PATCH", {"is_active": None}, "is_active"),
        ("PATCH", {"label": "y" * 201}, "label"),
        ("PATCH", {"project_id": 2}, "project_id"),
    ],
)
def test_bad_key_input_is_400_and_changes_nothing(world, method, body, field):
    before = _keys(world)
    path = f"/api/projects/{world.project_id}/keys"
    if method == "PATCH":
        path += f"/{before[0]['id']}"
    resp = world.call("padmin", method, path, body)
    assert resp.status_code == 400, resp.text
    assert resp.json["error"]["field"] == field
    assert _keys(world) == before


@pytest.mark.parametrize("change", ["patch", "delete"])
def test_a_key_deleted_while_it_is_changed_is_404(world, state, change):
    """PATCH or DELETE of a key whose DELETE is committing: the ORM's flush of the loaded
    key matched no row and raised StaleDataError (a 500)."""
    import threading
    import time

    from errortrack import db
    from errortrack.errors import NotFound
    from errortrack.projects import keys

    pid = world.project_id
    with db.unit_of_work(state.sessions) as s:
        key_id = keys.create_key(s, pid).id
    deleted = threading.Event()
    outcome: list[object] = []

    def delete():
        with db.unit_of_work(state.sessions) as s:
            keys.delete_key(s, pid, key_id)
            deleted.set()
            time.sleep(0.5)  # the request commits a moment later

    def other():
        with db.unit_of_work(state.sessions) as s:
            keys.get_key(s, pid, key_id)  # the request found the key...
            deleted.wait(timeout=10)
            try:
                if change == "patch":  # ...and changes it as it goes
                    keys.update_key(s, pid, key_id, {"is_active": False})
                else:
                    keys.delete_key(s, pid, key_id)
                outcome.append("done")
            except NotFound as e:
                outcome.append((e.status, e.message))
            except Exception as e:
                outcome.append(type(e).__name__)

    threads = [threading.Thread(target=f) for f in (other, delete)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert outcome == [(404, "key not found")]
    assert key_id not in [k["id"] for k in _keys(world)]


def test_a_key_made_for_a_project_being_deleted_is_404(world, state):
    import threading
    import time

    from errortrack import db
    from errortrack.errors import NotFound
    from errortrack.models import Project
    from errortrack.projects import keys
    from errortrack.projects.manage import delete_project

    pid = world.add_project()
    deleted = threading.Event()
    outcome: list[object] = []

    def remove():
        with db.unit_of_work(state.sessions) as s:
            delete_project(s, s.get(Project, pid), now=dt.datetime.now(dt.UTC))
            deleted.set()
            time.sleep(0.5)

    def create():
        with db.unit_of_work(state.sessions) as s:
            assert s.get(Project, pid) is not None  # the permission check passed
            deleted.wait(timeout=10)
            try:
                keys.create_key(s, pid, label="late")
                outcome.append("made")
            except NotFound as e:
                outcome.append((e.status, e.message))
            except Exception as e:
                outcome.append(type(e).__name__)

    threads = [threading.Thread(target=f) for f in (create, remove)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert outcome == [(404, "project not found")]
