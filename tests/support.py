"""Test helpers shared by unit and end-to-end tests: clocks, scratch databases, servers."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

TEST_PG = os.environ.get("ERRORTRACK_TEST_DATABASE_URL", "")
ROOT = Path(__file__).resolve().parent.parent


class FrozenClock:
    """An injectable clock: tests move time instead of sleeping.

    It starts at the real time (to the second), not at a fixed day: ClickHouse's TTLs run
    on the real clock and would drop rows dated at a fixed day once their retention had
    passed, and ingest moves a log dated more than 30 days from its arrival to it."""

    def __init__(self, now: dt.datetime | None = None) -> None:
        self.now = now or dt.datetime.now(dt.UTC).replace(microsecond=0)

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += dt.timedelta(**delta)


def _admin_url(url: str) -> sa.URL:
    return sa.make_url(url).set(database="postgres")


@contextlib.contextmanager
def scratch_database(tmp_path: Path, *, encoding: str | None = None) -> Iterator[str]:
    """A brand-new, empty relational database: a Postgres database when the suite runs on
    Postgres (in ``encoding`` when given), else a SQLite file. Dropped afterwards."""
    if not TEST_PG:
        yield f"sqlite:///{tmp_path / f'scratch-{uuid.uuid4().hex[:8]}.sqlite3'}"
        return
    name = f"et_scratch_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(_admin_url(TEST_PG), isolation_level="AUTOCOMMIT")
    how = f" TEMPLATE template0 ENCODING '{encoding}' LOCALE 'C'" if encoding else ""
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"{how}'))
    try:
        yield sa.make_url(TEST_PG).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def alter_pg_database(url: str, setting: str) -> None:
    """``ALTER DATABASE <url's database> SET <setting>`` (or ``RESET ...``), then end the
    database's sessions, so that every connection from now on has it (pooled ones are
    reopened: pool_pre_ping)."""
    name = sa.make_url(url).database
    admin = sa.create_engine(_admin_url(url), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'ALTER DATABASE "{name}" {setting}'))
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :name AND pid <> pg_backend_pid()"
                ),
                {"name": name},
            )
    finally:
        admin.dispose()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(data_dir: Path, database_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ERRORTRACK_")}
    env.update(
        ERRORTRACK_DATA_DIR=str(data_dir),
        ERRORTRACK_DATABASE_URL=database_url,
        TZ="UTC",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def errortrack(
    *args: str, env: dict[str, str], timeout: float = 120, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "errortrack", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
        cwd=ROOT,
    )


class Server:
    """A real `errortrack serve` process on a free loopback port."""

    def __init__(self, env: dict[str, str], *, threads: int = 8) -> None:
        self.env = env
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.threads = threads
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = Path(env["ERRORTRACK_DATA_DIR"]).parent / f"server-{self.port}.log"

    def start(self, timeout: float = 60, *, ready: str = "/readyz") -> Server:
        """Start, and wait until ``ready`` answers 200 (``/healthz`` touches no store)."""
        Path(self.env["ERRORTRACK_DATA_DIR"]).mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "errortrack",
                "serve",
                "--port",
                str(self.port),
                "--threads",
                str(self.threads),
            ],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}{ready}", timeout=2).status_code == 200:
                    return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server not ready in {timeout}s:\n{self.log()}")

    def workers(self) -> list[int]:
        """The pids of gunicorn's workers: the serve process's children."""
        assert self.proc is not None
        pid = self.proc.pid
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int | None = None) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        import signal

        os.killpg(self.proc.pid, sig or signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def kill(self) -> None:
        import signal

        self.stop(signal.SIGKILL)


@contextlib.contextmanager
def served_with_token(tmp_path: Path, *, threads: int = 2) -> Iterator[tuple[Server, str]]:
    """A real `errortrack serve` on a scratch database, its primary user bootstrapped,
    and an API token of that user, made with the CLI as an operator would."""
    with scratch_database(tmp_path) as url:
        env = server_env(tmp_path / "data", url, ERRORTRACK_BOOTSTRAP_PASSWORD="primary password")
        assert errortrack("bootstrap", "--email", "root@example.com", env=env).returncode == 0
        made = errortrack(
            "token", "create", "--email", "root@example.com", "--description", "t", env=env
        )
        assert made.returncode == 0, made.stderr
        server = Server(env, threads=threads).start()
        try:
            yield server, made.stdout.strip()
        finally:
            server.stop()


# Loop-mounted filesystems (a small disk to fill, a power cut to simulate) need root and
# e2fsprogs; the tests that use them are skipped elsewhere.
CAN_MOUNT = os.geteuid() == 0 and bool(shutil.which("mkfs.ext4") and shutil.which("e2fsck"))


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True)


@contextlib.contextmanager
def loop_filesystem(image: Path, mount: Path, size: str = "300M") -> Iterator[None]:
    """An ext4 filesystem of ``size`` in the file ``image``, mounted at ``mount``."""
    run("truncate", "-s", size, image)
    assert run("mkfs.ext4", "-q", "-F", image).returncode == 0
    mount.mkdir()
    mounted = run("mount", "-o", "loop", image, mount)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a loop filesystem here: {mounted.stderr.strip()}")
    try:
        yield
    finally:
        run("umount", "-l", mount)


# For tests whose subject is not the relational store (the spool, ClickHouse, the disk):
# run once, in the SQLite run, not again in the PostgreSQL one (CI's 20 minutes).
once = pytest.mark.skipif(
    bool(TEST_PG), reason="not about the relational store: runs in the SQLite run only"
)
