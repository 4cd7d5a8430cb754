"""The relational store in trouble while errortrack serves (twenty-fourth session's review
of PostgreSQL outages): honest 503s, no 500s, no request held without bound, and ingest
that goes on for the keys it knows. The PostgreSQL-only ones need a real server's
settings (read-only, DateStyle, encodings, locks) and are skipped on SQLite.
"""

from __future__ import annotations

import concurrent.futures
import os
import time
import uuid

import httpx
import pytest
import sqlalchemy as sa

from errortrack import db
from errortrack.ingest import auth
from tests.ingest_support import ingest_auth, log_envelope
from tests.support import (
    TEST_PG,
    alter_pg_database,
    errortrack,
    scratch_database,
    served_with_token,
    server_env,
)

pg_only = pytest.mark.skipif(not TEST_PG, reason="needs PostgreSQL's own settings")


def _project(server, token: str) -> dict:
    made = httpx.post(
        f"{server.url}/api/projects",
        json={"name": f"p-{uuid.uuid4().hex[:6]}"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert made.status_code == 201, made.text
    return made.json()


@pg_only
def test_a_read_only_database_is_a_503_not_a_500(tmp_path):
    """A standby after a failover refuses writes with SQLSTATE 25006, which psycopg
    raises as InternalError: every write was a 500, with no Retry-After. Reads go on,
    with a token or a cookie: their last use, a write, was recorded in the request's
    transaction, and its refusal made every such read a 503 too."""
    with served_with_token(tmp_path) as (server, token):
        url = server.env["ERRORTRACK_DATABASE_URL"]
        bearer = {"Authorization": f"Bearer {token}"}

        def refused(*requests: tuple[str, str, dict | None]) -> None:
            alter_pg_database(url, "SET default_transaction_read_only = on")
            try:
                for method, path, body in requests:
                    resp = httpx.request(method, f"{server.url}{path}", json=body, headers=bearer)
                    assert resp.status_code == 503, (path, resp.text)
                    assert resp.json()["error"]["code"] == "unavailable"
                    assert resp.headers["Retry-After"] == "5"
                # Still ready (ingest goes on), and saying why writes are refused.
                ready = httpx.get(f"{server.url}/readyz")
                assert ready.status_code == 200 and ready.json()["relational"] == "read-only"
            finally:
                alter_pg_database(url, "RESET default_transaction_read_only")

        login = httpx.post(
            f"{server.url}/auth/login",
            json={"email": "root@example.com", "password": "primary password"},
        )
        assert login.status_code == 200
        alter_pg_database(url, "SET default_transaction_read_only = on")
        try:
            # The token's and the login's first use would record their last use.
            read = httpx.get(f"{server.url}/api/projects", headers=bearer)
            assert read.status_code == 200, read.text
            me = httpx.get(f"{server.url}/api/me", cookies=login.cookies)
            assert me.status_code == 200, me.text
            assert "last-use times not recorded" in server.log()
        finally:
            alter_pg_database(url, "RESET default_transaction_read_only")

        def last_used() -> str | None:
            listed = httpx.get(f"{server.url}/api/tokens", headers=bearer).json()
            return listed[0]["last_used_at"]

        # Not recorded while refused; recorded (after the listing's own request) once
        # the database takes writes again.
        assert last_used() is None
        assert last_used() is not None
        invited = httpx.post(
            f"{server.url}/api/invitations",
            json={"email": "new@example.com", "role": "admin"},
            headers=bearer,
        ).json()["token"]
        refused(
            ("POST", "/api/projects", {"name": "during failover"}),
            ("POST", f"/auth/invitations/{invited}/accept", {"password": "s3cret-pass"}),
        )
        assert httpx.get(f"{server.url}/api/projects", headers=bearer).status_code == 200
        assert httpx.get(f"{server.url}/readyz").json()["relational"] == "ok"
        assert "Traceback" not in server.log()
        # The refusals are logged without the invitation's token, in the path or among
        # the statement's parameters: anyone reading the log could have accepted it.
        assert "/auth/invitations/{token}/accept" in server.log()
        assert invited not in server.log()


@pg_only
def test_a_database_in_another_date_style_is_read(tmp_path):
    """psycopg reads timestamptz only in the ISO DateStyle: with the database set to
    'SQL, DMY' every API read of a time was a 500 and `token create` a traceback."""
    with served_with_token(tmp_path) as (server, token):
        url = server.env["ERRORTRACK_DATABASE_URL"]
        alter_pg_database(url, "SET DateStyle = 'SQL, DMY'")
        created = _project(server, token)
        listed = httpx.get(
            f"{server.url}/api/projects", headers={"Authorization": f"Bearer {token}"}
        )
        assert listed.status_code == 200, listed.text
        assert [p["created_at"] for p in listed.json()] == [created["created_at"]]
        made = errortrack(
            "token", "create", "--email", "root@example.com", "--description", "d",
            env=server.env,
        )  # fmt: skip
        assert made.returncode == 0, made.stderr


@pg_only
def test_a_database_not_in_utf8_is_refused_in_one_line(tmp_path):
    """A LATIN1 database migrated and served; then a project named with an emoji was a 500
    and events titled in Chinese were acknowledged and quarantined."""
    with scratch_database(tmp_path, encoding="LATIN1") as url:
        env = server_env(tmp_path / "data", url)
        migrated = errortrack("migrate", env=env)
        assert migrated.returncode == 1
        assert migrated.stderr.strip().splitlines() == [
            "Error: relational store (ERRORTRACK_DATABASE_URL): the database's encoding is "
            "LATIN1; errortrack needs UTF8 (CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE "
            "template0)"
        ]
        with sa.create_engine(url).connect() as conn:
            tables = conn.execute(
                sa.text("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            )
            assert tables.scalar() == 0  # nothing was created


def test_an_exhausted_connection_pool_is_a_503(ingest_world):
    """Every pooled connection busy past the pool's wait was a 500 internal_error."""
    world = ingest_world
    pool = world.state.engine.pool
    pool._timeout = 0.2  # the real pool, made to give up sooner than its 30 s
    held = []
    try:
        while True:
            try:
                held.append(world.state.engine.connect())
            except sa.exc.TimeoutError:
                break
        resp = world.call("viewer", "GET", "/api/projects")
        assert resp.status_code == 503, resp.text
        assert resp.json["error"]["code"] == "unavailable"
        assert resp.headers["Retry-After"] == "5"
    finally:
        for conn in held:
            conn.close()
    assert world.call("viewer", "GET", "/api/projects").status_code == 200


def test_known_keys_go_on_working_while_keys_cannot_be_read(ingest_world, tmp_path):
    """The key cache trusted an entry for 10 s; past that, every SDK's logs and events were
    503s for as long as the relational store could not be read, although the spool needs
    nothing more from it. A key's last answer now stands in for up to STALE_SECONDS."""
    world = ingest_world
    pid = world.project_id
    headers = ingest_auth(world.factory, pid)
    body = log_envelope([{"timestamp": time.time(), "level": "info", "body": "before"}])

    def send() -> int:
        return world.client.simulate_post(
            f"/api/{pid}/envelope/", body=body, headers=headers
        ).status_code

    assert send() == 200
    ingest = world.state.ingest.ingest
    # A real store that cannot be opened: the directory does not exist.
    broken = db.make_engine(f"sqlite:///{tmp_path / 'gone' / 'x.sqlite3'}")
    ingest.sessions = db.make_sessionmaker(broken)
    started = time.monotonic()
    ingest.keys.clock = lambda: time.monotonic() + (ingest.keys.ttl + 1)  # expired
    assert send() == 200
    # That answer did not wait for the load, which failed meanwhile and left the last
    # answer in place for another RETRY_SECONDS.
    key = headers["X-Sentry-Auth"].split("sentry_key=")[1].split(",")[0]
    deadline = time.monotonic() + 10
    while not ingest.keys.cached(key)[0] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ingest.keys.cached(key)[0]
    ingest.keys.clock = lambda: started + auth.STALE_SECONDS + ingest.keys.ttl + 5
    assert send() == 503  # too long since the key was last read
    broken.dispose()


def test_key_cache_answers_stale_only_for_failures_it_may_ride_out():
    now = [0.0]
    cache = auth.KeyCache(ttl=10, clock=lambda: now[0], stale_for=600)
    info = auth.KeyInfo(1, True, None)
    assert cache.lookup("k", lambda _: info) is info

    def down(_key: str) -> auth.KeyInfo | None:
        raise auth.Unavailable("down", retry_after=5)

    now[0] = 11
    assert cache.lookup("k", down) is info
    # Retried after a short while, not on every request meanwhile.
    assert cache.cached("k") == (True, info)
    now[0] = 11 + auth.RETRY_SECONDS + 1
    assert cache.cached("k") == (False, None)
    assert cache.lookup("k", lambda _: None) is None  # the store answers again: it wins
    now[0] = 30
    with pytest.raises(auth.Unavailable):
        cache.lookup("other", down)  # nothing known: nothing to stand in
    now[0] = 700
    with pytest.raises(auth.Unavailable):
        cache.lookup("k", down)  # the last answer is older than 600 s


@pg_only
def test_a_locked_keys_table_holds_neither_ingest_nor_readyz(tmp_path):
    """A lock on project_keys (a migration, an ALTER TABLE) held every ingest request with
    a key not yet cached for as long as the lock, and /readyz queued behind those loads
    on the loop's default executor (43 s in the review)."""
    with served_with_token(tmp_path) as (server, token):
        created = _project(server, token)
        known = created["dsn"].split("//", 1)[1].split("@", 1)[0]
        body = log_envelope([{"timestamp": time.time(), "level": "info", "body": "x"}])
        first = httpx.post(
            f"{server.url}/api/{created['id']}/envelope/",
            content=body,
            headers={"X-Sentry-Auth": f"Sentry sentry_key={known}"},
        )
        assert first.status_code == 200, first.text
        locker = sa.create_engine(server.env["ERRORTRACK_DATABASE_URL"])
        conn = locker.connect()
        try:
            conn.execute(sa.text("LOCK TABLE project_keys IN ACCESS EXCLUSIVE MODE"))

            def ingest(key: str) -> tuple[int, float]:
                began = time.monotonic()
                resp = httpx.post(
                    f"{server.url}/api/{created['id']}/envelope/",
                    content=body,
                    headers={"X-Sentry-Auth": f"Sentry sentry_key={key}"},
                    timeout=60,
                )
                return resp.status_code, time.monotonic() - began

            keys = [uuid.uuid4().hex for _ in range(8)]
            with concurrent.futures.ThreadPoolExecutor(len(keys)) as pool:
                sent = [pool.submit(ingest, key) for key in keys]
                time.sleep(1)  # every load is waiting on the lock
                began = time.monotonic()
                ready = httpx.get(f"{server.url}/readyz", timeout=60)
                readyz_took = time.monotonic() - began
                answers = [future.result() for future in sent]
            assert (ready.status_code, readyz_took < 3) == (200, True), readyz_took
            assert all(status == 503 for status, _ in answers), answers
            assert max(took for _, took in answers) < 15, answers
            # A key read before answers at once from its last answer, past its cache
            # entry's 10 s, while the load waits on the lock.
            time.sleep(max(0.0, auth.KeyCache().ttl + 0.5 - (time.monotonic() - began)))
            assert ingest(known)[0] == 200
            status, took = ingest(known)
            assert (status, took < 1) == (200, True), took
        finally:
            conn.rollback()
            conn.close()
            locker.dispose()


def test_the_pool_has_a_connection_for_every_api_thread(tmp_path):
    """A fixed pool of 10 + 10 served `--threads 32` with 503s (pool timeouts) while the
    database had room: it now has one per thread, plus the background's."""
    from errortrack import asgi

    env = server_env(tmp_path / "data", f"sqlite:///{tmp_path / 'x.sqlite3'}")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            if name.startswith("ERRORTRACK_"):
                patch.setenv(name, value)
        umask = os.umask(0o022)
        try:
            app = asgi.build(32, lock_data_dir=False)
        finally:
            os.umask(umask)  # build() set errortrack's own; this process is pytest's
    try:
        pool = asgi.state.engine.pool
        assert pool.size() == 32 + db.BACKGROUND_CONNECTIONS  # type: ignore[attr-defined]
    finally:
        asgi.state.engine.dispose()
    assert app is not None


@pg_only
def test_a_login_or_logout_whose_commit_fails_leaves_the_cookie_alone(tmp_path):
    """A full disk fails the commit, after the handler: login answered 503 with a cookie
    for a session never stored (the browser dropped its working one), and logout 503
    clearing the cookie of a session still valid for 14 days (disk review). The disk
    is made full for login_sessions alone, at commit, by a deferred trigger."""
    with served_with_token(tmp_path) as (server, _token):
        url = server.env["ERRORTRACK_DATABASE_URL"]
        login = {"email": "root@example.com", "password": "primary password"}
        first = httpx.post(f"{server.url}/auth/login", json=login)
        assert first.status_code == 200
        cookie = {"errortrack_session": first.cookies["errortrack_session"]}
        csrf = {"X-CSRF-Token": first.json()["csrf_token"]}
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "CREATE FUNCTION disk_full() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$ BEGIN RAISE EXCEPTION 'could not extend file' "
                    "USING ERRCODE = '53100'; END $$"
                )
            )
            conn.execute(
                sa.text(
                    "CREATE CONSTRAINT TRIGGER full_disk AFTER INSERT OR DELETE ON login_sessions "
                    "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION disk_full()"
                )
            )
        try:
            refused = httpx.post(f"{server.url}/auth/login", json=login)
            assert refused.status_code == 503, refused.text
            assert "set-cookie" not in refused.headers
            out = httpx.post(f"{server.url}/auth/logout", cookies=cookie, headers=csrf)
            assert out.status_code == 503, out.text
            assert "set-cookie" not in out.headers
        finally:
            with engine.begin() as conn:
                conn.execute(sa.text("DROP TRIGGER full_disk ON login_sessions"))
                conn.execute(sa.text("DROP FUNCTION disk_full()"))
            engine.dispose()
        # The session the failed logout left is still the user's, and logout works now.
        assert httpx.get(f"{server.url}/api/me", cookies=cookie).status_code == 200
        out = httpx.post(f"{server.url}/auth/logout", cookies=cookie, headers=csrf)
        assert out.status_code == 204 and "errortrack_session" in out.headers["set-cookie"]
        assert httpx.get(f"{server.url}/api/me", cookies=cookie).status_code == 401
