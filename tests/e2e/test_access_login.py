"""Login sessions: cookie flags, CSRF on cookie writes, logout, expiry, no email oracle,
throttling of repeated failures, and registration being refused."""

from __future__ import annotations

import time

import falcon.testing
import pytest
import sqlalchemy as sa

from errortrack.app import create_app
from errortrack.auth import login as login_module
from errortrack.auth.passwords import hash_password
from errortrack.auth.sessions import LIFETIME
from errortrack.models import LoginSession, User
from errortrack.state import AppState
from tests.access_world import PASSWORD, build_world

COOKIE = "errortrack_session"


@pytest.fixture
def world(state, client):
    return build_world(state, client)


def _login(client, email="viewer@example.com", password=PASSWORD, **kwargs):
    return client.simulate_post(
        "/auth/login", json={"email": email, "password": password}, **kwargs
    )


def _session(world, email="viewer@example.com"):
    resp = _login(world.client, email)
    assert resp.status_code == 200, resp.text
    return resp.cookies[COOKIE].value, resp.json["csrf_token"]


@pytest.mark.parametrize(
    "body",
    [None, {}, {"email": "x@example.com", "password": "long enough password"}, {"invite": "x"}],
)
def test_register_is_always_403(world, body):
    resp = world.client.simulate_post("/auth/register", json=body)
    assert resp.status_code == 403
    assert resp.json["error"]["code"] == "forbidden"
    assert "invite" in resp.json["error"]["message"]
    resp = world.call("primary", "POST", "/auth/register", body)
    assert resp.status_code == 403


def test_login_sets_an_httponly_samesite_cookie_and_returns_the_csrf_token(world):
    resp = _login(world.client, "  Viewer@Example.com ")
    assert resp.status_code == 200
    assert resp.json["user"]["email"] == "viewer@example.com"
    cookie = resp.cookies[COOKIE]
    assert cookie.http_only
    assert cookie.same_site.lower() == "lax"
    assert not cookie.secure  # public_url is http:// in tests
    assert cookie.path == "/"
    assert cookie.max_age == int(LIFETIME.total_seconds())
    me = world.client.simulate_get("/api/me", cookies={COOKIE: cookie.value})
    assert me.json["csrf_token"] == resp.json["csrf_token"]


@pytest.mark.parametrize(
    ("public_url", "secure"),
    [
        ("https://errors.example.com", True),
        # The scheme is case-insensitive; a prefix test on "https:" missed this one.
        ("HTTPS://errors.example.com", True),
        ("http://errors.example.com", False),
    ],
)
def test_cookie_is_secure_when_the_public_url_is_https(state, world, public_url, secure):
    import dataclasses

    https = dataclasses.replace(state.settings, public_url=public_url)
    other = AppState.build(
        https, engine=state.engine, clickhouse=state.clickhouse, clock=state.clock
    )
    client = falcon.testing.TestClient(create_app(state=other))
    assert _login(client).cookies[COOKIE].secure is secure


def test_cookie_write_needs_the_csrf_header(world):
    cookie, csrf = _session(world, "padmin@example.com")
    path = f"/api/projects/{world.project_id}"
    jar = {COOKIE: cookie}
    # Reads need no header.
    assert world.client.simulate_get(path, cookies=jar).status_code == 200
    # Writes without it, or with a wrong one, are refused and change nothing.
    resp = world.client.simulate_patch(path, cookies=jar, json={"name": "csrf attack"})
    assert resp.status_code == 403
    assert "X-CSRF-Token" in resp.json["error"]["message"]
    bad = {"X-CSRF-Token": "not-the-token"}
    assert (
        world.client.simulate_patch(path, cookies=jar, json={"name": "x"}, headers=bad).status_code
        == 403
    )
    assert world.client.simulate_get(path, cookies=jar).json["name"] != "csrf attack"
    # With it the write goes through.
    ok = world.client.simulate_patch(
        path, cookies=jar, json={"name": "renamed"}, headers={"X-CSRF-Token": csrf}
    )
    assert ok.status_code == 200
    assert ok.json["name"] == "renamed"


def test_bearer_writes_need_no_csrf_header(world):
    resp = world.call("padmin", "PATCH", f"/api/projects/{world.project_id}", {"name": "by token"})
    assert resp.status_code == 200


def test_a_bearer_header_wins_over_a_cookie(world):
    cookie, _ = _session(world, "padmin@example.com")
    resp = world.client.simulate_get(
        "/api/me", cookies={COOKIE: cookie}, headers={"Authorization": "Bearer et_bogus"}
    )
    assert resp.status_code == 401


