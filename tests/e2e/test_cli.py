"""The errortrack command as people run it: real processes, real stores."""

import subprocess
import sys
import time

import pytest
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


def test_simultaneous_bootstraps_create_one_primary_user(tmp_path):
    """Both counted no users before either inserted: two primary admins."""
    import threading

    from errortrack import db, relational
    from errortrack.errors import Conflict
    from errortrack.team.users import bootstrap_primary

    with scratch_database(tmp_path) as url:
        relational.upgrade(url)
        engine = db.make_engine(url)
        factory = db.make_sessionmaker(engine)
        barrier = threading.Barrier(4)
        outcomes: list[str] = []

        def run(i):
            try:
                barrier.wait(timeout=10)
                with db.unit_of_work(factory) as s:
                    bootstrap_primary(s, email=f"root{i}@example.com", password="long enough")
                outcomes.append("created")
            except Conflict as e:
                outcomes.append(e.message)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        refused = "a user already exists; bootstrap only creates the first account"
        assert sorted(outcomes) == [refused] * 3 + ["created"]
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT role, is_primary FROM users")).all()
            assert [tuple(r) for r in rows] == [("admin", True)]
        # The store itself holds the rule, whatever inserts the row.
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO users (email, password_hash, role, is_primary, created_at)"
                    " VALUES ('x@example.com', 'x', 'admin', :t, CURRENT_TIMESTAMP)"
                ),
                {"t": True},
            )
        engine.dispose()


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
            body = ready.json()
            spool = body.pop("spool")
            assert body.pop("dropped_items") == {}  # a fresh server has dropped nothing
            # Nothing held once the probe is answered; the default budget, 256 MiB.
            assert body.pop("bodies") == {"held_bytes": 0, "max_bytes": 1 << 28, "refused": 0}
            assert spool == {
                "bytes": spool["bytes"],
                "max_bytes": 1 << 30,
                "insert_failures": 0,
                "write_failures": 0,
                "free_bytes": spool["free_bytes"],
                "disk_low": False,
            }
            assert spool["free_bytes"] > 0
            assert body == {
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
        assert "clickhouse: applied 0001_logs, 0002_events, 0003_spans" in first.stdout
        # The relational line names what it applied too (it said "at head" either way).
        assert "relational store: applied 0001" in first.stdout, first.stdout
        again = errortrack("migrate", env=env)
        assert again.stdout.splitlines() == [
            "relational store: applied nothing (up to date)",
            "clickhouse: applied nothing (up to date)",
        ], again.stdout
        check = errortrack("check", env=env)
        assert check.returncode == 0, check.stdout + check.stderr
        assert check.stdout.splitlines() == ["relational: ok", "clickhouse: ok"]


def test_migrations_started_at_once_on_a_new_data_dir_take_turns(tmp_path):
    """chDB allows one process per directory: of three `migrate` at once on a new data
    dir, two failed, printing chDB's own "Cannot lock file" line beside their error
    (operations review, thirty-second session). They take turns on the embedded engine
    as on the relational store; one applies, the others find the work done."""
    with scratch_database(tmp_path) as url:
        env = server_env(tmp_path / "data", url)
        runs = [
            subprocess.Popen(
                [sys.executable, "-m", "errortrack", "migrate"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(3)
        ]
        outcomes = [(run.wait(timeout=120), *run.communicate()) for run in runs]
        assert [code for code, _, _ in outcomes] == [0, 0, 0], outcomes
        assert all(err == "" for _, _, err in outcomes), outcomes
        applied = [out.splitlines()[-1] for _, out, _ in outcomes]
        fresh = [line for line in applied if line.startswith("clickhouse: applied 0001_logs")]
        assert len(fresh) == 1, applied
        assert applied.count("clickhouse: applied nothing (up to date)") == 2, applied


def test_worker_start_freezes_what_lives_as_long_as_the_worker(monkeypatch):
    """After the worker's start-up, the long-lived objects leave the cyclic GC's scans
    (asgi.Lifecycle.start): a full collection of them held the GIL for ~60 ms. serve's
    hooks and the ASGI lifespan both start and stop the work: it happens once each."""
    import gc
    import types

    from errortrack import asgi, cli

    calls = []

    class _State:
        # Not the embedded engine: the worker's start then opens no store.
        settings = types.SimpleNamespace(embedded_clickhouse=False)

        def start_background(self) -> None:
            calls.append("start")

        def stop_background(self) -> None:
            calls.append("stop")

    lifecycle = asgi.Lifecycle(_State(), lock_data_dir=False)  # type: ignore[arg-type]
    monkeypatch.setattr(asgi, "lifecycle", lifecycle)
    gc.unfreeze()
    try:
        cli._start_background(worker=None)
        assert calls == ["start"]
        assert gc.get_freeze_count() > 0
        lifecycle.start()  # the lifespan's startup, after the hook
        lifecycle.stop()  # the lifespan's shutdown
        cli._stop_background(server=None, worker=None)
        assert calls == ["start", "stop"]
    finally:
        gc.unfreeze()


@pytest.mark.parametrize(
    "option",
    [
        ["--workers", "0"],  # started gunicorn with no worker: every request hung
        ["--threads", "0"],
        ["--port", "70000"],
        ["--port", "-1"],
    ],
)
def test_serve_refuses_impossible_options_before_doing_anything(tmp_path, option):
    env = server_env(tmp_path / "data", f"sqlite:///{tmp_path}/x.db")
    done = errortrack("serve", *option, env=env, timeout=30)
    assert done.returncode == 2
    assert f"Invalid value for '{option[0]}'" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data").exists()  # no migration ran


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (
            {"ERRORTRACK_DATABASE_URL": "postgresql+psycopg://postgres@127.0.0.1:1/x"},
            "Error: relational store (ERRORTRACK_DATABASE_URL): connection failed:",
        ),
        (
            {"ERRORTRACK_DATABASE_URL": "sqlite:////nonexistent-dir/x.db"},
            "Error: relational store (ERRORTRACK_DATABASE_URL): unable to open database file",
        ),
        (
            {"ERRORTRACK_CLICKHOUSE_URL": "http://127.0.0.1:1/et"},
            "Error: ClickHouse store (ERRORTRACK_CLICKHOUSE_URL): [Errno 111] Connection refused",
        ),
        ({"data dir": "a file"}, "is a file, not a directory"),
    ],
)
def test_migrate_on_an_unusable_store_says_so_in_one_line(tmp_path, setting, expected):
    with scratch_database(tmp_path) as url:
        env = server_env(tmp_path / "data", url)
        if "data dir" in setting:
            (tmp_path / "data").write_text("")
        else:
            env.update(setting)
        done = errortrack("migrate", env=env, timeout=60)
        assert done.returncode == 1
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert expected in lines[0]


def test_migrate_on_a_missing_postgres_database_says_so_in_one_line(tmp_path):
    with scratch_database(tmp_path) as url:
        if not url.startswith("postgresql"):
            pytest.skip("a Postgres server to ask for a database it does not have")
        missing = sa.make_url(url).set(database="et_no_such_database")
        env = server_env(tmp_path / "data", missing.render_as_string(hide_password=False))
        done = errortrack("migrate", env=env, timeout=60)
        assert done.returncode == 1
        assert done.stderr.strip().splitlines() == [
            "Error: relational store (ERRORTRACK_DATABASE_URL): connection failed: connection"
            ' to server at "127.0.0.1", port 5432 failed: FATAL:  database'
            ' "et_no_such_database" does not exist'
        ]


def test_a_long_valid_query_string_is_not_refused_by_gunicorn(tmp_path):
    # A logs query docs/API.md calls valid (q of 500 CJK characters, 4500 bytes encoded,
    # plus attribute filters) got gunicorn's plain-text 414 at its default 4094.
    import httpx

    with scratch_database(tmp_path) as url:
        server = Server(server_env(tmp_path / "data", url)).start()
        try:
            resp = httpx.get(f"{server.url}/readyz", params={"q": "日" * 800})
            assert len(str(resp.request.url)) > 7000
            assert resp.status_code == 200
        finally:
            server.stop()


@pytest.mark.parametrize("command", ["bootstrap", "token"])
@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (
            "postgresql+psycopg://postgres@127.0.0.1:1/x",
            "Error: relational store (ERRORTRACK_DATABASE_URL): connection failed:",
        ),
        (
            "sqlite:////nonexistent-dir/x.db",
            "Error: relational store (ERRORTRACK_DATABASE_URL): unable to open database file",
        ),
    ],
)
def test_bootstrap_and_token_create_on_an_unreachable_store_say_so_in_one_line(
    tmp_path, command, setting, expected
):
    # They printed the driver's traceback (135-144 lines); migrate said it in one line.
    env = {
        **server_env(tmp_path / "data", setting),
        "ERRORTRACK_BOOTSTRAP_PASSWORD": "long enough password",
    }
    args = ["--email", "a@example.com"]
    if command == "token":
        args = ["token", "create", *args, "--description", "ci"]
    else:
        args = ["bootstrap", *args]
    done = errortrack(*args, env=env, timeout=60)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(expected)


