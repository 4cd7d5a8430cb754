"""The ``errortrack`` command: serve, migrate, bootstrap, check, spool requeue."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import click

from errortrack import private, relational
from errortrack.config import Settings, SettingsError

# Measured with bench/ingest_logs.py (bench/RESULTS.md, "Request-path tuning", and the
# twelfth session: 200 instead of 500 ms kept the peak RSS 48 MB lower, under the 700 MB
# target in every run where 500 went over it in some, for ~2 % of the logs/s).
CHDB_MALLOC_CONF = "dirty_decay_ms:200"


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except SettingsError as exc:
        raise click.ClickException(str(exc)) from None


def _use_utc() -> None:
    # chDB reads the process time zone for naive datetimes; the whole server runs in UTC.
    os.environ["TZ"] = "UTC"
    time.tzset()


def _engine_in_use(exc: BaseException) -> bool:
    text = str(exc)
    return "Cannot lock file" in text or "Error initializing EmbeddedServer" in text


@click.group()
def main() -> None:
    """errortrack: error tracking and logs for unchanged Sentry SDKs."""
    _use_utc()
    private.restrict_new_files()


def _make_data_dir(settings: Settings) -> None:
    path = settings.data_dir
    try:
        private.make_data_dir(path)
    except OSError as exc:
        why = "is a file, not a directory" if path.is_file() else f"cannot be created: {exc}"
        raise click.ClickException(f"ERRORTRACK_DATA_DIR {path} {why}") from None


def _root_cause(exc: BaseException) -> str:
    # Drivers wrap the cause (urllib3: "Max retries exceeded ... Caused by ..."); its
    # first line says it best, e.g. "[Errno 111] Connection refused".
    while exc.__cause__ is not None:
        exc = exc.__cause__
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:300]


@contextlib.contextmanager
def relational_store_errors() -> Iterator[None]:
    """A relational store that cannot be reached, in the block, is one ``Error:`` line
    (a ClickException), as `check` says it, not a driver's traceback; so is a migration
    alembic refuses (e.g. a store at a revision this code does not know, after the code
    was rolled back without restoring the database) or the SQLite migration lock."""
    import sqlalchemy as sa
    from alembic.util.exc import CommandError

    try:
        yield
    # DBAPIError, not only OperationalError: a SQLite file that is not a database or a
    # Postgres role without CREATE on its schema (PG 15's default) raise other kinds.
    except (sa.exc.DBAPIError, CommandError, relational.MigrationLockError) as exc:
        raise click.ClickException(
            f"relational store (ERRORTRACK_DATABASE_URL): {_root_cause(exc)}"
        ) from None


def upgrade_relational(settings: Settings) -> list[str]:
    """Bring the relational store to head (migrate, bootstrap, token create) and return
    the revisions applied now; one ``Error:`` line when it cannot be reached."""
    if not settings.database_url:
        _make_data_dir(settings)
    with relational_store_errors():
        return relational.upgrade(settings.resolved_database_url)


def migrate_all(settings: Settings) -> tuple[list[str], list[str]]:
    """Apply both stores' migrations; return what each applied now (relational, ClickHouse).

    A store that cannot be reached (or a data dir that cannot be) is one line and a
    ClickException, as `check` says it, not a driver's traceback."""
    if not settings.database_url or not settings.clickhouse_url:
        _make_data_dir(settings)
    relational_applied = upgrade_relational(settings)
    with _embedded_turn(settings):
        return relational_applied, _migrate_clickhouse(settings)


