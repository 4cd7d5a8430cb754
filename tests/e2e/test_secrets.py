"""Secrets and personal data at rest and on the way out (twenty-fifth session's review):
the data dir is the user errortrack runs as's alone, answers carrying credentials are
not cached, and password hashing cannot be used to exhaust the worker's memory."""

from __future__ import annotations

import concurrent.futures
import os
import socket
import stat
import threading
import time
import uuid

import falcon.testing
import httpx
import pytest

from errortrack.api.errors import redacted_path
from errortrack.auth import passwords
from errortrack.config import Settings, SettingsError
from tests.access_world import PASSWORD, build_world
from tests.ingest_support import log_envelope
from tests.support import Server, errortrack, once, served_with_token, server_env


@once  # about files: the SQLite run covers it
def test_the_data_dir_is_for_errortrack_s_user_alone(tmp_path):
    """With the usual umask 022 every file was 0644 and every directory 0755: any local
    user read a pending admin invitation's token from the SQLite file and accepted it,
    and read logs with their personal data from the spool."""
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(data, 0o755)  # as a release before this one left it
    (data / "left-by-an-older-release").write_text("x")
    with served_with_token(tmp_path) as (server, token):
        bearer = {"Authorization": f"Bearer {token}"}
        project = httpx.post(
            f"{server.url}/api/projects", json={"name": f"p-{uuid.uuid4().hex[:6]}"}, headers=bearer
        ).json()
        key = project["dsn"].split("//", 1)[1].split("@", 1)[0]
        sent = httpx.post(
            f"{server.url}/api/{project['id']}/envelope/",
            content=log_envelope([{"timestamp": time.time(), "level": "info", "body": "pii"}]),
            headers={"X-Sentry-Auth": f"Sentry sentry_key={key}"},
        )
        assert sent.status_code == 200
        invited = httpx.post(
            f"{server.url}/api/invitations",
            json={"email": "new@example.com", "role": "admin"},
            headers=bearer,
        )
        assert invited.status_code == 201
        made = [p for p in data.rglob("*") if p.name != "left-by-an-older-release"]
        # The spool, the engine's files and (on the embedded default) the database.
        assert any(p.suffix == ".seg" for p in made) or any(p.name == "spool" for p in made)
        assert any("clickhouse" in p.parts for p in made)
        open_to_others = {
            str(p.relative_to(data)): oct(stat.S_IMODE(p.lstat().st_mode))
            for p in made
            if not p.is_symlink() and stat.S_IMODE(p.lstat().st_mode) & 0o077
        }
        assert open_to_others == {}
    # The directory itself: no one else may enter it, which covers what older releases
    # left in it; its group access is the operator's choice, as PostgreSQL's 0750 is.
    assert stat.S_IMODE(data.stat().st_mode) == 0o750


def test_answers_carrying_credentials_are_not_kept_by_caches(state, client):
    world = build_world(state, client)
    login = {"email": "viewer@example.com", "password": PASSWORD}
    for resp in [
        world.call("viewer", "POST", "/api/tokens", {"description": "ci"}),
        world.call("admin", "GET", "/api/invitations"),
        world.call("viewer", "GET", "/api/me"),
        client.simulate_post("/auth/login", json=login),
        world.call("viewer", "GET", "/api/nowhere"),
    ]:
        assert resp.status_code in (200, 201, 404), resp.text
        assert resp.headers["Cache-Control"] == "no-store"
        assert resp.headers["X-Content-Type-Options"] == "nosniff"
        assert resp.headers["X-Frame-Options"] == "DENY"
        assert resp.headers["Referrer-Policy"] == "no-referrer"
    # Probes may be cached by whatever sits in front.
    health = client.simulate_get("/healthz")
    assert "no-store" not in health.headers.get("Cache-Control", "")


def test_answers_carrying_credentials_are_not_kept_by_caches_however_the_path_is_spelled(
    state, client, openapi_app
):
    """Falcon's router ignores leading slashes: ``//api/tokens`` created a token, and
    its secret went out cacheable (the header was chosen by the path's spelling)."""
    world = build_world(state, client)
    login = {"email": "viewer@example.com", "password": PASSWORD}
    for resp in [
        client.simulate_post(
            "//api/tokens", headers=world.headers("viewer"), json={"description": "ci"}
        ),
        client.simulate_post("///auth/login", json=login),
        client.simulate_get("//api/me", headers=world.headers("viewer")),
    ]:
        assert resp.status_code in (200, 201), resp.text
        assert resp.headers["Cache-Control"] == "no-store"
    # The docs carry nothing of anyone's and may still be cached.
    docs = falcon.testing.TestClient(openapi_app)
    for path in ("/docs", "/docs/init.js", "/docs/assets/swagger-ui.css", "/api-docs/openapi.json"):
        got = docs.simulate_get(path)
        assert got.status_code == 200 and "Cache-Control" not in got.headers, path


