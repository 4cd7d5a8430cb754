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


@pytest.mark.parametrize(
    ("name", "value"),
    [
        # nan made the retention thread busy-loop; inf and > TIMEOUT_MAX killed it.
        ("ERRORTRACK_RETENTION_INTERVAL_SECONDS", "nan"),
        ("ERRORTRACK_RETENTION_INTERVAL_SECONDS", "inf"),
        ("ERRORTRACK_RETENTION_INTERVAL_SECONDS", "1e12"),
        # Store URLs that can never work, which failed later as long tracebacks.
        ("ERRORTRACK_DATABASE_URL", "sqlitefoo://x"),
        ("ERRORTRACK_DATABASE_URL", "postgresqlX://y"),
        ("ERRORTRACK_DATABASE_URL", "sqlite:///"),
        ("ERRORTRACK_DATABASE_URL", "sqlite:///:memory:"),
        ("ERRORTRACK_CLICKHOUSE_URL", "chdb://"),
        ("ERRORTRACK_CLICKHOUSE_URL", "chdb:relative"),
        ("ERRORTRACK_CLICKHOUSE_URL", "chdb://host/dir"),
        ("ERRORTRACK_CLICKHOUSE_URL", "http://"),
        ("ERRORTRACK_CLICKHOUSE_URL", "https://:8443/db"),
        ("ERRORTRACK_CLICKHOUSE_URL", "http://ch:123456"),
        ("ERRORTRACK_PUBLIC_URL", "http://h:99999"),
        ("ERRORTRACK_PUBLIC_URL", "http://h:0"),
        ("ERRORTRACK_PUBLIC_URL", "http://:80"),
        ("ERRORTRACK_CLICKHOUSE_CLUSTER", "a'b"),
        # int() took these; a setting is written in ASCII digits.
        ("ERRORTRACK_RETENTION_DAYS", "9_0"),
        ("ERRORTRACK_RETENTION_DAYS", "\u0669\u0660"),
        ("ERRORTRACK_DISK_CAP_BYTES", "+5"),
        ("ERRORTRACK_DISK_CAP_BYTES", str(2**63)),
        # The limiter computes in floats: a 401-digit limit made every request a 500.
        ("ERRORTRACK_RATE_LIMIT_PER_SECOND", "1" * 401),
        ("ERRORTRACK_RATE_LIMIT_PER_SECOND", str(10**9 + 1)),
        # DSNs are <scheme>://<key>@<netloc>/...: a user here broke every SDK's DSN.
        ("ERRORTRACK_PUBLIC_URL", "https://user:pw@et.example.com"),
        ("ERRORTRACK_PUBLIC_URL", "https://et.example.com/?x=1"),
        ("ERRORTRACK_PUBLIC_URL", "https://et.example.com/#top"),
        # float() took these, urlsplit any host (operations review, thirty-second session).
        ("ERRORTRACK_RETENTION_INTERVAL_SECONDS", "1_0"),
        ("ERRORTRACK_RETENTION_INTERVAL_SECONDS", "\u0661\u0660"),
        ("ERRORTRACK_QUERY_TIMEOUT_SECONDS", "3e1"),
        ("ERRORTRACK_PUBLIC_URL", "http://exa mple.com"),
        ("ERRORTRACK_PUBLIC_URL", "http://et<x>.example.com"),
        # Path("") is the current directory.
        ("ERRORTRACK_DATA_DIR", ""),
        ("ERRORTRACK_DATA_DIR", "  "),
        # The database name goes into DDL between backticks.
        ("ERRORTRACK_CLICKHOUSE_URL", "http://u:p@ch:8123/a`b"),
        ("ERRORTRACK_CLICKHOUSE_URL", "http://u:p@ch:8123/a/b"),
        ("ERRORTRACK_CLICKHOUSE_URL", "http://u:p@ch:8123/?database=x%60y"),
        ("ERRORTRACK_CLICKHOUSE_URL", "chdb:///srv/ch?database=a'b"),
    ],
)
def test_values_that_could_never_work_are_refused_in_one_line(name, value):
    with pytest.raises(SettingsError, match=f"invalid value for {name}") as caught:
        Settings.from_env({name: value})
    assert "\n" not in str(caught.value)