def test_logout_ends_the_session(world):
    cookie, csrf = _session(world)
    jar = {COOKIE: cookie}
    assert world.client.simulate_post("/auth/logout", cookies=jar).status_code == 403  # CSRF
    resp = world.client.simulate_post("/auth/logout", cookies=jar, headers={"X-CSRF-Token": csrf})
    assert resp.status_code == 204
    assert resp.cookies[COOKIE].value == ""  # cleared in the browser
    assert world.client.simulate_get("/api/me", cookies=jar).status_code == 401


def test_logout_with_a_token_beside_the_cookie_ends_the_cookie_s_session(world):
    """The token authenticates the logout (a bearer header wins over a cookie): the
    cookie was cleared, and the session it named stayed valid for its 14 days."""
    cookie, _ = _session(world)
    jar = {COOKIE: cookie}
    resp = world.client.simulate_post("/auth/logout", cookies=jar, headers=world.headers("viewer"))
    assert resp.status_code == 204
    assert resp.cookies[COOKIE].value == ""
    assert world.client.simulate_get("/api/me", cookies=jar).status_code == 401
    # The token itself is not logged out.
    assert world.call("viewer", "GET", "/api/me").json["auth"] == "token"


def test_sessions_expire(world, clock):
    cookie, _ = _session(world)
    clock.advance(days=13, hours=23)
    assert world.client.simulate_get("/api/me", cookies={COOKIE: cookie}).status_code == 200
    clock.advance(hours=1)
    resp = world.client.simulate_get("/api/me", cookies={COOKIE: cookie})
    assert resp.status_code == 401
    assert world.client.simulate_get("/api/me", cookies={COOKIE: "forged"}).status_code == 401


def test_login_does_not_reveal_whether_an_email_exists(world):
    unknown = _login(world.client, "nobody@example.com", "wrong password")
    wrong = _login(world.client, "viewer@example.com", "wrong password")
    assert unknown.status_code == wrong.status_code == 401
    assert unknown.json == wrong.json
    assert COOKIE not in unknown.cookies and COOKIE not in wrong.cookies


def test_unknown_emails_cost_a_password_check_too(world):
    """An unknown email is checked against a dummy argon2 hash: no fast path to time."""

    addresses = iter(range(1, 100))

    def fastest(email):
        times = []
        for _ in range(3):
            # A fresh client address per try keeps the throttle out of the measurement.
            ip = f"10.1.0.{next(addresses)}"
            start = time.perf_counter()
            assert _login(world.client, email, "wrong password", remote_addr=ip).status_code == 401
            times.append(time.perf_counter() - start)
        return min(times)

    # A user whose hash has the production parameters (the shared test hash is cheap).
    from errortrack import db
    from errortrack.auth.passwords import hash_password
    from errortrack.models import User

    with db.unit_of_work(world.factory) as s:
        s.add(User(email="real@example.com", password_hash=hash_password(PASSWORD), role="member"))
    from errortrack.auth import login as login_module

    fastest("nobody@example.com")  # warm the dummy hash
    hits = login_module._dummy_hash.cache_info().hits
    assert (
        _login(world.client, "nobody2@example.com", "x", remote_addr="10.2.0.1").status_code == 401
    )
    assert login_module._dummy_hash.cache_info().hits == hits + 1  # it was verified against
    # Argon2id takes tens of milliseconds; a lookup-only path would be ~100x faster.
    # Same parameters, so about the same time; the margin absorbs a busy CI machine.
    assert fastest("nobody@example.com") > 0.25 * fastest("real@example.com")


def test_repeated_failures_are_throttled_per_email_and_ip(world, clock):
    for _ in range(5):
        assert _login(world.client, password="wrong password").status_code == 401
    # Locked out: even the right password is refused, with Retry-After.
    resp = _login(world.client)
    assert resp.status_code == 429
    assert resp.headers["Retry-After"] == "60"
    # Other emails, and the same email from another address, are not affected.
    assert _login(world.client, "editor@example.com").status_code == 200
    assert _login(world.client, remote_addr="10.0.0.9").status_code == 200
    # The lockout passes; the next failure doubles it.
    clock.advance(seconds=61)
    assert _login(world.client, password="wrong password").status_code == 401
    assert _login(world.client).headers["Retry-After"] == "120"
    clock.advance(seconds=121)
    assert _login(world.client).status_code == 200
    # A success clears the count.
    assert _login(world.client, password="wrong password").status_code == 401
    assert _login(world.client).status_code == 200