def test_password_hashes_are_computed_two_at_a_time(monkeypatch):
    """Each argon2 hash takes 64 MiB: eight bad logins at once (different emails, so the
    lockout never applies) took the worker from 430 to 955 MB."""
    real = passwords._hasher
    lock = threading.Lock()
    running, most = [0], [0]

    class Counting:
        def __getattr__(self, name):
            method = getattr(real, name)

            def counted(*args):
                with lock:
                    running[0] += 1
                    most[0] = max(most[0], running[0])
                try:
                    time.sleep(0.05)  # long enough for the others to pile up
                    return method(*args)
                finally:
                    with lock:
                        running[0] -= 1

            return counted

    monkeypatch.setattr(passwords, "_hasher", Counting())
    stored = real.hash("right password")
    # As many threads as may run or wait: more are refused (test_password_busy.py).
    with concurrent.futures.ThreadPoolExecutor(passwords.RUNNING + passwords.WAITING) as pool:
        checks = list(
            pool.map(
                lambda i: passwords.verify_password(stored, "right password" if i % 2 else "no"),
                range(16),
            )
        )
        made = list(pool.map(lambda _: passwords.hash_password("another one"), range(4)))
    assert checks == [bool(i % 2) for i in range(16)]
    assert all(real.verify(h, "another one") for h in made)
    assert most[0] == 2


@pytest.mark.parametrize("password", ["Sup3rSecret/x", "Sup3r#Secret", "Sup3r?Secret"])
def test_a_bad_url_is_refused_without_quoting_its_password(password):
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"ERRORTRACK_CLICKHOUSE_URL": f"http://default:{password}@ch:8123/db"})
    assert "Secret" not in str(refused.value)
    assert "percent-encoded" in str(refused.value)


def test_the_migration_lock_file_stays_openable_by_other_users(tmp_path):
    """The CLI's umask 077 left the SQLite migration lock 0600: made by root's `token
    create`, it kept the server's own user from migrating, so `serve` did not start. It
    holds nothing, and other users open it read-only to take their turn (diff review)."""
    env = server_env(tmp_path / "data", f"sqlite:///{tmp_path / 'data' / 'x.sqlite3'}")
    assert errortrack("migrate", env=env).returncode == 0
    lock = tmp_path / "data" / "x.sqlite3.migrate.lock"
    assert stat.S_IMODE(lock.stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "data" / "x.sqlite3").stat().st_mode) == 0o600


def _debug_logging_server(tmp_path) -> Server:
    env = server_env(
        tmp_path / "data",
        f"sqlite:///{tmp_path / 'data' / 'x.sqlite3'}",
        ERRORTRACK_LOG_LEVEL="DEBUG",
    )
    return Server(env, threads=2).start()


@once  # about the server's log, not the relational store
def test_the_debug_log_of_requests_leaves_invitation_tokens_out(tmp_path):
    """At DEBUG gunicorn logs each request's path, and an invitation's path is its
    credential: anyone reading the log could accept it, an admin's included."""
    secret = "inv-" + uuid.uuid4().hex
    server = _debug_logging_server(tmp_path)
    try:
        httpx.get(f"{server.url}/auth/invitations/{secret}")
        httpx.post(f"{server.url}/auth/invitations/{secret}/accept", json={})
        httpx.get(f"{server.url}/invite/{secret}")
        httpx.get(f"{server.url}/api/me")
    finally:
        server.stop()
    log = server.log()
    assert secret not in log
    assert "GET /auth/invitations/{token}" in log
    assert "POST /auth/invitations/{token}/accept" in log
    assert "GET /invite/{token}" in log
    assert "GET /api/me" in log  # the other paths are logged as they were


@once  # about the server's log, not the relational store
def test_the_debug_log_leaves_invitation_tokens_out_however_the_path_is_spelled(tmp_path):
    """Falcon's router ignores leading slashes and the server takes an absolute-form
    target (RFC 9112 3.2.2): both reach the invitation, and gunicorn's DEBUG line for
    either had its token (the redaction knew one spelling)."""
    secret = "inv-" + uuid.uuid4().hex
    server = _debug_logging_server(tmp_path)
    origin = f"http://127.0.0.1:{server.port}"
    try:
        for target in (f"//auth/invitations/{secret}", f"{origin}/auth/invitations/{secret}"):
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                sock.sendall(
                    f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
                )
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
            # The invitation's own 404, not the router's: the request reached it.
            assert b"invitation not found" in answer, answer
    finally:
        server.stop()
    log = server.log()
    assert secret not in log
    assert "GET //auth/invitations/{token}" in log
    assert f"GET {origin}/auth/invitations/{{token}}" in log


@pytest.mark.parametrize(
    ("path", "logged"),
    [
        ("/auth/invitations/SECRET/accept", "/auth/invitations/{token}/accept"),
        ("//auth/invitations/SECRET", "//auth/invitations/{token}"),
        ("http://x:8000/auth/invitations/SECRET", "http://x:8000/auth/invitations/{token}"),
        ("HTTPS://x//invite/SECRET", "HTTPS://x//invite/{token}"),
        ("/api/me", "/api/me"),
    ],
)
def test_a_path_is_logged_without_an_invitation_token_in_any_spelling_that_reaches_it(path, logged):
    assert redacted_path(path) == logged
