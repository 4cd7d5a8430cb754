"""The access flow through a real `errortrack serve` process and the real CLI: bootstrap,
a token printed by `errortrack token create` while the server runs, an invitation
accepted in a cookie session (httpx keeps the cookie like a browser), CSRF, logout."""

from __future__ import annotations

import httpx
import pytest

from tests.support import Server, errortrack, scratch_database, server_env

pytestmark = pytest.mark.e2e


def test_cookie_and_token_flow_against_a_real_server(tmp_path):
    with scratch_database(tmp_path) as url:
        env = server_env(tmp_path / "data", url, ERRORTRACK_BOOTSTRAP_PASSWORD="primary password")
        assert errortrack("bootstrap", "--email", "root@example.com", env=env).returncode == 0
        server = Server(env, threads=2).start()
        try:
            _flow(server.url, env)
        finally:
            server.stop()


def _flow(base: str, env: dict[str, str]) -> None:
    done = errortrack(
        "token", "create", "--email", "ROOT@example.com", "--description", "setup", env=env
    )
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    admin = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"})
    assert admin.get("/api/me").json()["user"]["is_primary"] is True
    invitation = admin.post(
        "/api/invitations", json={"email": "dev@example.com", "role": "member"}
    ).json()
    assert invitation["link"].startswith("http://127.0.0.1:8000/invite/")

    browser = httpx.Client(base_url=base)
    accepted = browser.post(
        f"/auth/invitations/{invitation['token']}/accept", json={"password": "dev password"}
    )
    assert accepted.status_code == 201, accepted.text
    set_cookie = accepted.headers["set-cookie"].lower()
    assert "httponly" in set_cookie and "samesite=lax" in set_cookie and "secure" not in set_cookie
    csrf = accepted.json()["csrf_token"]
    assert browser.get("/api/me").json()["user"] == {**accepted.json()["user"], "role": "member"}

    # A cookie write without the CSRF header is refused; with it, it goes through.
    assert browser.post("/api/projects", json={"name": "web"}).status_code == 403
    made = browser.post("/api/projects", json={"name": "web"}, headers={"X-CSRF-Token": csrf})
    assert made.status_code == 201 and made.json()["role"] == "admin"
    assert browser.get("/api/team").status_code == 403

    assert browser.post("/auth/logout", headers={"X-CSRF-Token": csrf}).status_code == 204
    assert browser.get("/api/me").status_code == 401
    relogin = browser.post(
        "/auth/login", json={"email": "dev@example.com", "password": "dev password"}
    )
    assert relogin.status_code == 200
    assert [p["name"] for p in browser.get("/api/projects").json()] == ["web"]
    assert browser.post("/auth/register", json={}).status_code == 403


def test_token_create_for_an_unknown_email_fails_cleanly(tmp_path):
    with scratch_database(tmp_path) as url:
        env = server_env(tmp_path / "data", url)
        done = errortrack(
            "token", "create", "--email", "who@example.com", "--description", "x", env=env
        )
        assert done.returncode == 1
        assert "no user with email who@example.com" in done.stderr
        assert "Traceback" not in done.stderr
