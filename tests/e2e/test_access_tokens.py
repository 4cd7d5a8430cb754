"""API tokens: shown once, hashed at rest, own tokens only, gone with their user."""

from __future__ import annotations

import hashlib

import pytest
import sqlalchemy as sa

from errortrack.models import ApiToken
from tests.access_world import build_world


@pytest.fixture
def world(state, client):
    return build_world(state, client)


def _create(world, caller="viewer", description="deploy bot"):
    resp = world.call(caller, "POST", "/api/tokens", {"description": description})
    assert resp.status_code == 201, resp.text
    return resp.json


def test_secret_is_shown_once_and_stored_only_as_sha256(world, engine):
    new = _create(world)
    secret = new["token"]
    assert secret.startswith("et_") and len(secret) >= 40
    assert new["prefix"] == secret[:10]
    assert new["description"] == "deploy bot"
    assert new["last_used_at"] is None
    listed = world.call("viewer", "GET", "/api/tokens").json
    mine = [t for t in listed if t["id"] == new["id"]]
    assert mine == [{k: v for k, v in new.items() if k != "token"}]
    assert all("token" not in t and "token_hash" not in t for t in listed)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(ApiToken.__table__)).mappings().all()
    stored = next(r for r in rows if r["id"] == new["id"])
    assert stored["token_hash"] == hashlib.sha256(secret.encode()).hexdigest()
    assert all(secret not in str(value) for row in rows for value in row.values())


def test_a_token_created_with_a_token_works_and_acts_as_the_same_user(world):
    new = _create(world, "editor")
    resp = world.client.simulate_get("/api/me", headers={"Authorization": f"Bearer {new['token']}"})
    assert resp.status_code == 200
    assert resp.json["user"]["id"] == world.users["editor"]
    assert resp.json == {**resp.json, "auth": "token", "csrf_token": None}
    # Same projects and permissions as its user.
    headers = {"Authorization": f"Bearer {new['token']}"}
    projects = world.client.simulate_get("/api/projects", headers=headers).json
    assert [(p["id"], p["role"]) for p in projects] == [(world.project_id, "editor")]


def test_users_see_and_revoke_only_their_own_tokens(world):
    mine = _create(world, "viewer")
    theirs = _create(world, "editor")
    listed = {t["id"] for t in world.call("viewer", "GET", "/api/tokens").json}
    assert mine["id"] in listed and theirs["id"] not in listed
    # Even a global admin cannot revoke someone else's token: 404, and it keeps working.
    assert world.call("primary", "DELETE", f"/api/tokens/{theirs['id']}").status_code == 404
    headers = {"Authorization": f"Bearer {theirs['token']}"}
    assert world.client.simulate_get("/api/me", headers=headers).status_code == 200
    assert world.call("editor", "DELETE", f"/api/tokens/{theirs['id']}").status_code == 204
    assert world.client.simulate_get("/api/me", headers=headers).status_code == 401


def test_last_used_at_is_recorded_at_most_once_a_minute(world, clock):
    new = _create(world)
    headers = {"Authorization": f"Bearer {new['token']}"}
    first_use = clock.now
    world.client.simulate_get("/api/me", headers=headers)
    clock.advance(seconds=30)
    world.client.simulate_get("/api/me", headers=headers)

    def last_used():
        tokens = world.call("viewer", "GET", "/api/tokens").json
        return next(t["last_used_at"] for t in tokens if t["id"] == new["id"])

    assert last_used() == first_use.isoformat()
    clock.advance(seconds=31)
    world.client.simulate_get("/api/me", headers=headers)
    assert last_used() == clock.now.isoformat()


@pytest.mark.parametrize(
    "header",
    ["Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "Token abc", "Bearer et_nope", "Bearer x" * 3],
)
def test_malformed_or_unknown_authorization_is_401(world, header):
    resp = world.client.simulate_get("/api/me", headers={"Authorization": header})
    assert resp.status_code == 401
    assert resp.json["error"]["code"] == "unauthorized"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "description"),
        ({"description": ""}, "description"),
        ({"description": "x" * 201}, "description"),
        ({"description": 5}, "description"),
    ],
)
def test_invalid_description_is_400(world, body, field):
    resp = world.call("viewer", "POST", "/api/tokens", body)
    assert resp.status_code == 400
    assert resp.json["error"]["field"] == field