def test_serve_warns_when_dsns_would_point_at_another_port(tmp_path):
    # make run PORT=... handed out DSNs for port 8000. The store is unusable so that
    # serve stops right after the warning (at its migrations).
    env = server_env(tmp_path / "data", "sqlite:////nonexistent-dir/x.db")
    done = errortrack("serve", "--port", "18250", env=env, timeout=60)
    assert done.returncode == 1
    warnings = [line for line in done.stderr.splitlines() if "[WARNING]" in line]
    assert len(warnings) == 1, done.stderr
    assert (
        "ERRORTRACK_PUBLIC_URL is not set: DSNs and invitation links will point at "
        "http://127.0.0.1:8000, not at this server on 127.0.0.1:18250" in warnings[0]
    )
    for quiet in (
        {"ERRORTRACK_PUBLIC_URL": "http://example.com"},  # set: whatever people reach
        {},  # the default port: the default URL is right
    ):
        port = "18250" if quiet else "8000"
        done = errortrack("serve", "--port", port, env={**env, **quiet}, timeout=60)
        assert done.returncode == 1
        assert "[WARNING]" not in done.stderr, done.stderr


def test_migrate_names_the_embedded_store_another_process_holds(tmp_path):
    # The store is given by ERRORTRACK_CLICKHOUSE_URL, outside this data dir: the
    # message named the data dir (not in use), and told serve that serve migrates.
    import subprocess
    import sys

    held = (tmp_path / "held" / "clickhouse").resolve()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom errortrack.analytics import ClickHouse\n"
            "store = ClickHouse('chdb://' + sys.argv[1]); store.ping()\n"
            "print('open', flush=True)\n"
            "sys.stdin.read()",
            str(held),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        env = server_env(
            tmp_path / "data",
            f"sqlite:///{tmp_path}/x.db",
            ERRORTRACK_CLICKHOUSE_URL=f"chdb://{held}",
        )
        done = errortrack("migrate", env=env, timeout=60)
        assert done.returncode == 1
        assert done.stderr.strip().splitlines()[-1] == (
            f"Error: the embedded ClickHouse store at {held} is in use by another process "
            "(a running server?); `errortrack serve` applies migrations itself when it starts"
        )
        served = errortrack("migrate", "--from-serve", env=env, timeout=60)
        assert served.returncode == 1
        assert served.stderr.strip().splitlines()[-1] == (
            f"Error: another process holds the embedded ClickHouse store at {held} (chDB "
            "allows one process per directory); stop it, or give this server its own "
            "ERRORTRACK_DATA_DIR or ERRORTRACK_CLICKHOUSE_URL"
        )
    finally:
        holder.communicate("", timeout=30)


