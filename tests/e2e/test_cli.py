"""The errortrack command as people run it: real processes, real stores."""

import sqlalchemy as sa

from tests.support import Server, errortrack, scratch_database, server_env


def test_bootstrap_creates_one_primary_admin_and_refuses_again(tmp_path):
    with scratch_database(tmp_path) as url:
        env = server_env(tmp_path / "data", url)
        pw = tmp_path / "pw"
        pw.write_text("correct horse battery\n")
        done = errortrack(
            "bootstrap", "--email", "Root@Example.com", "--password-file", str(pw), env=env
        )
        assert done.returncode == 0, done.stderr
        assert "root@example.com" in done.stdout

        again = errortrack(
            "bootstrap",
            "--email",
            "other@example.com",
            env={**env, "ERRORTRACK_BOOTSTRAP_PASSWORD": "another password"},
        )
        assert again.returncode == 1
        assert "already exists" in again.stderr
        assert "Traceback" not in again.stderr

        engine = sa.create_engine(url)
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT email, role, is_primary FROM users")).all()
        engine.dispose()
        assert [tuple(r) for r in rows] == [("root@example.com", "admin", True)]


def test_bootstrap_rejects_short_password(tmp_path):
    with scratch_database(tmp_path) as url:
        env = server_env(tmp_path / "data", url, ERRORTRACK_BOOTSTRAP_PASSWORD="short")
        done = errortrack("bootstrap", "--email", "a@example.com", env=env)
        assert done.returncode == 1
        assert "at least 8 characters" in done.stderr


def test_unknown_setting_stops_start_up_with_its_name(tmp_path):
    env = server_env(tmp_path / "data", f"sqlite:///{tmp_path}/x.db", ERRORTRACK_WORKRES="4")
    done = errortrack("serve", "--port", "1", env=env)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "Error: unknown setting ERRORTRACK_WORKRES; see the README's settings table"
    ]


def test_serve_on_embedded_default_and_a_second_serve_fails_cleanly(tmp_path):
    with scratch_database(tmp_path) as url:
        env = server_env(tmp_path / "data", url)
        server = Server(env).start()
        try:
            import httpx

            ready = httpx.get(f"{server.url}/readyz")
            assert ready.status_code == 200
            assert ready.json() == {
                "status": "ok",
                "relational": "ok",
                "clickhouse": "ok",
                "quarantined_rows": 0,
            }

            second = errortrack("serve", "--port", "1", env=env, timeout=60)
            assert second.returncode == 1
            lines = second.stderr.strip().splitlines()
            assert len(lines) == 1, second.stderr
            assert "another errortrack server is already running" in lines[0]

            check = errortrack("check", env=env)
            assert check.returncode == 1
            assert "relational: ok" in check.stdout
            assert "in use by a running server" in check.stdout
        finally:
            server.stop()
        assert server.proc is not None and server.proc.returncode == 0, server.log()


def test_migrate_then_check(tmp_path):
    with scratch_database(tmp_path) as url:
        env = server_env(tmp_path / "data", url)
        first = errortrack("migrate", env=env)
        assert first.returncode == 0, first.stderr
        assert "applied 0001_logs, 0002_events, 0003_spans" in first.stdout
        again = errortrack("migrate", env=env)
        assert "nothing (up to date)" in again.stdout
        check = errortrack("check", env=env)
        assert check.returncode == 0, check.stdout + check.stderr
        assert check.stdout.splitlines() == ["relational: ok", "clickhouse: ok"]


def test_worker_start_freezes_what_lives_as_long_as_the_worker(monkeypatch):
    """After the worker's start-up, the long-lived objects leave the cyclic GC's scans
    (cli._start_background): a full collection of them held the GIL for ~60 ms."""
    import gc

    from errortrack import asgi, cli

    started = []

    class _State:
        def start_background(self) -> None:
            started.append(True)

    monkeypatch.setattr(asgi, "state", _State())
    gc.unfreeze()
    try:
        cli._start_background(worker=None)
        assert started == [True]
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