def test_unknown_emails_are_throttled_the_same_way(world):
    for _ in range(5):
        assert _login(world.client, "nobody@example.com", "x").status_code == 401
    assert _login(world.client, "nobody@example.com", "x").status_code == 429


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"password": "x"}, "email"),
        ({"email": "a@example.com"}, "password"),
        ({"email": 1, "password": "x"}, "email"),
    ],
)
def test_login_input_errors_are_400(world, body, field):
    resp = world.client.simulate_post("/auth/login", json=body)
    assert resp.status_code == 400
    assert resp.json["error"]["field"] == field


def test_non_json_body_is_400(world):
    resp = world.client.simulate_post(
        "/auth/login", body=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert resp.status_code == 400
    assert resp.json["error"]["code"] == "bad_request"


@pytest.mark.parametrize("header", ["café", "\xff\xfe", "ünïcödé-token"])
def test_a_non_ascii_csrf_header_is_403_not_500(world, header):
    # compare_digest refused the str (a TypeError): any cookie holder could make a 500.
    cookie, _ = _session(world, "padmin@example.com")
    path = f"/api/projects/{world.project_id}"
    resp = world.client.simulate_patch(
        path,
        cookies={COOKIE: cookie},
        json={"name": "x"},
        headers={"X-CSRF-Token": header.encode("utf-8").decode("latin-1")},
    )
    assert resp.status_code == 403 and resp.json["error"]["code"] == "forbidden"


@pytest.mark.parametrize(
    "content_type",
    [
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "text/plain",
        "text/plain; charset=utf-8",
    ],
)
def test_login_from_a_form_or_text_is_415_and_sets_no_cookie(world, content_type):
    # What another site's page can send without a CORS preflight: a form that signed
    # the visitor's browser into the sender's account (login CSRF).
    for body in (
        b"email=viewer%40example.com&password=" + PASSWORD.encode(),
        b'{"email": "viewer@example.com", "password": "' + PASSWORD.encode() + b'"}',
    ):
        resp = world.client.simulate_post(
            "/auth/login", body=body, headers={"Content-Type": content_type}
        )
        assert resp.status_code == 415, resp.text
        assert resp.json["error"]["code"] == "unsupported_media_type"
        assert COOKIE not in resp.cookies


def test_login_and_accept_without_a_content_type_are_415(world):
    # A page's fetch(..., {mode: "no-cors", body: new Blob([json])}) sends no
    # Content-Type and needs no preflight: read as JSON, six such logins from another
    # site locked the user out from their own browser (security review, thirtieth
    # session). Elsewhere (a write carrying its credential) such a body is still JSON.
    body = b'{"email": "viewer@example.com", "password": "' + PASSWORD.encode() + b'"}'
    for _ in range(6):
        resp = world.client.simulate_post("/auth/login", body=body, headers={"Content-Type": ""})
        assert resp.status_code == 415, resp.text
        assert resp.json["error"]["message"] == (
            "request body must be sent as application/json, not nothing"
        )
        assert COOKIE not in resp.cookies
    # Refused before any password was checked: nothing counted towards a lockout.
    assert (
        world.client.simulate_post(
            "/auth/login", body=body, headers={"Content-Type": "application/json"}
        ).status_code
        == 200
    )
    accept = world.client.simulate_post(
        "/auth/invitations/x/accept",
        body=b'{"password": "long enough"}',
        headers={"Content-Type": ""},
    )
    assert accept.status_code == 415, accept.text
    token = world.call("primary", "POST", "/api/tokens", {"description": "t"}).json["token"]
    patched = world.client.simulate_post(
        "/api/projects",
        body=b'{"name": "typeless"}',
        headers={"Content-Type": "", "Authorization": f"Bearer {token}"},
    )
    assert patched.status_code == 201, patched.text


@pytest.mark.parametrize("depth", [400, 1000])
def test_deeply_nested_json_is_400_not_500(world, depth):
    # The NUL check recursed and ran out of stack at ~330 levels, before orjson's 1024.
    nested = "[" * depth + "]" * depth
    body = ('{"email": ' + nested + ', "password": "x"}').encode()
    resp = world.client.simulate_post(
        "/auth/login", body=body, headers={"Content-Type": "application/json"}
    )
    assert resp.status_code == 400, resp.text
    assert resp.json["error"]["field"] == "email"


@pytest.mark.parametrize(
    ("body", "key"),
    [
        (b'{"email": "new@example.com", "role": "member", "role": "admin"}', "role"),
        # One key however it is spelled.
        (b'{"email": "new@example.com", "role": "member", "r\\u006fle": "admin"}', "role"),
        # At any depth, also past what Python's own parser nests (orjson reads 1024).
        (b'{"email": "new@example.com", "x": {"a": 1, "a": 2}}', "a"),
        (
            b'{"role": "admin", "x": '
            + b'[{"y": ' * 500
            + b'{"a": 1, "a": 2}'
            + b"}]" * 500
            + b"}",
            "a",
        ),
        (
            b'{"role": "admin", "x": '
            + b'[{"y": ' * 500
            + b'{"r\\u006fle": 1, "role": 2}'
            + b"}]" * 500
            + b"}",
            "role",
        ),
    ],
)
def test_a_body_with_a_key_twice_in_one_object_is_400_naming_it(world, body, key):
    """The last one won, as orjson reads them; parsers that take the first (or refuse)
    exist, so what a proxy or an audit log read could differ from what was done: a
    member invited there, an admin here."""
    resp = world.client.simulate_post(
        "/api/invitations",
        body=body,
        headers={**world.headers("primary"), "Content-Type": "application/json"},
    )
    assert resp.status_code == 400, resp.text
    assert resp.json["error"]["code"] == "bad_request"
    assert f'"{key}" twice' in resp.json["error"]["message"]
    assert world.call("primary", "GET", "/api/invitations").json == []


def test_a_body_over_the_cap_is_413_before_it_is_read(world):
    from errortrack.api.schemas import MAX_BODY_BYTES

    email = "a" * MAX_BODY_BYTES + "@example.com"
    resp = _login(world.client, email)
    assert resp.status_code == 413 and resp.json["error"]["code"] == "payload_too_large"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"email": "a" * 309 + "@example.com", "password": PASSWORD}, "email"),
        ({"email": "viewer@example.com", "password": "p" * 1025}, "password"),
    ],
)
def test_emails_and_passwords_beyond_any_real_one_are_400(world, body, field):
    # Kept as the throttle's key (the email) or hashed whole (the password) otherwise.
    resp = world.client.simulate_post("/auth/login", json=body)
    assert resp.status_code == 400 and resp.json["error"]["field"] == field


