"""Relational migrations run by several processes at once on a fresh SQLite data dir.

Only PostgreSQL had a migration lock (pg_advisory_lock): on SQLite, `bootstrap`s started
together on a new data dir all migrated it side by side, and the losers failed with
"table projects already exists", a raw alembic CommandError traceback, or left an
`_alembic_tmp_*` table behind that broke later migrations rebuilding that table.
These are real processes running the real command, as the README's "of several runs at
once, one creates it" promises.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from errortrack import relational
from tests.support import ROOT, errortrack, once

PROCESSES = 4
ROUNDS = 3

# Each process imports the CLI first, then waits for the go file and runs `errortrack
# bootstrap`: the import time (about a second, uneven on a loaded machine) no longer
# spreads the starts apart, so the migrations really overlap in every round.
_RUN_AFTER_GO = """
import os, sys, time
from errortrack import cli
go = sys.argv[1]
while not os.path.exists(go):
    time.sleep(0.005)
sys.argv = ["errortrack", *sys.argv[2:]]
cli.main()
"""


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ERRORTRACK_")}
    env.update(ERRORTRACK_DATA_DIR=str(data_dir), TZ="UTC", PYTHONUNBUFFERED="1", **extra)
    return env


def _head() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(relational.alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


@once
def test_simultaneous_bootstraps_on_a_fresh_sqlite_data_dir(tmp_path):
    head = _head()
    for round_ in range(ROUNDS):
        data = tmp_path / f"data-{round_}"
        go = tmp_path / f"go-{round_}"
        env = _env(data, ERRORTRACK_BOOTSTRAP_PASSWORD="correct horse battery")
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _RUN_AFTER_GO,
                    str(go),
                    "bootstrap",
                    "--email",
                    f"u{i}@example.com",
                ],
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(PROCESSES)
        ]
        time.sleep(2.5)  # every process has imported the CLI and waits for the go file
        go.touch()
        results = [(p.wait(timeout=120), *p.communicate()) for p in procs]
        # The last line of each output says what happened (a traceback ends with its error).
        outcome = (
            f"round {round_}: {[(rc, err.strip().splitlines()[-1:]) for rc, _, err in results]}"
        )
        created = [r for r in results if r[0] == 0]
        refused = [r for r in results if r[0] != 0]
        assert len(created) == 1, outcome
        assert "created primary admin" in created[0][1], outcome
        for rc, _out, err in refused:
            # Exactly the refusal bootstrap gives once a user exists: no store error,
            # no traceback.
            assert rc == 1, outcome
            assert err.strip() == (
                "error: a user already exists; bootstrap only creates the first account"
            ), outcome

        db = sqlite3.connect(data / "errortrack.sqlite3")
        try:
            leftovers = db.execute(
                "SELECT name FROM sqlite_master WHERE name LIKE '\\_alembic\\_tmp\\_%' ESCAPE '\\'"
            ).fetchall()
            versions = db.execute("SELECT version_num FROM alembic_version").fetchall()
            users = db.execute("SELECT count(*) FROM users").fetchone()[0]
        finally:
            db.close()
        assert leftovers == [], outcome
        assert versions == [(head,)], outcome
        assert users == 1, outcome


def test_a_migration_alembic_refuses_is_one_error_line(tmp_path):
    """alembic's own errors (here: the store is at a revision this code does not know, as
    after a rollback of the code without restoring the database) are one ``Error:`` line
    and exit 1, like a store that does not answer; they were a CommandError traceback."""
    data = tmp_path / "data"
    data.mkdir()
    url = f"sqlite:///{data / 'errortrack.sqlite3'}"
    relational.upgrade(url)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
    engine.dispose()

    done = errortrack(
        "token", "create", "--email", "x@example.com", "--description", "d", env=_env(data)
    )
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("Error: relational store (ERRORTRACK_DATABASE_URL): "), lines
    assert "9999_from_the_future" in lines[0]


@pytest.mark.parametrize(
    ("url", "lock"),
    [
        ("sqlite:////srv/et/errortrack.sqlite3", "/srv/et/errortrack.sqlite3.migrate.lock"),
        ("sqlite+pysqlite:///rel.db", "rel.db.migrate.lock"),
        ("sqlite:///file:/srv/et/x.db?mode=rwc&uri=true", "/srv/et/x.db.migrate.lock"),
        # Nothing another process could migrate at the same time.
        ("sqlite://", None),
        ("sqlite:///:memory:", None),
        ("sqlite:///file:x?mode=memory&uri=true", None),
        ("postgresql+psycopg://u@db/et", None),
    ],
)
def test_the_lock_file_sits_next_to_the_database(url, lock):
    found = relational.sqlite_lock_path(url)
    assert (str(found) if found else None) == lock


def test_a_migration_lock_held_too_long_is_one_line(tmp_path):
    """The wait is bounded, like PostgreSQL's lock_timeout on its advisory lock."""
    url = f"sqlite:///{tmp_path / 'errortrack.sqlite3'}"
    # flock excludes another open file description, in this process too.
    with (
        relational.migration_lock(url),
        pytest.raises(relational.MigrationLockError) as e,
        relational.migration_lock(url, wait=0.2),
    ):
        pass
    assert "another process has been migrating this store" in str(e.value)
    assert "\n" not in str(e.value)
    with relational.migration_lock(url, wait=0.2):
        pass  # released by the first block


_AS_NOBODY = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to run a step as another user",
)


def _migration_lock_as_nobody(data: Path, then: str) -> subprocess.CompletedProcess[str]:
    """Take the migration lock of ``data``'s SQLite store as user 65534, then run
    ``then`` (code with ``cm``, the lock's context manager, in scope)."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from errortrack import relational;"
        "cm = relational.migration_lock('sqlite:///' + sys.argv[2]);" + then
    )
    return subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
         "-c", code, str(Path(relational.__file__).parent.parent),
         str(data / "errortrack.sqlite3")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@_AS_NOBODY
def test_a_lock_file_another_user_created_does_not_stop_migrations(tmp_path):
    """Root ran `token create` once (the README says it works beside a running server):
    the lock file it left, 0644 root, made every later migration by the service's user
    fail to open it ("Permission denied"), and `serve` did not start. flock needs no
    write access."""
    # Under /tmp itself: pytest's tmp_path (and the temp dir chDB sets) sit in
    # directories only root may enter.
    data = Path(tempfile.mkdtemp(prefix="et-lock-", dir="/tmp"))
    os.chown(data, 65534, 65534)
    lock = data / "errortrack.sqlite3.migrate.lock"
    lock.touch(mode=0o644)
    done = _migration_lock_as_nobody(
        data, "cm.__enter__(); print('locked'); cm.__exit__(None, None, None)"
    )
    shutil.rmtree(data)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "locked"


@_AS_NOBODY
def test_a_lock_file_that_cannot_be_created_names_the_refusal(tmp_path):
    """A data dir left owned by root (a Docker volume from an older image): creating
    the lock file was refused, the read-only retry found no file, and the message said
    "No such file or directory" instead of the cause."""
    data = Path(tempfile.mkdtemp(prefix="et-lock-", dir="/tmp"))
    data.chmod(0o755)  # root's, and others may only enter it
    done = _migration_lock_as_nobody(
        data, "\ntry: cm.__enter__()\nexcept relational.MigrationLockError as e: print(e)"
    )
    shutil.rmtree(data)
    assert done.returncode == 0, done.stderr
    assert "Permission denied" in done.stdout, done.stdout
