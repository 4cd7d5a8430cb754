"""Fixtures: every test gets a real relational store and a real chDB store.

- Relational: SQLite by default (a copy of a migrated template file per test), or the
  Postgres named by ERRORTRACK_TEST_DATABASE_URL (migrated once, tables truncated after
  each test). When that variable is set and Postgres does not answer, the run fails: CI
  must not turn a missing Postgres into skipped tests.
- ClickHouse: chDB allows one data dir per process, so the whole run shares one engine
  and each test gets its own database in it.
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
from errortrack.state import AppState
from tests.support import TEST_PG, FrozenClock

os.environ["TZ"] = "UTC"

_databases = itertools.count()


@pytest.fixture(scope="session")
def chdb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chdb")


@pytest.fixture
def clickhouse(chdb_dir: Path) -> Iterator[ClickHouse]:
    store = ClickHouse(f"chdb://{chdb_dir}", database=f"test_{next(_databases)}")
    ch_migrate.apply(store)
    yield store
    store.drop_database()


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
def client(app: falcon.App) -> falcon.testing.TestClient:
    return falcon.testing.TestClient(app)
