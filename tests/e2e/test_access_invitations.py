"""Invitations: link, pending list, 48 h expiry (injected clock), single use, revoke, accept."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
import sqlalchemy as sa

from errortrack import db
from errortrack.errors import Gone
from errortrack.models import Invitation
from errortrack.team import invitations
from tests.access_world import PASSWORD, build_world


@pytest.fixture
def world(state, client):
    return build_world(state, client)


def _invite(world, email="new@example.com", role="member"):
    resp = world.call("admin", "POST", "/api/invitations", {"email": email, "role": role})
    assert resp.status_code == 201, resp.text
    return resp.json


def _accept(world, token, password=PASSWORD):
    return world.client.simulate_post(
        f"/auth/invitations/{token}/accept", json={"password": password}
    )


def test_invitation_holds_token_and_link_and_is_listed_until_accepted(world, state, clock):
    inv = _invite(world, "New.Person@Example.com", "admin")
    assert inv["email"] == "new.person@example.com"
    assert inv["role"] == "admin"
    assert len(inv["token"]) >= 40
    assert inv["link"] == f"{state.settings.public_url}/invite/{inv['token']}"
    assert inv["created_by"] == world.users["admin"]
    assert inv["expires_at"] == (clock.now + dt.timedelta(hours=48)).isoformat()
    pending = world.call("primary", "GET", "/api/invitations").json
    assert [(p["id"], p["link"]) for p in pending] == [(inv["id"], inv["link"])]
    info = world.client.simulate_get(f"/auth/invitations/{inv['token']}")
    assert info.json == {
        "email": "new.person@example.com",
        "role": "admin",
        "expires_at": inv["expires_at"],
    }
    assert _accept(world, inv["token"]).status_code == 201
    assert world.call("primary", "GET", "/api/invitations").json == []


@pytest.mark.parametrize("role", ["admin", "member"])
def test_accepting_creates_the_account_with_the_invited_role_and_logs_in(world, role):
    inv = _invite(world, f"{role}-invitee@example.com", role)
    resp = _accept(world, inv["token"])
    assert resp.status_code == 201, resp.text
    assert resp.json["user"]["email"] == f"{role}-invitee@example.com"
    assert resp.json["user"]["role"] == role
    assert resp.json["user"]["is_primary"] is False
    cookie = resp.cookies["errortrack_session"]
    assert cookie.http_only
    me = world.client.simulate_get("/api/me", cookies={"errortrack_session": cookie.value})
    assert me.status_code == 200
    assert me.json["user"]["role"] == role
    assert me.json["auth"] == "session"
    assert me.json["csrf_token"] == resp.json["csrf_token"]
    # And the password works for a normal login.
    login = world.client.simulate_post(
        "/auth/login", json={"email": f"{role}-invitee@example.com", "password": PASSWORD}
    )
    assert login.status_code == 200


def test_token_is_single_use(world):
    inv = _invite(world)
    assert _accept(world, inv["token"]).status_code == 201
    again = _accept(world, inv["token"], "another password")
    assert again.status_code == 410
    assert again.json["error"]["code"] == "gone"
    assert "already been used" in again.json["error"]["message"]
    assert world.client.simulate_get(f"/auth/invitations/{inv['token']}").status_code == 410


def test_token_expires_after_48_hours(world, clock):
    inv = _invite(world)
    clock.advance(hours=47, minutes=59)
    assert world.client.simulate_get(f"/auth/invitations/{inv['token']}").status_code == 200
    clock.advance(minutes=1)
    resp = _accept(world, inv["token"])
    assert resp.status_code == 410
    assert "expired" in resp.json["error"]["message"]
    assert world.call("admin", "GET", "/api/invitations").json == []
    # Nothing was created.
    assert "new@example.com" not in [
        u["email"] for u in world.call("admin", "GET", "/api/team").json
    ]


def test_revoked_invitation_no_longer_works(world):
    inv = _invite(world)
    assert world.call("primary", "DELETE", f"/api/invitations/{inv['id']}").status_code == 204
    resp = _accept(world, inv["token"])
    assert resp.status_code == 410
    assert "revoked" in resp.json["error"]["message"]
    assert world.call("admin", "GET", "/api/invitations").json == []
    # Revoking twice, or an unknown one.
    assert world.call("primary", "DELETE", f"/api/invitations/{inv['id']}").status_code == 410
    assert world.call("primary", "DELETE", "/api/invitations/999999").status_code == 404


def test_unknown_token_is_404(world):
    assert _accept(world, "no-such-token").status_code == 404
    assert world.client.simulate_get("/auth/invitations/no-such-token").status_code == 404


def test_short_password_is_400_and_keeps_the_invitation(world):
    inv = _invite(world)
    resp = _accept(world, inv["token"], "short")
    assert resp.status_code == 400
    assert resp.json["error"]["field"] == "password"
    assert _accept(world, inv["token"]).status_code == 201


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"email": "not-an-email", "role": "member"}, "email"),
        ({"email": "a@example.com", "role": "owner"}, "role"),
        ({"role": "member"}, "email"),
        ({"email": "a@example.com"}, "role"),
        ({"email": ["a@example.com"], "role": "member"}, "email"),
    ],
)
def test_invalid_invitation_is_400_with_field(world, body, field):
    resp = world.call("admin", "POST", "/api/invitations", body)
    assert resp.status_code == 400, resp.text
    assert resp.json["error"]["field"] == field
    assert world.call("admin", "GET", "/api/invitations").json == []


def test_inviting_an_existing_user_or_a_pending_email_is_409(world):
    resp = world.call(
        "admin", "POST", "/api/invitations", {"email": "Viewer@example.com", "role": "member"}
    )
    assert resp.status_code == 409
    assert resp.json["error"]["field"] == "email"
    _invite(world, "twice@example.com")
    assert (
        world.call(
            "admin", "POST", "/api/invitations", {"email": "twice@example.com", "role": "member"}
        ).status_code
        == 409
    )


def test_a_revoked_or_expired_email_can_be_invited_again(world, clock):
    first = _invite(world, "again@example.com")
    world.call("admin", "DELETE", f"/api/invitations/{first['id']}")
    second = _invite(world, "again@example.com")
    clock.advance(hours=49)
    third = _invite(world, "again@example.com")
    assert len({first["token"], second["token"], third["token"]}) == 3
    assert _accept(world, second["token"]).status_code == 410
    assert _accept(world, third["token"]).status_code == 201


def test_two_simultaneous_accepts_of_one_token_create_one_account(world, state):
    import threading

    from errortrack import db
    from errortrack.errors import Gone
    from errortrack.team.invitations import accept_invitation, find_usable

    inv = _invite(world, "race@example.com")
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def accept():
        try:
            with db.unit_of_work(state.sessions) as s:
                find_usable(s, inv["token"], now=state.clock())  # both see it usable
                barrier.wait(timeout=10)
                accept_invitation(s, token=inv["token"], password=PASSWORD, now=state.clock())
            outcomes.append("accepted")
        except Gone:
            outcomes.append("gone")

    threads = [threading.Thread(target=accept) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(outcomes) == ["accepted", "gone"]
    emails = [u["email"] for u in world.call("admin", "GET", "/api/team").json]
    assert emails.count("race@example.com") == 1


def _race(state, fns):
    """Run each fn(session) in its own transaction at the same moment; their outcomes."""
    import threading

    from errortrack import db
    from errortrack.errors import ErrortrackError
    from errortrack.team.invitations import list_pending

    barrier = threading.Barrier(len(fns))
    outcomes: list[int | str] = []

    def run(fn):
        try:
            with db.unit_of_work(state.sessions) as s:
                list_pending(s, now=state.clock())  # both read first, as a request would
                barrier.wait(timeout=10)
                fn(s)
            outcomes.append("ok")
        except ErrortrackError as e:
            outcomes.append(e.status)
        except Exception as e:  # the 500 a request would get
            outcomes.append(type(e).__name__)

    threads = [threading.Thread(target=run, args=(fn,)) for fn in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return sorted(outcomes, key=str)


def test_two_simultaneous_invitations_of_one_email_create_one(world, state):
    from errortrack.team.invitations import create_invitation

    for i in range(5):
        email = f"dup{i}@example.com"

        def create(s, email=email):
            create_invitation(s, email=email, role="member", created_by=None, now=state.clock())

        assert _race(state, [create, create]) == [409, "ok"]
    pending = world.call("primary", "GET", "/api/invitations").json
    assert sorted(p["email"] for p in pending) == [f"dup{i}@example.com" for i in range(5)]


def test_accepting_two_invitations_of_one_email_at_once_is_one_account_and_a_409(world, state):
    import datetime as dt
    import secrets

    from errortrack.team.invitations import accept_invitation

    # Two pending invitations for one email, as creation could leave them before it was
    # serialised.
    now = state.clock()
    tokens = [secrets.token_urlsafe(32) for _ in range(2)]
    with state.sessions.begin() as s:
        for token in tokens:
            s.add(
                Invitation(
                    email="twin@example.com",
                    role="member",
                    token=token,
                    created_at=now,
                    expires_at=now + dt.timedelta(hours=48),
                )
            )

    def accept(token):
        return lambda s: accept_invitation(s, token=token, password=PASSWORD, now=now)

    assert _race(state, [accept(t) for t in tokens]) == [409, "ok"]
    emails = [u["email"] for u in world.call("admin", "GET", "/api/team").json]
    assert emails.count("twin@example.com") == 1


def test_an_email_is_one_address_however_its_accents_are_encoded(world):
    # "é" as one code point (NFC) or as "e" plus a combining accent (NFD) made two
    # accounts, and a login typed the other way failed.
    decomposed, composed = "jose\u0301@example.com", "jos\u00e9@example.com"
    inv = _invite(world, decomposed)
    assert inv["email"] == composed
    assert _accept(world, inv["token"]).status_code == 201
    again = world.call("admin", "POST", "/api/invitations", {"email": composed, "role": "member"})
    assert again.status_code == 409 and again.json["error"]["field"] == "email"
    for typed in (composed, decomposed):
        login = world.client.simulate_post(
            "/auth/login", json={"email": typed, "password": PASSWORD}
        )
        assert login.status_code == 200, typed


def test_an_admin_who_loses_the_role_leaves_no_usable_link_behind(world):
    # A global admin reads every pending invitation's link (GET /api/invitations), its
    # own and other admins'. Demoted, it must not keep a way back in: each link it could
    # read, accepted with a password it chooses, would make an account with that role.
    own = _invite(world, "alt@example.com", "admin")
    other = world.call(
        "primary", "POST", "/api/invitations", {"email": "newhire@example.com", "role": "member"}
    ).json
    demoted = world.call(
        "primary", "PATCH", f"/api/team/{world.users['admin']}", {"role": "member"}
    )
    assert demoted.status_code == 200 and demoted.json["role"] == "member"
    for inv in (own, other):
        gone = _accept(world, inv["token"], password="attacker chosen password")
        assert gone.status_code == 410, gone.text
        assert gone.json["error"]["message"] == "this invitation has been revoked"
    assert world.call("primary", "GET", "/api/invitations").json == []
    # Made after the demotion, by an admin: the demoted user never saw it, so it stands.
    later = world.call(
        "primary", "POST", "/api/invitations", {"email": "newhire@example.com", "role": "member"}
    )
    assert later.status_code == 201, later.text
    assert _accept(world, later.json["token"]).status_code == 201


def test_a_removed_admin_leaves_no_usable_link_behind(world):
    own = _invite(world, "alt2@example.com", "admin")
    assert world.call("primary", "DELETE", f"/api/team/{world.users['admin']}").status_code == 204
    gone = _accept(world, own["token"], password="attacker chosen password")
    assert gone.status_code == 410, gone.text


def test_a_member_changing_role_or_leaving_revokes_no_invitation(world):
    # Members never see links: their promotion or removal leaves pending links alone.
    inv = _invite(world, "stays@example.com", "member")
    promoted = world.call(
        "primary", "PATCH", f"/api/team/{world.users['viewer']}", {"role": "admin"}
    )
    assert promoted.status_code == 200
    assert (
        world.call("primary", "DELETE", f"/api/team/{world.users['outsider']}").status_code == 204
    )
    assert [p["id"] for p in world.call("primary", "GET", "/api/invitations").json] == [inv["id"]]


def test_a_revoke_during_an_accept_waits_for_it_and_is_410(world, monkeypatch):
    """The accept holds the invitation's lock while it hashes the password. A revoke
    that read the row meanwhile answered 204 "revoked" over the account being made, and
    the row ended both accepted and revoked (security review, thirty-second session)."""
    inv = _invite(world, "late@example.com", "admin")
    revoked: list = []

    def revoke() -> None:
        # The API's own service in this thread: the test client's loop runs the accept.
        try:
            with db.unit_of_work(world.factory) as session:
                invitations.revoke_invitation(
                    session, invitation_id=inv["id"], now=world.state.clock()
                )
            revoked.append(204)
        except Gone:
            revoked.append(410)

    real = invitations.hash_password

    def while_hashing(password: str) -> str:
        other = threading.Thread(target=revoke)
        other.start()
        other.join(0.5)  # the revoke reads the row and waits for the accept's lock
        return real(password)

    monkeypatch.setattr(invitations, "hash_password", while_hashing)
    accepted = _accept(world, inv["token"])
    deadline = time.monotonic() + 30
    while not revoked and time.monotonic() < deadline:
        time.sleep(0.05)
    assert accepted.status_code == 201, accepted.text
    assert revoked == [410]
    team = {u["email"]: u["role"] for u in world.call("primary", "GET", "/api/team").json}
    assert team["late@example.com"] == "admin"
    with world.state.engine.connect() as conn:
        row = conn.execute(
            sa.select(Invitation.accepted_at, Invitation.revoked_at).where(
                Invitation.id == inv["id"]
            )
        ).one()
    assert row.accepted_at is not None and row.revoked_at is None


@pytest.mark.parametrize("action", ["revoke", "accept"])
def test_a_demotion_during_a_revoke_or_accept_waits_for_it(world, state, action):
    """The invitation was locked by a no-op UPDATE; on PostgreSQL its second write then
    checked the created_by foreign key again (a share lock on the creator's row), while
    a demotion held every admin's row and waited for that invitation to revoke it: a
    deadlock, one of the two a 503 (diff review, thirty-second session). Each now waits
    for the other."""
    from errortrack.auth.permissions import Principal
    from errortrack.models import User
    from errortrack.team.roster import change_role

    with db.unit_of_work(state.sessions) as s:
        s.get(User, world.users["outsider"]).role = "admin"
        made = invitations.create_invitation(
            s,
            email="waiting@example.com",
            role="member",
            created_by=world.users["admin"],
            now=state.clock(),
        )
        invitation_id, token = made.id, made.token
    locked = threading.Event()
    outcomes: dict[str, str] = {}

    def hold() -> None:
        try:
            with db.unit_of_work(state.sessions) as s:

                def after(_conn, _cursor, statement, *_args) -> None:
                    if "invitations" in statement and not locked.is_set():
                        locked.set()
                        time.sleep(1.0)  # the demotion reaches its wait meanwhile

                sa.event.listen(s.connection(), "after_cursor_execute", after)
                if action == "revoke":
                    invitations.revoke_invitation(s, invitation_id=invitation_id, now=state.clock())
                else:
                    invitations.accept_invitation(
                        s, token=token, password=PASSWORD, now=state.clock()
                    )
            outcomes[action] = "ok"
        except Exception as exc:
            outcomes[action] = type(exc).__name__

    def demote() -> None:
        assert locked.wait(timeout=10)
        time.sleep(0.2)
        primary = Principal(user_id=world.users["primary"], role="admin", is_primary=True)
        try:
            with db.unit_of_work(state.sessions) as s:
                change_role(
                    s, primary, user_id=world.users["outsider"], role="member", now=state.clock()
                )
            outcomes["demote"] = "ok"
        except Exception as exc:
            outcomes["demote"] = type(exc).__name__

    threads = [threading.Thread(target=hold), threading.Thread(target=demote)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert outcomes == {action: "ok", "demote": "ok"}
