"""Relational store: one SQLAlchemy engine, sessions per unit of work.

SQLite (embedded default) and Postgres (production) share every model and query. Datetimes
are stored as UTC and always come back timezone-aware, whatever the backend.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

log = logging.getLogger(__name__)

T = TypeVar("T")


class UTCDateTime(sa.types.TypeDecorator[dt.datetime]):
    """Timezone-aware UTC datetimes on both backends (SQLite drops the offset)."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)


# The largest id of a relational row: ids are INTEGER, and PostgreSQL's ends at 2^31-1
# (it refuses to compare the column with a larger parameter: a 500, not "not found").
MAX_ID = 2**31 - 1


class Base(DeclarativeBase):
    metadata = sa.MetaData(
        # Named constraints keep Alembic's up and down migrations identical on both backends.
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


# SQLAlchemy puts a failed statement's parameters in its message, and error handlers
# log that message: invitation tokens, CSRF tokens, password hashes and emails reached
# the server log whenever the database refused a write (review, twenty-fifth session).
_QUIET = {"hide_parameters": True}


# Connections besides the API's threads: the spool writer, the retention pass, the key
# loads (ingest.auth's 4 threads) and /readyz's check.
BACKGROUND_CONNECTIONS = 7


def make_engine(url: str, *, api_threads: int = 8) -> Engine:
    """The relational store's engine, its pool sized for ``api_threads`` request threads
    (``serve --threads``) plus the background's: a fixed 10 + 10 ran out under
    ``--threads 32`` and answered 503s while the database had room."""
    pool = {"pool_size": api_threads + BACKGROUND_CONNECTIONS, "max_overflow": 10}
    if url.startswith("sqlite"):
        if not SQLiteDialect_pysqlite._is_url_file_db(sa.engine.make_url(url)):
            pool = {}  # in memory (tests): one connection per thread, nothing to size
        engine = sa.create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, **pool, **_QUIET
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            # WAL lets readers run beside the single writer; foreign keys are off by default.
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    # What the operator wrote in the URL's query (?connect_timeout=60) wins: connect_args
    # would otherwise override it.
    given = sa.engine.make_url(url).query
    defaults = {k: v for k, v in POSTGRES_CONNECT.items() if k not in given}
    engine = sa.create_engine(
        url,
        pool_pre_ping=True,
        connect_args=defaults,
        **pool,
        **_QUIET,
    )

    @event.listens_for(engine, "connect")
    def _iso_dates(dbapi_conn: Any, _record: Any) -> None:
        # psycopg reads timestamptz only in the ISO DateStyle: a database (or role) set to
        # another ('SQL, DMY') made every API read of a time a 500. The server reports the
        # style on connecting, so the usual case costs nothing. A session-level SET, not
        # the `options` startup parameter, which PgBouncer refuses; PgBouncer tracks
        # DateStyle per client and restores it on whichever server connection it lends.
        style = dbapi_conn.info.parameter_status("DateStyle") or ""
        if not style.startswith("ISO"):
            with dbapi_conn.cursor() as cur:
                cur.execute("SET DateStyle TO 'ISO'")
            dbapi_conn.commit()

    return engine


# libpq's connection settings for PostgreSQL. Without them a store behind a network
# partition (packets dropped, a frozen host) held every request that touched it, and
# each /readyz probe, for as long as TCP retransmits: about 15 minutes.
POSTGRES_CONNECT = {
    # Seconds to connect and authenticate; libpq waits for ever by default.
    "connect_timeout": 5,
    # A pooled connection whose peer vanished is found dead within ~25 s of silence
    # (10 s idle, then 3 probes 5 s apart), instead of the kernel's 2 hours.
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    # Sent data left unacknowledged this long (ms) closes the connection: keepalives
    # do not run while a query waits for its acknowledgement.
    "tcp_user_timeout": 30_000,
}


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def bounded_sessionmaker(engine: Engine, seconds: float) -> sessionmaker[Session]:
    """Sessions whose transactions on PostgreSQL stop any statement running longer than
    ``seconds`` (lock waits included): what API requests use (0: no bound). Set with
    ``SET LOCAL`` as each transaction begins, one statement more per transaction: it ends
    with the transaction, so background work on the same engine (the ingest writer's
    grouping, the retention pass) and the CLI stay unbounded, it holds behind PgBouncer
    in transaction mode (which refuses the ``options`` startup parameter, so a
    connection-wide setting stopped every connection), and it leaves the URL's own
    ``options`` alone. SQLite has no statement timeout."""
    factory = make_sessionmaker(engine)
    if engine.dialect.name == "postgresql" and seconds > 0:
        # An integer in ms: PostgreSQL takes up to 2^31-1 (config.py caps the setting).
        timeout = f"SET LOCAL statement_timeout = {max(1, round(seconds * 1000))}"

        @event.listens_for(factory, "after_begin")
        def _bound(_session: Session, _transaction: Any, connection: sa.Connection) -> None:
            connection.exec_driver_sql(timeout)

    return factory


# Values per IN list. An IN list binds one parameter per value: PostgreSQL's protocol
# takes at most 65,535 in a statement (SQLite's limit is a build option, 32,766
# upstream), and one ingest batch can hold any number of issues (one envelope of 70,000
# events: the grouping failed on every retry and the writer stopped all ingest behind it).
IN_LIST = 10_000


def in_parts(values: Sequence[T], size: int = IN_LIST) -> Iterator[Sequence[T]]:
    """``values`` in slices of at most ``size``, one IN list each."""
    for start in range(0, len(values), size):
        yield values[start : start + size]


_BOOKKEEPING = "errortrack.bookkeeping"


def after_commit(session: Session, statement: sa.Executable) -> None:
    """Queue a bookkeeping write (a token's or a login's last use) for after the
    session's own transaction commits. It runs in a transaction of its own that may
    fail without failing the request: written inside the request's, it turned every
    read made with a token or a cookie into a 503 while the database refused writes
    (a standby after a failover, a full disk), though nothing else in it wrote."""
    session.info.setdefault(_BOOKKEEPING, []).append(statement)


def commit(session: Session) -> None:
    """Commit the session's transaction, then its queued bookkeeping (best effort)."""
    session.commit()
    statements = session.info.pop(_BOOKKEEPING, None)
    if not statements:
        return
    try:
        for statement in statements:
            session.execute(statement)
        session.commit()
    except sa.exc.SQLAlchemyError as ex:  # refused, or no connection (a full pool)
        session.rollback()
        since = _refused.due(_monotonic())
        if since is not None:
            more = f" ({since} more since the last warning)" if since else ""
            name = type(getattr(ex, "orig", None) or ex).__name__
            log.warning("last-use times not recorded: %s%s", name, more)


class _Refused:
    """When a refused bookkeeping write is worth a warning: once a minute. Every request
    with a token or a cookie retries its write while the store refuses (nothing was
    recorded, so its use is still due), and a busy client logged a line per request."""

    EVERY = 60.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: float | None = None
        self._quiet = 0

    def due(self, now: float) -> int | None:
        """None: stay quiet; else how many refusals went unsaid since the last warning."""
        with self._lock:
            if self._last is not None and now - self._last < self.EVERY:
                self._quiet += 1
                return None
            quiet, self._quiet, self._last = self._quiet, 0, now
            return quiet


_refused = _Refused()
_monotonic = time.monotonic


@contextmanager
def unit_of_work(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One transaction: committed when the block succeeds, rolled back otherwise."""
    session = factory()
    try:
        yield session
        commit(session)
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def ping(engine: Engine) -> str:
    """Raise when the store does not answer; else "ok", or "read-only" for a PostgreSQL
    that refuses writes (a standby after a failover, default_transaction_read_only):
    the API answers its writes 503 then, while reads and ingest with known keys go on."""
    with engine.connect() as conn:
        if engine.dialect.name != "postgresql":
            conn.execute(sa.text("SELECT 1"))
            return "ok"
        read_only = conn.scalar(sa.text("SELECT current_setting('transaction_read_only')"))
        return "read-only" if read_only == "on" else "ok"
