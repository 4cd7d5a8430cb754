"""Fixtures: every test gets a real relational store and a real chDB store.

- Relational: SQLite by default (a copy of a migrated template file per test), or the
  Postgres named by ERRORTRACK_TEST_DATABASE_URL (migrated once, tables truncated after
  each test). When that variable is set and Postgres does not answer, the run fails: CI
  must not turn a missing Postgres into skipped tests.
- ClickHouse: chDB allows one data dir per process, so the whole run shares one engine.
  Each test gets a migrated database of its own for its duration: a new one, or one a
  finished test left, emptied with TRUNCATE (which also forgets insert-dedup tokens).
  Migrating a new database costs 0.6-1.9 s on a slow 2-core machine, emptying one
  10-30 ms; a database whose tables no longer match the migrations is dropped instead.
"""

from __future__ import annotations

import itertools
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import falcon.testing
import pytest
import sqlalchemy as sa

from errortrack import db, relational
from errortrack.analytics import ClickHouse
from errortrack.analytics import migrate as ch_migrate
from errortrack.app import create_app
from errortrack.config import Settings
from errortrack.models import Base
from errortrack.server import create_server_app
from errortrack.state import AppState
from tests.support import TEST_PG, FrozenClock

os.environ["TZ"] = "UTC"

_databases = itertools.count()


@pytest.fixture(scope="session")
def chdb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chdb")


_emptied: list[ClickHouse] = []


@pytest.fixture
def clickhouse(chdb_dir: Path) -> Iterator[ClickHouse]:
    if _emptied:
        store = _emptied.pop()
    else:
        store = ClickHouse(f"chdb://{chdb_dir}", database=f"test_{next(_databases)}")
        ch_migrate.apply(store)
        _migrated_tables.update(_tables(store))
    yield store
    if _empty(store):
        _emptied.append(store)
    else:
        store.drop_database()


def _empty(store: ClickHouse) -> bool:
    """Truncate every table but the migration record; False when the schema changed."""
    applied = {row[0] for row in store.query_rows(f"SELECT name FROM {ch_migrate.RECORD_TABLE}")}
    if _tables(store) != _migrated_tables or applied != {m.name for m in ch_migrate.load()}:
        return False
    for table in sorted(_migrated_tables - {ch_migrate.RECORD_TABLE}):
        store.command(f"TRUNCATE TABLE `{table}` SYNC")
    return True


# The tables a freshly migrated database holds (filled by the first one made).
_migrated_tables: set[str] = set()


def _tables(store: ClickHouse) -> set[str]:
    return {
        row[0]
        for row in store.query_rows(
            "SELECT name FROM system.tables WHERE database = {db:String}", {"db": store.database}
        )
    }


@pytest.fixture(scope="session")
def relational_template(tmp_path_factory: pytest.TempPathFactory) -> str:
    if TEST_PG:
        engine = sa.create_engine(TEST_PG)
        try:
            with engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        except Exception as exc:
            pytest.exit(f"ERRORTRACK_TEST_DATABASE_URL is set but Postgres fails: {exc}", 3)
        finally:
            engine.dispose()
        relational.upgrade(TEST_PG)
        return TEST_PG
    path = tmp_path_factory.mktemp("sqlite") / "template.sqlite3"
    relational.upgrade(f"sqlite:///{path}")
    return str(path)


@pytest.fixture
def database_url(relational_template: str, tmp_path: Path) -> Iterator[str]:
    if TEST_PG:
        yield TEST_PG
        engine = sa.create_engine(TEST_PG)
        with engine.begin() as conn:
            tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
            conn.execute(sa.text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
        engine.dispose()
        return
    path = tmp_path / "errortrack.sqlite3"
    shutil.copyfile(relational_template, path)
    yield f"sqlite:///{path}"


@pytest.fixture
def engine(database_url: str) -> Iterator[sa.Engine]:
    engine = db.make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock()


@pytest.fixture
def settings(tmp_path: Path, database_url: str, chdb_dir: Path) -> Settings:
    return Settings.from_env(
        {},
        data_dir=tmp_path / "data",
        database_url=database_url,
        clickhouse_url=f"chdb://{chdb_dir}",
    )


@pytest.fixture
def state(
    settings: Settings, engine: sa.Engine, clickhouse: ClickHouse, clock: FrozenClock
) -> AppState:
    return AppState.build(settings, engine=engine, clickhouse=clickhouse, clock=clock)


@pytest.fixture
def app(state: AppState) -> falcon.App:
    return create_app(state=state)


@pytest.fixture
def client(state: AppState) -> falcon.testing.TestClient:
    # The app as served: ingest on the event loop, the management API in a2wsgi's threads.
    return falcon.testing.TestClient(create_server_app(state=state))