@contextlib.contextmanager
def _embedded_turn(settings: Settings) -> Iterator[None]:
    """Processes migrating one embedded engine take turns, as they do on the relational
    store (``relational.migration_lock``): chDB allows one process per directory, and of
    three `migrate` started at once on a new data dir two failed, each printing chDB's own
    "Cannot lock file" line beside its error (operations review, thirty-second session).
    An flock on ``<chDB directory>.migrate.lock``, waited for as long as the relational
    lock is; the next finds the work done. ``serve``'s own migration takes it too."""
    if not settings.embedded_clickhouse:
        yield
        return
    where = Path(settings.resolved_clickhouse_url.removeprefix("chdb://"))
    path = where.with_name(where.name + ".migrate.lock")
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        handle = path.open("a")
    except OSError as exc:
        raise click.ClickException(
            f"ClickHouse store (ERRORTRACK_CLICKHOUSE_URL): cannot open the lock file "
            f"{path}: {_root_cause(exc)}"
        ) from None
    with handle:
        deadline = time.monotonic() + relational.LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise click.ClickException(
                        "another process has been migrating the embedded ClickHouse store "
                        f"at {where} for {relational.LOCK_WAIT_SECONDS:.0f} s ({path}); "
                        "is it stuck?"
                    ) from None
                time.sleep(0.1)
        yield


def _migrate_clickhouse(settings: Settings) -> list[str]:
    from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

    from errortrack.analytics import ClickHouse
    from errortrack.analytics import migrate as ch_migrate

    store = ClickHouse(settings.resolved_clickhouse_url, cluster=settings.clickhouse_cluster)
    # The driver also logs a refused connection as a warning: the error below says it.
    driver_log = logging.getLogger("clickhouse_connect")
    level = driver_log.level
    driver_log.setLevel(logging.ERROR)
    try:
        return ch_migrate.apply(store)
    # OSError: the embedded engine's directory cannot be made (a file in its place,
    # another user's directory), which was mkdir's traceback.
    except (OperationalError, DatabaseError, OSError) as exc:
        raise click.ClickException(
            f"ClickHouse store (ERRORTRACK_CLICKHOUSE_URL): {_root_cause(exc)}"
        ) from None
    finally:
        driver_log.setLevel(level)


@main.command()
@click.option("--from-serve", is_flag=True, hidden=True)
def migrate(from_serve: bool) -> None:
    """Apply pending migrations of the relational and the ClickHouse store."""
    settings = _settings()
    if not from_serve:
        _refuse_if_served(settings)
    try:
        relational_applied, applied = migrate_all(settings)
    except Exception as exc:
        if not _engine_in_use(exc):
            raise
        # The directory chDB refused: ERRORTRACK_CLICKHOUSE_URL may place it outside the
        # data dir, whose own lock was free (else _refuse_if_served said so).
        where = settings.resolved_clickhouse_url.removeprefix("chdb://")
        if from_serve:
            raise click.ClickException(
                f"another process holds the embedded ClickHouse store at {where} "
                "(chDB allows one process per directory); stop it, or give this server "
                "its own ERRORTRACK_DATA_DIR or ERRORTRACK_CLICKHOUSE_URL"
            ) from None
        raise click.ClickException(
            f"the embedded ClickHouse store at {where} is in use by another process "
            "(a running server?); `errortrack serve` applies migrations itself when it starts"
        ) from None
    for store, done in (("relational store", relational_applied), ("clickhouse", applied)):
        click.echo(f"{store}: applied {', '.join(done) if done else 'nothing (up to date)'}")


@main.command()
def check() -> None:
    """Say whether both stores answer."""
    from errortrack.state import AppState

    settings = _settings()
    if not settings.database_url or not settings.clickhouse_url:
        _make_data_dir(settings)  # one line, not AppState's traceback, when it cannot be
    state = AppState.build(settings)
    if settings.embedded_clickhouse and _data_dir_locked(settings):
        # Opening chDB now would fail noisily; the running server is the one to ask.
        failures = state.check_stores(skip_clickhouse=True)
        failures["clickhouse"] = (
            "in use by a running server (embedded mode allows one process); "
            "ask the server's /readyz instead"
        )
    else:
        failures = state.check_stores()
    for store in ("relational", "clickhouse"):
        why = failures.get(store)
        click.echo(f"{store}: {'ok' if why is None else 'FAILED: ' + why}")
    if failures:
        sys.exit(1)