def _change(world, cookie, csrf, current, new):
    return world.client.simulate_post(
        "/api/me/password",
        json={"current_password": current, "new_password": new},
        cookies={COOKIE: cookie},
        headers={"X-CSRF-Token": csrf},
    )


def test_a_password_change_ends_every_session_of_the_user(world):
    """A leaked password or cookie could only be stopped by deleting the user (review,
    twenty-fifth session). A change ends every session of the user, the caller's own
    too, which is replaced by a new one (a cookie leaked from the caller's own browser
    must end as well: diff review); the user's API tokens stay."""
    mine, csrf = _session(world)
    other, _ = _session(world)
    someone_else, _ = _session(world, "editor@example.com")
    changed = _change(world, mine, csrf, PASSWORD, "a new passphrase")
    assert changed.status_code == 200, changed.text
    new_cookie, new_csrf = changed.cookies[COOKIE].value, changed.json["csrf_token"]
    assert new_cookie != mine and new_csrf != csrf
    for old in (mine, other):
        assert world.client.simulate_get("/api/me", cookies={COOKIE: old}).status_code == 401
    me = world.client.simulate_get("/api/me", cookies={COOKIE: new_cookie})
    assert me.status_code == 200 and me.json["csrf_token"] == new_csrf
    elsewhere = world.client.simulate_get("/api/me", cookies={COOKIE: someone_else})
    assert elsewhere.status_code == 200
    assert world.call("viewer", "GET", "/api/me").status_code == 200  # its API token
    assert _login(world.client).status_code == 401
    assert _login(world.client, password="a new passphrase").status_code == 200
    # Without the CSRF header a cookie write is refused, this one too.
    resp = world.client.simulate_post(
        "/api/me/password",
        json={"current_password": "a new passphrase", "new_password": PASSWORD},
        cookies={COOKIE: new_cookie},
    )
    assert resp.status_code == 403 and _login(world.client).status_code == 401
    # With a token: no session to replace, no cookie.
    by_token = world.call(
        "viewer",
        "POST",
        "/api/me/password",
        {"current_password": "a new passphrase", "new_password": PASSWORD},
    )
    assert by_token.status_code == 200 and by_token.json == {"csrf_token": None}
    assert COOKIE not in by_token.cookies
    assert world.client.simulate_get("/api/me", cookies={COOKIE: new_cookie}).status_code == 401