def test_a_second_server_on_another_data_dir_but_this_ones_chdb_is_refused(tmp_path):
    """chDB was opened at its first use: a second server whose own data dir was free but
    whose ERRORTRACK_CLICKHOUSE_URL named an idle server's chDB directory passed its
    migrations and took the engine over (operations review, thirty-second session).
    The first is started without /readyz, which would open the engine itself."""
    shared = (tmp_path / "shared" / "clickhouse").resolve()
    first = Server(
        server_env(
            tmp_path / "a",
            f"sqlite:///{tmp_path}/a.db",
            ERRORTRACK_CLICKHOUSE_URL=f"chdb://{shared}",
        )
    ).start(ready="/healthz")
    try:
        env = server_env(
            tmp_path / "b",
            f"sqlite:///{tmp_path}/b.db",
            ERRORTRACK_CLICKHOUSE_URL=f"chdb://{shared}",
        )
        second = errortrack("serve", "--port", "1", env=env, timeout=60)
        assert second.returncode == 1
        assert f"another process holds the embedded ClickHouse store at {shared}" in second.stderr
        assert "Error: migrations failed; the server was not started" in second.stderr
    finally:
        first.stop()
    assert first.proc is not None and first.proc.returncode == 0, first.log()


def test_a_percent_encoded_clickhouse_password_is_sent_decoded(tmp_path):
    # The settings tell an operator to percent-encode '@ / # ?' in the password; it went
    # to the server still encoded ("p%40ss"), a 401 that looked like a wrong password.
    import base64
    import http.server
    import threading

    seen: list[str] = []

    class Refuse(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(self.headers.get("Authorization", ""))
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        url = f"http://et%2Fuser:p%40ss%2Fw%3Fx%23y@127.0.0.1:{port}/errortrack"
        with scratch_database(tmp_path) as db_url:
            env = server_env(tmp_path / "data", db_url, ERRORTRACK_CLICKHOUSE_URL=url)
            done = errortrack("check", env=env, timeout=60)
    finally:
        server.shutdown()
    assert done.returncode == 1
    assert seen, done.stdout + done.stderr
    assert {base64.b64decode(header.split()[1]) for header in seen} == {b"et/user:p@ss/w?x#y"}


def test_serve_on_a_bare_ipv6_host_serves_there(tmp_path):
    # "::" is listed as a host that reaches every interface, but the bind address was
    # built as ":::port": gunicorn refused it after the migrations had run.
    import socket

    import httpx

    from tests.support import free_port

    try:
        socket.socket(socket.AF_INET6).bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    port = free_port()
    env = server_env(tmp_path / "data", f"sqlite:///{tmp_path}/x.db")
    proc = subprocess.Popen(
        [sys.executable, "-m", "errortrack", "serve", "--host", "::1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"http://[::1]:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[1]
        assert httpx.get(f"http://[::1]:{port}/healthz").status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_a_relational_file_that_is_not_a_database_is_one_line(tmp_path):
    # A mangled restore: sqlite's DatabaseError (not an OperationalError) came out as a
    # 110-line traceback where every other store failure is one "Error:" line.
    bad = tmp_path / "x.db"
    bad.write_bytes(bytes(range(256)) * 32)
    env = server_env(tmp_path / "data", f"sqlite:///{bad}")
    for command in ("migrate", "check"):
        done = errortrack(command, env=env, timeout=60)
        assert done.returncode == 1
        assert "Traceback" not in done.stderr, done.stderr
        assert "file is not a database" in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("command", "spoil", "expected"),
    [
        # ERRORTRACK_DATA_DIR names a file: migrate said so, check was a traceback.
        ("check", "data dir is a file", "is a file, not a directory"),
        # The chDB directory cannot be made: mkdir's traceback after the relational store.
        ("migrate", "clickhouse is a file", "ClickHouse store (ERRORTRACK_CLICKHOUSE_URL)"),
        # The lock file cannot be opened (a data dir left owned by another user): traceback.
        ("serve", "serve.lock is a directory", "serve.lock"),
        ("check", "serve.lock is a directory", "serve.lock"),
    ],
)
def test_a_data_dir_that_cannot_be_used_is_one_line(tmp_path, command, spoil, expected):
    data = tmp_path / "data"
    if spoil == "data dir is a file":
        data.write_text("")
    else:
        data.mkdir()
        if spoil == "clickhouse is a file":
            (data / "clickhouse").write_text("")
        else:
            (data / "serve.lock").mkdir()
    env = server_env(data, f"sqlite:///{tmp_path}/x.db")
    args = ("serve", "--port", "1") if command == "serve" else (command,)
    done = errortrack(*args, env=env, timeout=60)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and expected in errors[0], done.stdout + done.stderr


@pytest.mark.parametrize(
    ("host", "bind"),
    [
        ("127.0.0.1", "127.0.0.1:8000"),
        ("::", "[::]:8000"),
        ("[::1]", "[::1]:8000"),
        ("unix:/run/errortrack.sock", "unix:/run/errortrack.sock"),
    ],
)
def test_the_bind_address_gunicorn_is_given(host, bind):
    from errortrack.cli import _bind_address

    assert _bind_address(host, 8000) == bind