@main.command()
@click.option("--email", required=True, help="Email of the primary user.")
@click.option(
    "--password-file", type=click.File("r"), help="File whose first line is the password."
)
def bootstrap(email: str, password_file: IO[str] | None) -> None:
    """Create the primary user, a global admin. Refused once any user exists."""
    import sqlalchemy as sa

    from errortrack import db
    from errortrack.errors import ErrortrackError
    from errortrack.models import User
    from errortrack.team.users import bootstrap_primary

    settings = _settings()
    upgrade_relational(settings)
    engine = db.make_engine(settings.resolved_database_url)
    factory = db.make_sessionmaker(engine)
    with relational_store_errors(), factory() as session:
        if session.scalar(sa.select(sa.func.count()).select_from(User)):
            click.echo(
                "error: a user already exists; bootstrap only creates the first account", err=True
            )
            sys.exit(1)
    if password_file is not None:
        password = password_file.readline().rstrip("\r\n")
    elif settings.bootstrap_password:
        password = settings.bootstrap_password
    else:
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    try:
        with relational_store_errors(), db.unit_of_work(factory) as session:
            user = bootstrap_primary(session, email=email, password=password)
    except ErrortrackError as exc:
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(1)
    click.echo(f"created primary admin {user.email} (user_id {user.id})")


def _refuse_if_served(settings: Settings) -> None:
    if settings.embedded_clickhouse and _data_dir_locked(settings):
        where = settings.resolved_clickhouse_url.removeprefix("chdb://")
        raise click.ClickException(
            f"the embedded ClickHouse store at {where} is in use by a running server "
            f"(on data dir {settings.data_dir.resolve()}); `errortrack serve` applies "
            "migrations itself when it starts"
        )


def _lock_path(settings: Settings) -> Path:
    return settings.data_dir / "serve.lock"


def _data_dir_locked(settings: Settings) -> bool:
    path = _lock_path(settings)
    if not path.exists():
        return False
    try:
        handle = path.open("a")
    except OSError as exc:  # another user's lock file (a data dir left to another owner)
        raise _lock_unusable(path, exc) from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def _lock_unusable(path: Path, exc: OSError) -> click.ClickException:
    return click.ClickException(
        f"the data dir's lock file {path} cannot be opened: {exc.strerror or exc} "
        "(is the data dir owned by the server's user?)"
    )


class DataDirInUse(Exception):
    """Another server holds the data dir's lock."""


