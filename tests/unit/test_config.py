from pathlib import Path

import pytest

from errortrack.config import Settings, SettingsError, settings_table


def test_defaults_are_embedded():
    s = Settings.from_env({})
    assert s.data_dir == Path("./data")
    assert s.resolved_database_url.startswith("sqlite:///")
    assert s.resolved_database_url.endswith("data/errortrack.sqlite3")
    assert s.resolved_clickhouse_url.startswith("chdb:///")
    assert s.resolved_clickhouse_url.endswith("data/clickhouse")
    assert s.embedded_clickhouse
    assert s.openapi is False


def test_values_are_parsed():
    s = Settings.from_env(
        {
            "ERRORTRACK_DATA_DIR": "/srv/et",
            "ERRORTRACK_DATABASE_URL": "postgresql+psycopg://u@db/et",
            "ERRORTRACK_CLICKHOUSE_URL": "http://u:p@ch:8123/et",
            "ERRORTRACK_OPENAPI": "1",
            "ERRORTRACK_PUBLIC_URL": "https://et.example.com/",
        }
    )
    assert s.data_dir == Path("/srv/et")
    assert s.resolved_database_url == "postgresql+psycopg://u@db/et"
    assert not s.embedded_clickhouse
    assert s.openapi is True
    assert s.public_url == "https://et.example.com"


def test_unknown_setting_is_named():
    with pytest.raises(SettingsError, match="ERRORTRACK_DATABSE_URL"):
        Settings.from_env({"ERRORTRACK_DATABSE_URL": "sqlite:///x"})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ERRORTRACK_OPENAPI", "maybe"),
        ("ERRORTRACK_DATABASE_URL", "mysql://x"),
        ("ERRORTRACK_CLICKHOUSE_URL", "tcp://x:9000"),
        ("ERRORTRACK_PUBLIC_URL", "not a url"),
        ("ERRORTRACK_LOG_LEVEL", "LOUD"),
    ],
)
def test_bad_value_is_named(name, value):
    with pytest.raises(SettingsError, match=f"invalid value for {name}"):
        Settings.from_env({name: value})


def test_other_variables_are_ignored():
    s = Settings.from_env({"PATH": "/bin", "ERRORTRACK_TEST_DATABASE_URL": "postgresql://x"})
    assert s == Settings.from_env({})


def test_every_setting_is_in_the_readme():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for name, _default, _doc in settings_table():
        assert f"`{name}`" in readme, f"{name} is missing from the README's settings table"
