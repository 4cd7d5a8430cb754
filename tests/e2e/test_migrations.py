"""Both stores' migrations: relational up and down, ClickHouse applied once each."""

import sqlalchemy as sa

from errortrack import relational
from errortrack.analytics import ClickHouse
from errortrack.analytics import migrate as ch_migrate
from errortrack.models import Base
from tests.support import scratch_database

APP_TABLES = {t.name for t in Base.metadata.sorted_tables}


def _tables(url):
    engine = sa.create_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_relational_up_down_up(tmp_path):
    with scratch_database(tmp_path) as url:
        relational.upgrade(url)
        assert _tables(url) == APP_TABLES
        relational.downgrade(url, "base")
        assert _tables(url) == set()
        relational.upgrade(url)
        assert _tables(url) == APP_TABLES


def test_models_match_migrations(tmp_path):
    """Alembic's autogenerate finds nothing to add: the models and migrations agree."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    with scratch_database(tmp_path) as url:
        relational.upgrade(url)
        engine = sa.create_engine(url)
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        engine.dispose()
    assert diff == []


def test_clickhouse_runner_applies_each_file_once(chdb_dir):
    store = ClickHouse(f"chdb://{chdb_dir}", database="test_runner_once")
    try:
        first = ch_migrate.apply(store)
        assert first == [m.name for m in ch_migrate.load()]
        assert ch_migrate.apply(store) == []
        recorded = store.query_rows("SELECT name, count() FROM schema_migrations GROUP BY name")
        assert sorted(recorded) == [(name, 1) for name in first]
        tables = {row[0] for row in store.query_rows("SHOW TABLES")}
        assert {"logs", "events", "spans"} <= tables
    finally:
        store.drop_database()


def test_clickhouse_runner_applies_only_new_files(chdb_dir, tmp_path):
    store = ClickHouse(f"chdb://{chdb_dir}", database="test_runner_new")
    ddl = tmp_path / "ddl"
    ddl.mkdir()
    (ddl / "0001_a.sql").write_text(
        "CREATE TABLE IF NOT EXISTS a (x UInt8) ENGINE = MergeTree ORDER BY x;\n"
    )
    try:
        assert ch_migrate.apply(store, ddl) == ["0001_a"]
        (ddl / "0002_b.sql").write_text("ALTER TABLE a ADD COLUMN IF NOT EXISTS y String;\n")
        assert ch_migrate.apply(store, ddl) == ["0002_b"]
        assert ch_migrate.apply(store, ddl) == []
        cols = [
            row[0]
            for row in store.query_rows(
                "SELECT name FROM system.columns "
                "WHERE database = currentDatabase() "
                "AND table = 'a' ORDER BY position"
            )
        ]
        assert cols == ["x", "y"]
    finally:
        store.drop_database()