def lock_data_dir(settings: Settings, *, shared: bool = False) -> IO[str]:
    """The data dir's lock, held as long as the returned file is open.

    ``serve`` holds it exclusively in gunicorn's master; a worker of a plain ``gunicorn
    -k asgi 'errortrack.asgi:build()'`` holds it shared (its sibling workers, and the
    worker that replaces it on a reload, run beside it). Either excludes the other.
    """
    private.make_data_dir(settings.data_dir)
    handle = _lock_path(settings).open("a+")
    try:
        fcntl.flock(handle, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise DataDirInUse(
            f"another errortrack server is already running on data dir "
            f"{settings.data_dir.resolve()}; stop it or choose another ERRORTRACK_DATA_DIR"
        ) from None
    return handle


def _take_data_dir(settings: Settings) -> IO[str]:
    """Hold an exclusive lock on the data dir for the server's lifetime.

    The spool and the embedded engine belong to one process; a second server on the
    same directory must stop with a sentence, not a chDB traceback.
    """
    _make_data_dir(settings)
    try:
        return lock_data_dir(settings)
    except DataDirInUse as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise _lock_unusable(_lock_path(settings), exc) from None


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
# Checked before anything runs: --workers 0 started gunicorn with no worker (every request
# hung), and a bad port or --threads 0 failed as a traceback after the migrations.
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--workers", default=None, type=click.IntRange(min=1), help="Worker processes (server mode)."
)
@click.option(
    "--threads",
    default=8,
    show_default=True,
    type=click.IntRange(min=1),
    help="Threads per worker for the management API (ingest runs on the event loop).",
)
def serve(host: str, port: int, workers: int | None, threads: int) -> None:
    """Apply pending migrations, then serve HTTP with gunicorn."""
    settings = _settings()
    lock = _take_data_dir(settings)
    _log_to_stderr(settings.log_level)
    _warn_if_public_url_elsewhere(settings, host, port)
    # chDB's allocator (jemalloc, read from this variable when the worker loads chDB)
    # keeps freed pages for 5 s by default; under ingest each insert frees tens of MB,
    # so the worker's peak RSS grew with that backlog. An explicit value wins.
    os.environ.setdefault("JE_MALLOC_CONF", CHDB_MALLOC_CONF)
    # Migrations run in a child process: chDB must not be opened in the process that
    # forks the workers, and the child releases the engine when it exits. The child is
    # told that the data-dir lock it sees is its parent's.
    done = subprocess.run(
        [sys.executable, "-m", "errortrack", "migrate", "--from-serve"], check=False
    )
    if done.returncode != 0:
        raise click.ClickException("migrations failed; the server was not started")
    if settings.embedded_clickhouse:
        if workers not in (None, 1):
            click.echo(
                "embedded mode (chDB) runs exactly one worker; using 1 with threads", err=True
            )
        workers = 1
    elif workers is None:
        workers = min(4, (os.cpu_count() or 1) * 2)
    _run_gunicorn(
        threads,
        {
            "bind": _bind_address(host, port),
            "workers": workers,
            # One event loop per worker (ingest); see server.py for what runs where.
            "worker_class": "asgi",
            "preload_app": False,
            "timeout": 60,
            "graceful_timeout": 30,
            "accesslog": None,
            # gunicorn's default 4094 bytes answered a plain-text 414 to valid log queries
            # (a 500-character q percent-encodes to 4500 bytes as CJK); 8190 is its maximum.
            "limit_request_line": 8190,
            "loglevel": settings.log_level.lower(),
            # gunicorn's control socket defaults to one path per user, which two servers
            # (or two test runs) would fight over; errortrack does not use it.
            "control_socket_disable": True,
            # Background work (the ingest spool writer) runs in the worker, after fork.
            "post_worker_init": _start_background,
            "worker_exit": _stop_background,
            # Below DEBUG gunicorn calls no pre_request hook at all (its default only
            # logs); setting one would cost every ingest request a call.
            **({"pre_request": _log_request} if settings.log_level == "DEBUG" else {}),
        },
    )
    lock.close()


def _bind_address(host: str, port: int) -> str:
    """gunicorn's ``host:port``, an IPv6 address in brackets: "::" made ":::8000",
    which gunicorn refused after the migrations had run."""
    if host.startswith("unix:"):
        return host  # gunicorn's socket path form; no port
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return f"{host}:{port}"


# Addresses that reach a server listening on every interface from the same machine.
_ANY_HOST = {"0.0.0.0", "::", "[::]", ""}


def _warn_if_public_url_elsewhere(settings: Settings, host: str, port: int) -> None:
    """DSNs and invitation links are built from ERRORTRACK_PUBLIC_URL; left at its
    default while serving elsewhere, they point where nothing listens, and SDKs
    configured from them fail silently."""
    from urllib.parse import urlsplit

    default = Settings.__dataclass_fields__["public_url"].default
    if settings.public_url != default:
        return  # set (to what people reach, which may well differ from the bind address)
    public = urlsplit(default)
    if port == public.port and (host == public.hostname or host in _ANY_HOST):
        return
    logging.getLogger(__name__).warning(
        "ERRORTRACK_PUBLIC_URL is not set: DSNs and invitation links will point at %s, "
        "not at this server on %s:%d; set it to the URL people and SDKs reach",
        default,
        host,
        port,
    )


def _log_to_stderr(level: str) -> None:
    """Send the ``errortrack`` loggers to stderr beside gunicorn's own lines.

    gunicorn configures only its own loggers; without this, INFO lines such as the
    retention pass's "dropped partition ..." would be lost. Workers inherit it at fork.
    """
    handler = logging.StreamHandler()
    handler.setFormatter(
        logging.Formatter("[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s")
    )
    root = logging.getLogger("errortrack")
    root.addHandler(handler)
    root.setLevel(level)


