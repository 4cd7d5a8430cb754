"""Alembic environment: the URL comes from errortrack's settings (or the caller's config)."""

from __future__ import annotations

from typing import Any

from alembic import context
from alembic.util.exc import CommandError
from sqlalchemy import event, text

from errortrack import models  # noqa: F401  (registers every table on Base.metadata)
from errortrack.db import Base, make_engine
from errortrack.relational import migration_lock

config = context.config


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from errortrack.config import Settings

    return Settings.from_env().resolved_database_url


def _record_applied(*, step: Any, **_: Any) -> None:
    """Each revision applied, into the caller's list (``relational.upgrade``): recorded
    under the migration lock, so a process that found the work done names none."""
    applied = config.attributes.get("applied")
    if applied is not None and step.is_upgrade:
        applied.append(step.up_revision_id)


# pg_advisory_lock's key for "running errortrack's migrations" (any constant will do).
MIGRATION_LOCK = 0x6572726F72747261


def _refuse_unless_utf8(connection: Any) -> None:
    """Stop before anything runs on a database that cannot hold every character.

    A LATIN1 database migrated and served, then a project named with an emoji was a 500
    and events titled in Chinese were accepted and quarantined; SQL_ASCII hands psycopg
    bytes, and migrate, bootstrap and serve ended in a traceback. The encoding is fixed
    when the database is created, so one check here (serve, bootstrap and token create
    all migrate first) is enough."""
    encoding = connection.connection.dbapi_connection.info.parameter_status("server_encoding")
    if encoding != "UTF8":
        raise CommandError(
            f"the database's encoding is {encoding}; errortrack needs UTF8 "
            "(CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0)"
        )


def _sqlite_transactions(engine: Any) -> None:
    """Real transactions around DDL on SQLite, SQLAlchemy's documented pysqlite recipe.

    Python's sqlite3 (legacy mode) opens no transaction before DDL, so each CREATE INDEX
    or batch rebuild committed as it ran while ``alembic_version`` moved only at the end:
    a migration stopped part-way (SIGTERM from systemd, Ctrl-C, an OOM kill) left an
    index or an ``_alembic_tmp_*`` table behind, and every later migrate or serve failed
    on "already exists" until someone repaired the file by hand (operations review,
    thirty-second session). With the driver's own handling off and an explicit BEGIN, a
    run's DDL is all or nothing. Foreign keys go off first, outside any transaction (a
    pragma inside one does nothing): a batch rebuild drops a parent table, which would
    otherwise cascade into its children."""

    @event.listens_for(engine, "connect")
    def _driver_autocommit(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        dbapi_conn.execute("PRAGMA foreign_keys=OFF")

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN")


def run_migrations_online(url: str) -> None:
    engine = make_engine(url)
    if engine.dialect.name == "sqlite":
        _sqlite_transactions(engine)
    try:
        with engine.connect() as connection:
            if connection.dialect.name == "postgresql":
                _refuse_unless_utf8(connection)
                # Instances started at once on one database would migrate it side by side and
                # collide (two CREATE TABLE alembic_version): one at a time; the next finds
                # the work done. Held by the session until unlocked or the connection closes.
                # The wait is bounded, in case another instance hangs.
                connection.execute(text("SET lock_timeout = '300s'"))
                connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK})
                # Never queue behind a long transaction holding a lock: fail fast instead.
                connection.execute(text("SET lock_timeout = '5s'"))
                # But no bound on a statement's own work (over a role's or database's
                # default too): an index of 0010 over 40M issues takes longer than the
                # 60 s that was here, so such an instance could never upgrade, and serve
                # never start (operations review, thirty-second session).
                connection.execute(text("SET statement_timeout = 0"))
                # Session-level settings survive the commit; without it SQLAlchemy's autobegun
                # transaction would swallow Alembic's and roll the migration back on close.
                connection.commit()
            context.configure(
                connection=connection,
                target_metadata=Base.metadata,
                render_as_batch=connection.dialect.name == "sqlite",
                compare_type=True,
                on_version_apply=_record_applied,
            )
            with context.begin_transaction():
                context.run_migrations()
                if connection.dialect.name == "sqlite":
                    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                    if broken:
                        raise RuntimeError(f"the migration broke foreign keys: {broken[:5]}")
            if connection.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK})
                connection.commit()

    finally:
        # Closes the connection, so a failed run does not keep the migration lock.
        engine.dispose()


_target = _url()
# SQLite's counterpart of the advisory lock above: a file lock next to the database, held
# across the whole run, also by `alembic upgrade` from the command line (relational.py).
with migration_lock(_target):
    run_migrations_online(_target)
