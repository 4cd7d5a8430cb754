"""Team rules: each conflict is a 409, role changes, and removal revoking access at once."""

from __future__ import annotations

import pytest

from errortrack import db
from errortrack.auth.sessions import start_session
from tests.access_world import build_world


@pytest.fixture
def world(state, client):
    return build_world(state, client)


def _conflict(resp, words):
    assert resp.status_code == 409, resp.text
    assert resp.json["error"]["code"] == "conflict"
    assert words in resp.json["error"]["message"]


def test_team_lists_users_with_roles_and_primary_flag(world):
    resp = world.call("admin", "GET", "/api/team")
    assert resp.status_code == 200
    by_email = {u["email"]: u for u in resp.json}
    assert by_email["primary@example.com"]["is_primary"] is True
    assert by_email["primary@example.com"]["role"] == "admin"
    assert by_email["viewer@example.com"] == {
        "id": world.users["viewer"],
        "email": "viewer@example.com",
        "role": "member",
        "is_primary": False,
        "created_at": by_email["viewer@example.com"]["created_at"],
    }
    assert "password_hash" not in by_email["viewer@example.com"]


def test_admin_cannot_remove_themself(world):
    _conflict(world.call("admin", "DELETE", f"/api/team/{world.users['admin']}"), "yourself")


def test_primary_user_cannot_be_removed(world):
    _conflict(world.call("admin", "DELETE", f"/api/team/{world.users['primary']}"), "primary")


def test_primary_user_cannot_be_demoted(world):
    resp = world.call("admin", "PATCH", f"/api/team/{world.users['primary']}", {"role": "member"})
    _conflict(resp, "primary")


def test_last_remaining_admin_cannot_be_demoted_or_removed(world, state):
    """Only reachable without a primary user (e.g. an instance set up by other means), so
    the rule is exercised with the primary flag cleared."""
    from errortrack.models import User

    with db.unit_of_work(state.sessions) as s:
        s.get(User, world.users["primary"]).is_primary = False
        s.get(User, world.users["primary"]).role = "member"
    # "admin" is now the only admin. Demoting themself would leave no admin.
    resp = world.call("admin", "PATCH", f"/api/team/{world.users['admin']}", {"role": "member"})
    _conflict(resp, "last remaining admin")
    from errortrack.auth.permissions import Principal
    from errortrack.errors import Conflict
    from errortrack.team.roster import remove_user

    # Removing the last admin (by anyone else) is refused by the service too.
    with state.sessions() as s, pytest.raises(Conflict, match="last remaining admin"):
        remove_user(
            s,
            Principal(user_id=world.users["primary"], role="admin"),
            user_id=world.users["admin"],
            now=state.clock(),
        )


def test_admin_changes_global_roles_both_ways(world):
    target = world.users["viewer"]
    resp = world.call("admin", "PATCH", f"/api/team/{target}", {"role": "admin"})
    assert resp.status_code == 200
    assert resp.json["role"] == "admin"
    # Now a global admin: sees the team.
    assert world.call("viewer", "GET", "/api/team").status_code == 200
    resp = world.call("primary", "PATCH", f"/api/team/{target}", {"role": "member"})
    assert resp.json["role"] == "member"
    assert world.call("viewer", "GET", "/api/team").status_code == 403


def test_an_admin_may_demote_another_admin_and_themself(world):
    assert (
        world.call(
            "primary", "PATCH", f"/api/team/{world.users['admin']}", {"role": "member"}
        ).status_code
        == 200
    )
    world.call("primary", "PATCH", f"/api/team/{world.users['admin']}", {"role": "admin"})
    assert (
        world.call(
            "admin", "PATCH", f"/api/team/{world.users['admin']}", {"role": "member"}
        ).status_code
        == 200
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"role": "owner"}, "role"),
        ({}, "role"),
        ({"role": "admin", "x": 1}, "x"),
        ({"role": 3}, "role"),
    ],
)
def test_invalid_role_change_is_400_with_field(world, body, field):
    resp = world.call("admin", "PATCH", f"/api/team/{world.users['viewer']}", body)
    assert resp.status_code == 400, resp.text
    assert resp.json["error"]["field"] == field


def test_unknown_user_is_404(world):
    assert world.call("admin", "PATCH", "/api/team/999999", {"role": "admin"}).status_code == 404
    assert world.call("admin", "DELETE", "/api/team/999999").status_code == 404


def test_removing_a_user_revokes_their_sessions_and_tokens_at_once(world, state):
    victim = world.users["editor"]
    with db.unit_of_work(state.sessions) as s:
        cookie = start_session(s, user_id=victim, now=state.clock()).secret
    second_token = world.add_token(victim)
    assert world.call("editor", "GET", "/api/me").status_code == 200
    assert (
        world.client.simulate_get("/api/me", cookies={"errortrack_session": cookie}).status_code
        == 200
    )

    assert world.call("admin", "DELETE", f"/api/team/{victim}").status_code == 204

    assert world.call("editor", "GET", "/api/me").status_code == 401
    resp = world.client.simulate_get("/api/me", headers={"Authorization": f"Bearer {second_token}"})
    assert resp.status_code == 401
    assert (
        world.client.simulate_get("/api/me", cookies={"errortrack_session": cookie}).status_code
        == 401
    )
    members = world.call("admin", "GET", f"/api/projects/{world.project_id}/members").json
    assert victim not in [m["user_id"] for m in members]
    team = world.call("admin", "GET", "/api/team").json
    assert victim not in [u["id"] for u in team]


def test_refused_removal_changes_nothing(world):
    world.call("admin", "DELETE", f"/api/team/{world.users['primary']}")
    assert world.call("primary", "GET", "/api/me").status_code == 200


def test_removing_an_admin_keeps_the_invitations_they_sent_revoked(world, state):
    # Their rows stay (created_by NULL: the user is gone); as every pending link they
    # could read, they are revoked (test_access_invitations.py).
    from errortrack.models import Invitation

    sent = world.call(
        "admin", "POST", "/api/invitations", {"email": "kept@example.com", "role": "member"}
    ).json
    assert world.call("primary", "DELETE", f"/api/team/{world.users['admin']}").status_code == 204
    assert world.call("primary", "GET", "/api/invitations").json == []
    with state.sessions() as s:
        row = s.get(Invitation, sent["id"])
        assert (row.created_by, row.revoked_at) == (None, state.clock())
