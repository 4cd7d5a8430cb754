"""Alembic, driven from code so that `errortrack migrate` needs no ini file."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import make_url

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"

# How long a process waits for another one's migration of the same store: PostgreSQL's
# lock_timeout for its advisory lock (migrations/env.py), the same for SQLite's lock file.
LOCK_WAIT_SECONDS = 300.0


class MigrationLockError(Exception):
    """The SQLite migration lock could not be taken (timeout, or the file refused);
    the message is one line."""


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    # ConfigParser interpolation would choke on a '%' in a password.
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> list[str]:
    """Upgrade to ``revision``; return the revisions applied now, oldest first (as
    migrations/env.py records them, under the migration lock)."""
    cfg = alembic_config(url)
    applied: list[str] = []
    cfg.attributes["applied"] = applied
    command.upgrade(cfg, revision)
    return applied


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)


def sqlite_lock_path(url: str) -> Path | None:
    """The lock file of a SQLite store's migrations: ``<database file>.migrate.lock``.

    None for other backends and for in-memory databases, which no other process can
    see (so nothing can migrate them side by side)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database or ""
    if parsed.query.get("uri") in {"true", "1"} and database.startswith("file:"):
        # sqlite:///file:path?mode=...&uri=true: the file is the URI's path.
        if parsed.query.get("mode") == "memory":
            return None
        database = database.removeprefix("file:")
    if database in {"", ":memory:"}:
        return None
    return Path(database + ".migrate.lock")


@contextlib.contextmanager
def migration_lock(url: str, wait: float = LOCK_WAIT_SECONDS) -> Iterator[None]:
    """Hold the store's migration lock for the block, on SQLite (migrations/env.py).

    PostgreSQL serialises migrations with pg_advisory_lock; SQLite has nothing alike, and
    processes started together on a new data dir (bootstraps, `token create`, `migrate`)
    migrated it side by side: the losers failed ("table projects already exists", alembic
    "expected to match one row") and could leave an ``_alembic_tmp_<table>`` copy behind,
    which broke the next migration rebuilding that table. An flock on a file next to the
    database makes them take turns; the next finds the work done. The kernel releases it
    when the process dies, so a crashed migration never leaves the lock held. The file
    stays (removing a lock file others may hold open would let two hold "the" lock).
    """
    path = sqlite_lock_path(url)
    if path is None or not path.parent.is_dir():
        # Not SQLite, or in memory; or a directory that does not exist, in which SQLite
        # cannot create the database either and says so itself.
        yield
        return
    try:
        # Readable and writable by all the umask allows: the file's owner (whoever
        # migrated first, root running `token create` say) must not decide who may
        # migrate later. flock needs no write access, so an existing file that this user
        # may only read is opened read-only (it was "Permission denied", and `serve`
        # did not start).
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        # Readable by all whatever the umask (the CLI's is 077): root's `token create`
        # left it 0600 and the server's user could not open it, so `serve` did not start
        # (diff review). It holds nothing; flock only needs it open.
        with contextlib.suppress(OSError):  # not ours to change: someone else made it
            os.fchmod(fd, 0o644)
    except PermissionError as refused:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            # No file to read: the first refusal (a directory this user may not write
            # in) is the cause, not the "No such file" of the read-only try.
            why = refused if isinstance(exc, FileNotFoundError) else exc
            raise MigrationLockError(
                f"cannot open the migration lock file {path}: {why.strerror or why}"
            ) from None
    except OSError as exc:
        raise MigrationLockError(
            f"cannot open the migration lock file {path}: {exc.strerror or exc}"
        ) from None
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                # Polled rather than a blocking flock, so that the wait is bounded, like
                # PostgreSQL's lock_timeout, in case the other process hangs.
                if time.monotonic() >= deadline:
                    raise MigrationLockError(
                        f"another process has been migrating this store for {wait:.0f} s "
                        f"(it holds {path}); stop it or try again"
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