def test_a_password_change_needs_the_current_password_and_counts_guesses(world):
    mine, csrf = _session(world)
    short = _change(world, mine, csrf, PASSWORD, "short")
    assert short.status_code == 400 and short.json["error"]["field"] == "new_password"
    for _ in range(5):  # the login lockout's free failures
        wrong = _change(world, mine, csrf, "not my password", "a new passphrase")
        assert wrong.status_code == 403, wrong.text
    # Locked out, for logins of that email from that address too.
    assert _change(world, mine, csrf, PASSWORD, "a new passphrase").status_code == 429
    assert _login(world.client).status_code == 429
    # Nothing changed meanwhile: no session ended, the password the same.
    assert world.client.simulate_get("/api/me", cookies={COOKIE: mine}).status_code == 200


@pytest.mark.parametrize("body", [{"current_password": 1}, {}])
def test_a_password_change_checks_the_caller_before_its_body(world, body):
    # As every other route (docs/permissions.md): no credentials is 401, a cookie without
    # the CSRF header 403, whatever the body; a bad body is 400 only for a caller.
    anonymous = world.client.simulate_post("/api/me/password", json=body)
    assert anonymous.status_code == 401, anonymous.text
    mine, csrf = _session(world)
    no_csrf = world.client.simulate_post("/api/me/password", json=body, cookies={COOKIE: mine})
    assert no_csrf.status_code == 403, no_csrf.text
    assert _change_raw(world, mine, csrf, body).status_code == 400


def _change_raw(world, cookie, csrf, body):
    return world.client.simulate_post(
        "/api/me/password", json=body, cookies={COOKIE: cookie}, headers={"X-CSRF-Token": csrf}
    )


@pytest.mark.parametrize("meanwhile", ["password changed", "user removed"])
def test_a_login_whose_user_changes_during_its_password_check_starts_no_session(
    world, monkeypatch, meanwhile
):
    """The check takes 0.2-0.4 s after the hash was read. A password change committed
    in that time (it ends every session of the user) came before the login's session,
    which then lived 14 days on the old password; a removal made the insert a 500
    (security review, thirty-second session). Either is now a 401 and no session."""
    user_id = world.add_user(email="racer@example.com")
    real = login_module.verify_password

    def then_the_change_commits(password_hash: str, password: str) -> bool:
        ok = real(password_hash, password)
        with world.state.engine.begin() as other:
            if meanwhile == "user removed":
                other.execute(sa.delete(User).where(User.id == user_id))
            else:
                new = hash_password("another passphrase")
                other.execute(sa.update(User).where(User.id == user_id).values(password_hash=new))
        return ok

    monkeypatch.setattr(login_module, "verify_password", then_the_change_commits)
    resp = _login(world.client, "racer@example.com")
    assert resp.status_code == 401, resp.text
    assert resp.json["error"]["code"] == "unauthorized"
    assert COOKIE not in resp.cookies
    with world.state.engine.connect() as conn:
        left = conn.execute(sa.select(LoginSession).where(LoginSession.user_id == user_id)).all()
    assert left == []


def test_a_login_whose_store_refuses_the_row_lock_releases_its_throttle_reservation(world):
    """The row lock after the password check is a write, which a read-only standby or a
    lock wait running out refuses. It ran outside the part of login() that releases the
    attempt the throttle reserved: five such logins with the right password left the
    email locked out (429) until the process restarted (diff review, thirty-second
    session)."""
    user_id = world.add_user(email="standby@example.com")

    def refuse(_conn, _cursor, statement, params, *_args):
        if statement.lstrip().upper().startswith("UPDATE USERS"):
            raise sa.exc.OperationalError(statement, params, Exception("read-only"))

    sa.event.listen(world.state.engine, "before_cursor_execute", refuse)
    try:
        for _ in range(5):
            resp = _login(world.client, "standby@example.com")
            assert resp.status_code in (500, 503), resp.text
    finally:
        sa.event.remove(world.state.engine, "before_cursor_execute", refuse)
    resp = _login(world.client, "standby@example.com")
    assert resp.status_code == 200, resp.text
    assert resp.json["user"]["id"] == user_id
