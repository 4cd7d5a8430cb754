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
    from errortrack.errors import Forbidden
    from errortrack.team.roster import remove_user

    # Removing the last admin by anyone else: nobody else is an admin, and the service
    # checks its caller's role again (a principal read before the demotion says admin).
    with state.sessions() as s, pytest.raises(Forbidden, match="role changed"):
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


def _at_once(*actions):
    """Run the actions in threads, each in its own unit of work that reads first, as a
    request does, and meets the others before it writes; their outcomes, sorted."""
    import threading

    from errortrack.errors import ErrortrackError

    barrier = threading.Barrier(len(actions))
    outcomes: list[str] = []

    def run(action):
        try:
            action(barrier)
            outcomes.append("done")
        except ErrortrackError as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=run, args=(a,)) for a in actions]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return sorted(outcomes)


def test_two_admins_demoting_each_other_at_once_leave_one_admin(world, state):
    """The caller's role was read unlocked when the request was authenticated: both
    demotions passed (20 of 20 rounds on SQLite, 17 of 20 on PostgreSQL; security
    review, thirty-second session). The second is now refused under the lock."""
    from errortrack.auth.permissions import Principal
    from errortrack.models import User
    from errortrack.team.roster import change_role, list_users

    def demote(me: str, other: str):
        def action(barrier):
            actor = Principal(user_id=world.users[me], role="admin")
            with db.unit_of_work(state.sessions) as s:
                list_users(s)
                barrier.wait(timeout=10)
                change_role(s, actor, user_id=world.users[other], role="member", now=state.clock())

        return action

    with db.unit_of_work(state.sessions) as s:
        s.get(User, world.users["outsider"]).role = "admin"
    assert _at_once(demote("admin", "outsider"), demote("outsider", "admin")) == [
        "done",
        "forbidden",
    ]
    roles = {u["id"]: u["role"] for u in world.call("primary", "GET", "/api/team").json}
    assert sorted(roles[world.users[n]] for n in ("admin", "outsider")) == ["admin", "member"]


def test_an_invitation_made_while_its_maker_is_demoted_is_refused(world, state):
    """Demoting an admin revokes every pending invitation (it could read their links).
    An invitation it made while its demotion committed was left pending, and accepting
    it brought the former admin back as an admin (security review, thirty-second
    session). Now it waits for the demotion and is a 403."""
    import threading
    import time

    from errortrack.auth.permissions import Principal
    from errortrack.errors import Forbidden
    from errortrack.team.invitations import create_invitation, list_pending
    from errortrack.team.roster import change_role

    demoting = threading.Event()

    def demote():
        primary = Principal(user_id=world.users["primary"], role="admin", is_primary=True)
        with db.unit_of_work(state.sessions) as s:
            change_role(s, primary, user_id=world.users["admin"], role="member", now=state.clock())
            demoting.set()
            time.sleep(0.5)  # its request commits a moment later

    other = threading.Thread(target=demote)
    other.start()
    assert demoting.wait(timeout=10)
    try:
        with db.unit_of_work(state.sessions) as s, pytest.raises(Forbidden):
            create_invitation(
                s,
                email="comeback@example.com",
                role="admin",
                created_by=world.users["admin"],
                now=state.clock(),
            )
    finally:
        other.join(timeout=60)
    with state.sessions() as s:
        assert list_pending(s, now=state.clock()) == []
