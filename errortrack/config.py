"""Settings: the only reader of the environment.

Every setting is an ``ERRORTRACK_<NAME>`` variable with a type, a default and a one-line
comment. An unknown ``ERRORTRACK_*`` variable or a value that does not parse stops
start-up with one line naming it (``SettingsError``), because a typo in a deployment
should fail loudly rather than silently fall back to a default.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, parse_qs, urlsplit

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from errortrack.api.client_ip import Network, parse_trusted_proxies
from errortrack.spool.segments import BATCH_BYTES

PREFIX = "ERRORTRACK_"

# Variables that belong to the project's tools rather than to the server; they are
# accepted so that a server started from a test or a bootstrap shell does not refuse them.
TOOL_VARIABLES = frozenset({"ERRORTRACK_TEST_DATABASE_URL"})


class SettingsError(Exception):
    """A setting is unknown or its value is invalid; the message is one line."""


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError("expected one of 1/0, true/false, yes/no, on/off")


# Byte counts and row counts beyond this are typos; the stores and the spool keep sizes
# in signed 64-bit integers.
_MAX_INT = 2**63 - 1


def _int(raw: str) -> int:
    # int() also takes "9_0", a sign and other scripts' digits; a setting is ASCII digits.
    text = raw.strip()
    if not re.fullmatch(r"[0-9]+", text):
        raise ValueError("expected a whole number written in digits 0-9")
    value = int(text)
    if value > _MAX_INT:
        raise ValueError(f"expected at most {_MAX_INT}")
    return value


def _positive_int(raw: str) -> int:
    value = _int(raw)
    if value <= 0:
        raise ValueError("expected a whole number above 0")
    return value


def _non_negative_int(raw: str) -> int:
    return _int(raw)


# A billion items a second per project is far beyond any instance; a larger value (the
# limiter computes in floats) made every ingest request a 500.
MAX_RATE_LIMIT = 10**9


def _rate_limit(raw: str) -> int:
    value = _int(raw)
    if value > MAX_RATE_LIMIT:
        raise ValueError(f"expected at most {MAX_RATE_LIMIT} (0 = no limit)")
    return value


# Ten years, for the instance default and a project's override alike. The tables' TTL is
# `toDateTime(time) + retention_days`, and DateTime ends in 2106: from 2026 about 29,000
# days wrap it into the past, and ClickHouse then dropped every row as it was written.
MAX_RETENTION_DAYS = 3650


def _retention_days(raw: str) -> int:
    value = _int(raw)
    if not 1 <= value <= MAX_RETENTION_DAYS:
        raise ValueError(f"expected a number of days from 1 to {MAX_RETENTION_DAYS}")
    return value


def _float(raw: str) -> float:
    # float() also takes "1_0", other scripts' digits, "1e3", "inf" and "nan"; a setting
    # is ASCII digits with a decimal point at most (as README says; operations review,
    # thirty-second session).
    text = raw.strip()
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)?|\.[0-9]+", text):
        raise ValueError("expected a number written in digits 0-9, with a '.' at most")
    return float(text)


def _positive_float(raw: str) -> float:
    value = _float(raw)
    # nan passes every comparison (a busy loop); inf and values above TIMEOUT_MAX make
    # Event.wait raise, which stopped the thread waiting on them.
    if not (math.isfinite(value) and 0 < value <= threading.TIMEOUT_MAX):
        raise ValueError(f"expected a number above 0, at most {threading.TIMEOUT_MAX:.0f}")
    return value


# PostgreSQL's statement_timeout ends at 2^31-1 ms: a larger value (legal here until
# the twenty-first session's review) made every connection of the serving process fail.
MAX_QUERY_TIMEOUT = 2_147_483


def _query_timeout(raw: str) -> float:
    value = _float(raw)
    if not (math.isfinite(value) and 0 <= value <= MAX_QUERY_TIMEOUT):
        raise ValueError(f"expected seconds from 0 (no limit) to {MAX_QUERY_TIMEOUT}")
    return value


def _split(raw: str) -> SplitResult:
    parts = urlsplit(raw)
    try:
        parts.port  # noqa: B018  (raises for a port out of range or not a number)
    except ValueError:
        # Not urllib's text: for a password holding an unescaped "/", "#" or "?" it quotes
        # the password as the port.
        raise ValueError(
            "invalid port in URL (a password holding '/', '#', '?' or '@' must be percent-encoded)"
        ) from None
    return parts


def _normalised(raw: str, parts: SplitResult, scheme: str = "") -> str:
    # The scheme and host are case-insensitive (RFC 3986), but the rest of the code tests
    # schemes with string prefixes ("https:" for the Secure cookie, "chdb://", "sqlite"):
    # stored lower-case, "HTTPS://..." means https everywhere. Rebuilt from the raw text,
    # as urlunsplit would turn "sqlite:///x" into "sqlite:/x".
    rest = raw.strip()[len(parts.scheme) :]
    if rest.startswith("://"):
        userinfo, at, host = parts.netloc.rpartition("@")
        rest = f"://{userinfo}{at}{host.lower()}{rest[3 + len(parts.netloc) :]}"
    return (scheme or parts.scheme) + rest


_DATABASE_HELP = "expected sqlite:///<path> or postgresql+psycopg://user@host/db"


_DATABASE_DRIVERS = {"sqlite", "sqlite+pysqlite", "postgresql", "postgresql+psycopg"}


def _database_url(raw: str) -> str:
    # Read as SQLAlchemy reads it, not with urlsplit: a password may hold "#", "/" or "?"
    # unescaped, which urlsplit took for a fragment or a path (and then a bad port).
    try:
        url = make_url(raw.strip())
    except (ArgumentError, ValueError):
        raise ValueError(_DATABASE_HELP) from None
    driver = url.drivername.lower()
    if driver not in _DATABASE_DRIVERS:
        raise ValueError(_DATABASE_HELP)
    if driver.startswith("sqlite") and url.database in {None, "", ":memory:"}:
        # In-memory: every connection gets its own empty database, so the migrated one is
        # not the one the server uses.
        raise ValueError(_DATABASE_HELP + " (a file, not in-memory)")
    if url.port is not None and not 1 <= url.port <= 65535:
        raise ValueError(f"invalid port in URL: {url.port}")
    # SQLAlchemy's default Postgres driver is psycopg2, which is not installed.
    url = url.set(
        drivername="postgresql+psycopg" if driver == "postgresql" else driver,
        host=url.host.lower() if url.host else url.host,
    )
    return url.render_as_string(hide_password=False)


def _clickhouse_url(raw: str) -> str:
    parts = _split(raw)
    if parts.scheme == "chdb":
        # The directory is the path; a host part or a relative path ("chdb:data") was
        # silently read as a directory under the current one.
        if parts.netloc or not parts.path.startswith("/"):
            raise ValueError("expected chdb:///<absolute dir>")
    elif parts.scheme not in {"http", "https"} or not parts.hostname:
        raise ValueError("expected chdb:///<dir> or http(s)://user:pass@host:8123/db")
    # The database (the path of a server URL, or ?database=) goes into DDL between
    # backticks: a name with a backtick, a quote or a "/" broke every statement.
    names = parse_qs(parts.query).get("database", [])
    if parts.scheme != "chdb":
        names.append(parts.path.strip("/"))
    for name in names:
        if name and not re.fullmatch(r"[A-Za-z0-9_-]+", name):
            raise ValueError("expected a database name of letters, digits, '_' and '-'")
    return _normalised(raw, parts)


def _cluster(raw: str) -> str:
    # Rendered into DDL between quotes (ON CLUSTER '...'); real names are identifiers.
    if raw and not re.fullmatch(r"[A-Za-z0-9_.-]+", raw):
        raise ValueError("expected a cluster name of letters, digits, '_', '.', '-'")
    return raw


# A DNS name as sent (ASCII letters, digits, hyphens, underscores, dots: an IDN is
# checked in its xn-- form), an IPv4 address, or an IPv6 address (urlsplit strips its
# brackets), perhaps with a zone.
_HOST = re.compile(r"[A-Za-z0-9_.-]+|[0-9A-Fa-f:.]+(%[A-Za-z0-9_.-]+)?")


def _host_ok(host: str) -> bool:
    # An IDN goes through Python's IDNA codec first: a pattern of Unicode letters (\w)
    # refused names with combining marks, such as errors.भारत (diff review).
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    return _HOST.fullmatch(ascii_host) is not None


def _url(raw: str) -> str:
    parts = _split(raw)
    if parts.scheme not in {"http", "https"} or not parts.hostname or parts.port == 0:
        raise ValueError("expected an http(s)://host[:port] URL")
    if not _host_ok(parts.hostname):
        # urlsplit takes any characters in a host: "exa mple.com" went into every DSN
        # and invitation link (operations review, thirty-second session).
        raise ValueError(f"{parts.hostname!r} is not a host name or IP address")
    if "@" in parts.netloc or parts.query or parts.fragment:
        # DSNs are built as <scheme>://<key>@<netloc><path>/<project>: a user and password
        # here made SDKs read the key as "<key>@user" (every request a 401) and published
        # the password; a query or fragment would end up inside DSNs and invite links.
        raise ValueError("expected an http(s)://host[:port][/path] URL without user, query or #")
    return _normalised(raw, parts).rstrip("/")


def _data_dir(raw: str) -> Path:
    # Path("") is the current directory: an empty value (a template's unfilled variable)
    # spread the stores and the spool over wherever the server was started.
    if not raw.strip():
        raise ValueError("expected a directory (leave the variable unset for ./data)")
    return Path(raw)


def _log_level(raw: str) -> str:
    value = raw.strip().upper()
    if value not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
        raise ValueError("expected DEBUG, INFO, WARNING or ERROR")
    return value


def _setting(default: Any, parse: Callable[[str], Any], doc: str) -> Any:
    return dataclasses.field(default=default, metadata={"parse": parse, "doc": doc})


@dataclasses.dataclass(frozen=True)
class Settings:
    # Where the embedded stores (SQLite file, chDB directory) and the ingest spool live.
    data_dir: Path = _setting(Path("./data"), _data_dir, "Directory for embedded stores and spool")
    # Empty means: SQLite file <data_dir>/errortrack.sqlite3.
    database_url: str = _setting(
        "", _database_url, "Relational store; default SQLite in the data dir"
    )
    # Empty means: chDB (in-process ClickHouse) in <data_dir>/clickhouse.
    clickhouse_url: str = _setting(
        "", _clickhouse_url, "Analytics store; default chDB in the data dir"
    )
    # When set, ClickHouse DDL is rendered ON CLUSTER with Replicated + Distributed engines.
    clickhouse_cluster: str = _setting("", _cluster, "ClickHouse cluster name (server mode only)")
    # Base URL that people and SDKs reach; used in DSNs and invite links.
    public_url: str = _setting("http://127.0.0.1:8000", _url, "Public base URL")
    # The OpenAPI document and /docs are off unless asked for.
    openapi: bool = _setting(False, _bool, "Serve /api-docs/openapi.json and /docs")
    log_level: str = _setting("INFO", _log_level, "Server log level")
    # Read by `errortrack bootstrap` when no --password-file is given.
    bootstrap_password: str = _setting("", str, "Password for `errortrack bootstrap`")
    # Days a log, event or span is kept unless its project overrides it (docs/RETENTION.md):
    # 90 days covers a quarter of history, Sentry's own default for errors.
    retention_days: int = _setting(90, _retention_days, "Default retention in days")
    # How often the serving process runs its retention pass (expired partitions, disk cap).
    retention_interval_seconds: float = _setting(
        3600.0, _positive_float, "Seconds between retention passes"
    )
    # Instance-wide cap on ClickHouse bytes on disk; over it the oldest days go first. 0 = off.
    disk_cap_bytes: int = _setting(0, _non_negative_int, "ClickHouse disk cap in bytes (0 = off)")
    # Ingest: cap on one request body after decompression (Sentry allows 200 MiB per
    # envelope; 20 MiB keeps a body's rows well under the RSS budget).
    max_body_bytes: int = _setting(20 * 2**20, _positive_int, "Ingest body cap in bytes (413)")
    # Ingest: cap on one envelope with the payloads of items that are not stored
    # (attachments, replays, profiles), which do not count towards max_body_bytes
    # (ingest/skim.py): an event sent with a 25 MiB attachment was lost with it. 100 MiB
    # is sentry.io's limit for an event's attachments.
    max_envelope_bytes: int = _setting(
        100 * 2**20, _positive_int, "Ingest envelope cap in bytes, unstored items included (413)"
    )
    # Ingest: cap on the bodies one worker's ingest requests hold at once, as received and
    # decompressed (503 over it; a request alone always goes on). The event loop takes any
    # number of connections: 40 that sent 19 MiB each and stalled held +860 MB.
    max_held_body_bytes: int = _setting(
        256 * 2**20, _positive_int, "Cap on request bodies held at once per worker (503)"
    )
    # Ingest: cap on one error event or transaction after decompression, Sentry's 1 MiB:
    # the whole payload is stored and sent back in every events page, and an SDK sent an
    # 18 MB event (100 breadcrumbs of 50 KB) that was stored whole (SDK review).
    max_event_bytes: int = _setting(2**20, _positive_int, "Cap on one event in bytes (413)")
    # Ingest: cap on an envelope's log items together, and on its span items together,
    # after decompression: Relay's max_container_size, 12 MiB. A log item's rows take
    # ~8 times its bytes at their peak (one 21.7 MiB item of 500,000 attributes: 0.75 s
    # and +167 MB; 12.5 MiB: 0.40 s, +94 MB). SDKs send at most 100 logs or 1,000 spans
    # (~5 MB) per item, and a transaction's gen_ai spans in one item beside it.
    max_container_bytes: int = _setting(
        12 * 2**20, _positive_int, "Cap on an envelope's log (or span) items in bytes (413)"
    )
    # Ingest spool: above this many bytes of rows not yet in ClickHouse, ingest answers 503.
    # Per worker (each has a spool of its own): N workers may hold N times this on disk.
    spool_max_bytes: int = _setting(
        2**30, _positive_int, "Spool size cap in bytes per worker (503; N workers, N times)"
    )
    # Ingest: below this much free space on the spool's filesystem (at most 5 % of it),
    # ingest answers 503, so that retention, the cleanup API and a restart keep the room
    # they need (a disk filled to the last byte could not be freed by errortrack).
    min_free_bytes: int = _setting(
        256 * 2**20, _non_negative_int, "Free disk space ingest leaves (503 below; 0 = off)"
    )
    # The writer inserts a batch at this many rows or at WRITER_MAX_AGE_MS, whichever first.
    # Bigger inserts make fewer, bigger parts, so merges rewrite each row fewer times
    # (about half of the engine's CPU per log is merging): 20k rows gave +10 % logs/s end
    # to end over 10k, peak RSS 579-610 MB against 513-598 (target 700). Each insert holds
    # its parts in memory while it builds them, which is why this was 10k until the tenth
    # session: then 20k peaked at 690-731 MB, before merges became vertical (clickhouse/0011)
    # (bench/RESULTS.md, fourth and tenth sessions).
    writer_batch_rows: int = _setting(20_000, _positive_int, "Rows per ClickHouse insert")
    # ... or at this many spooled bytes, if that comes first: the writer holds a batch in
    # memory several times over while it inserts it (a 615 MB batch of 900 KB events peaked
    # at 4.7 GB; 32 MiB: bench/RESULTS.md, thirty-first session). A 20k-row batch of
    # the benchmark's logs is ~26 MiB, so logs still go by rows; events and spans may go by bytes.
    writer_batch_bytes: int = _setting(
        BATCH_BYTES, _positive_int, "Spooled bytes per ClickHouse insert (rows or bytes first)"
    )
    writer_max_age_ms: int = _setting(1000, _positive_int, "Max age in ms of a spooled batch")
    # A batch refused this many times in a row with a data error (a value ClickHouse cannot
    # store) is bisected and its bad rows quarantined (docs/INGEST.md, "Poison rows");
    # a few tries first, so that one odd failure never sends rows aside.
    writer_quarantine_after: int = _setting(
        5, _positive_int, "Data-error failures of a batch before its bad rows are quarantined"
    )
    # How long one statement of an API request may run: ClickHouse's max_execution_time on
    # the request's reads, PostgreSQL's statement_timeout on its relational statements
    # (SQLite has none; its lock waits end at busy_timeout, 30 s). Over it the request
    # answers 503 query_timeout. Without a bound a few slow log searches held every API
    # thread, and a lock held by an operator's psql session held requests for ever.
    query_timeout_seconds: float = _setting(
        30.0, _query_timeout, "Seconds one API query may run (503 query_timeout); 0 = no limit"
    )
    # Memory one ClickHouse read of an API request may use (max_memory_usage; 503
    # query_memory past it). With chDB the engine's memory is the worker's: a viewer's log
    # page of 1 MB span ids, a search's deep page or a large trace took it to 2-5 GB (API
    # review, thirty-first session), and an OOM kill took ingest down with it.
    query_max_memory_bytes: int = _setting(
        2**30, _non_negative_int, "Memory one API ClickHouse read may use (503); 0 = no limit"
    )
    # Accepted items per second per project (a log counts once per log line); 0 = no limit.
    rate_limit_per_second: int = _setting(0, _rate_limit, "Ingest items/s per project")
    # Reverse proxies / load balancers (addresses or CIDR networks) whose X-Forwarded-For
    # names the client, for the login lockout's key (api/client_ip.py). Empty trusts none:
    # the header is then ignored, as any client can send it.
    trusted_proxies: tuple[Network, ...] = _setting(
        (), parse_trusted_proxies, "Proxies whose X-Forwarded-For is believed (login lockout)"
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        env = os.environ if environ is None else environ
        known = {f"{PREFIX}{f.name.upper()}": f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for name in sorted(env):
            if not name.startswith(PREFIX) or name in TOOL_VARIABLES:
                continue
            field = known.get(name)
            if field is None:
                raise SettingsError(f"unknown setting {name}; see the README's settings table")
            try:
                values[field.name] = field.metadata["parse"](env[name])
            except ValueError as exc:
                raise SettingsError(f"invalid value for {name}: {exc}") from None
        values.update(overrides)
        settings = cls(**values)
        if settings.clickhouse_cluster and settings.embedded_clickhouse:
            raise SettingsError(
                f"{PREFIX}CLICKHOUSE_CLUSTER needs a ClickHouse server "
                f"({PREFIX}CLICKHOUSE_URL=http(s)://...); embedded chDB has no cluster"
            )
        return settings

    # Derived values: computed, never stored, so they cannot drift from their inputs.
    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir.resolve() / 'errortrack.sqlite3'}"

    @property
    def resolved_clickhouse_url(self) -> str:
        return self.clickhouse_url or f"chdb://{(self.data_dir / 'clickhouse').resolve()}"

    @property
    def embedded_clickhouse(self) -> bool:
        return self.resolved_clickhouse_url.startswith("chdb://")

    @property
    def spool_dir(self) -> Path:
        return self.data_dir / "spool"


def settings_table() -> list[tuple[str, str, str]]:
    """(variable, default, description) rows for the README table."""
    rows = []
    for f in dataclasses.fields(Settings):
        default = f.default
        shown = str(default) if default not in ("", None, ()) else "(empty)"
        rows.append((f"{PREFIX}{f.name.upper()}", shown, f.metadata["doc"]))
    return rows