def _log_request(worker: Any, req: Any) -> None:
    """gunicorn's DEBUG line for each request, with an invitation's token left out of
    its path: the path is the credential, and gunicorn's own hook logged it whole."""
    from errortrack.api.errors import redacted_path

    worker.log.debug("%s %s", req.method, redacted_path(req.path))


def _start_background(worker: Any) -> None:
    # Also started by the ASGI lifespan, which comes after this hook; the first start
    # counts (asgi.Lifecycle), and it freezes the start-up objects out of the GC.
    from errortrack import asgi

    assert asgi.lifecycle is not None  # built by load(), before this hook
    asgi.lifecycle.start()


def _stop_background(server: Any, worker: Any) -> None:
    # The lifespan's shutdown has usually flushed the spool already; not on a quick
    # shutdown (SIGINT, SIGQUIT), which skips it. What cannot be inserted is adopted by
    # the next worker or replayed at the next start.
    from errortrack import asgi

    if asgi.lifecycle is not None:
        asgi.lifecycle.stop()


def _run_gunicorn(threads: int, options: dict[str, Any]) -> None:
    from gunicorn.app.base import BaseApplication

    class _Server(BaseApplication):
        def load_config(self) -> None:
            for key, value in options.items():
                self.cfg.set(key, value)

        def load(self) -> Any:
            # Built in the worker, after fork: nothing is opened before.
            from errortrack import asgi

            # serve holds the data dir's lock itself, in this (the master) process.
            return asgi.build(threads, lock_data_dir=False)

    _Server().run()


@main.group()
def spool() -> None:
    """The ingest spool's quarantine of rows ClickHouse refused (docs/INGEST.md)."""


@spool.command()
def requeue() -> None:
    """Insert the quarantined rows again; those still refused stay, with their new error."""
    from errortrack.issues.grouping import GroupingHook
    from errortrack.spool import records
    from errortrack.spool.segments import Spool
    from errortrack.spool.writer import Writer, clickhouse_insert
    from errortrack.state import AppState

    settings = _settings()
    # Checked before anything is built: a data dir that is a file ended in a traceback,
    # and a mistyped one was created, its empty quarantine reported, exit 0 (operations
    # review, thirty-second session).
    if settings.data_dir.is_file():
        raise click.ClickException(
            f"ERRORTRACK_DATA_DIR {settings.data_dir} is a file, not a directory"
        )
    if not settings.data_dir.is_dir():
        raise click.ClickException(
            f"ERRORTRACK_DATA_DIR {settings.data_dir} does not exist: no server has used it, "
            "so there is no quarantine to requeue (is it the server's data dir?)"
        )
    if settings.embedded_clickhouse and _data_dir_locked(settings):
        raise click.ClickException(
            f"the embedded ClickHouse store in {settings.data_dir} is in use by a running "
            "server (embedded mode allows one process); stop it, then requeue"
        )
    state = AppState.build(settings)
    # The server's writer, minus its thread: the spool is never opened, only its
    # quarantine is read.
    grouping = GroupingHook(state.sessions, store=state.clickhouse, clock=state.clock)
    writer = Writer(
        Spool(settings.spool_dir, max_bytes=1, batch_rows=1),
        clickhouse_insert(state.clickhouse),
        hooks={"events": grouping},
    )
    refused = 0
    for table in records.TABLES:
        moved, left = writer.quarantine.requeue(table, writer.reinsert)
        refused += left
        if moved or left:
            click.echo(f"{table}: {moved} re-inserted, {left} still refused")
    if refused:
        # For scripts: the cause is not fixed yet (the errors are in the files).
        sys.exit(1)
    click.echo("quarantine: empty")


def _register_subcommands() -> None:
    from errortrack.auth.cli import token

    main.add_command(token)


_register_subcommands()


if __name__ == "__main__":
    main()