def test_the_largest_interval_a_thread_can_wait_is_accepted():
    import threading

    s = Settings.from_env({"ERRORTRACK_RETENTION_INTERVAL_SECONDS": "0.5"})
    assert s.retention_interval_seconds == 0.5
    top = str(threading.TIMEOUT_MAX)
    s = Settings.from_env({"ERRORTRACK_RETENTION_INTERVAL_SECONDS": top})
    assert s.retention_interval_seconds == threading.TIMEOUT_MAX


def test_a_cluster_needs_a_clickhouse_server():
    with pytest.raises(SettingsError, match="ERRORTRACK_CLICKHOUSE_CLUSTER") as caught:
        Settings.from_env({"ERRORTRACK_CLICKHOUSE_CLUSTER": "main"})
    assert "\n" not in str(caught.value)
    with pytest.raises(SettingsError, match="ERRORTRACK_CLICKHOUSE_CLUSTER"):
        Settings.from_env(
            {"ERRORTRACK_CLICKHOUSE_URL": "chdb:///srv/ch", "ERRORTRACK_CLICKHOUSE_CLUSTER": "m"}
        )
    s = Settings.from_env(
        {"ERRORTRACK_CLICKHOUSE_URL": "http://ch:8123/et", "ERRORTRACK_CLICKHOUSE_CLUSTER": "m"}
    )
    assert s.clickhouse_cluster == "m"


@pytest.mark.parametrize(
    ("raw", "stored"),
    [
        # SQLAlchemy reads these; urlsplit took "#" or "/" in a password for a fragment
        # or a path, and they were refused though they connect.
        ("sqlite+pysqlite:////srv/x.sqlite3", "sqlite+pysqlite:////srv/x.sqlite3"),
        ("postgresql+psycopg://u:pa#ss@db/et", "postgresql+psycopg://u:pa%23ss@db/et"),
        ("postgresql+psycopg://u:pa/ss@db:5433/et", "postgresql+psycopg://u:pa%2Fss@db:5433/et"),
        ("postgresql://u@db/et?sslmode=require", "postgresql+psycopg://u@db/et?sslmode=require"),
    ],
)
def test_database_urls_are_read_as_sqlalchemy_reads_them(raw, stored):
    from sqlalchemy.engine import make_url

    url = Settings.from_env({"ERRORTRACK_DATABASE_URL": raw}).database_url
    assert url == stored
    assert make_url(url).password == make_url(raw).password


def test_url_schemes_and_hosts_are_stored_lower_case():
    # "HTTPS://..." is https (RFC 3986), and the session cookie's Secure flag and the
    # store checks test the stored scheme.
    s = Settings.from_env(
        {
            "ERRORTRACK_PUBLIC_URL": "HTTPS://Et.Example.COM:8443/Path/",
            "ERRORTRACK_DATABASE_URL": "PostgreSQL+Psycopg://U:Pw@DB.Example/Et",
            "ERRORTRACK_CLICKHOUSE_URL": "CHDB:///srv/CH",
        }
    )
    assert s.public_url == "https://et.example.com:8443/Path"
    assert s.database_url == "postgresql+psycopg://U:Pw@db.example/Et"
    assert s.clickhouse_url == "chdb:///srv/CH"
    assert s.embedded_clickhouse
    assert Settings.from_env({"ERRORTRACK_DATABASE_URL": "SQLite:////srv/A.db"}).database_url == (
        "sqlite:////srv/A.db"
    )


def test_a_plain_postgresql_url_uses_the_installed_driver():
    s = Settings.from_env({"ERRORTRACK_DATABASE_URL": "postgresql://u@db/et"})
    assert s.resolved_database_url == "postgresql+psycopg://u@db/et"


@pytest.mark.parametrize(
    "host",
    [
        "errors.\u092d\u093e\u0930\u0924",
        "errors.\u4e2d\u56fd",
        "e\u0301xample.com",
        "[fe80::1%25eth0]",
        "localhost",
        "example.com.",
    ],
)
def test_public_urls_with_any_real_host_are_accepted(host):
    # Unicode names with combining marks (errors.भारत) were refused by a pattern of
    # Unicode letters (diff review, thirty-second session).
    url = f"https://{host}:8443"
    assert Settings.from_env({"ERRORTRACK_PUBLIC_URL": url}).public_url == url
