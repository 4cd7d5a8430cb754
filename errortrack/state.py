"""What the composition root builds: settings, stores and the clock, shared by all fronts."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from errortrack import db, private
from errortrack.analytics import ClickHouse
from errortrack.config import Settings

if TYPE_CHECKING:
    from errortrack.ingest.runtime import IngestRuntime

Clock = Callable[[], dt.datetime]


class Background(Protocol):
    """Work beside requests (the ingest writer, ...): started after fork, stopped on exit."""

    def start(self) -> None: ...
    def stop(self) -> None: ...


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# How far back the wall clock may step (NTP's small corrections) without a time recorded
# just before looking as if it had been recorded while the clock was ahead.
CLOCK_SLACK = dt.timedelta(minutes=5)


def set_ahead(expires_at: dt.datetime, now: dt.datetime, lifetime: dt.timedelta) -> bool:
    """Whether an expiry lies further than its lifetime (and CLOCK_SLACK) away: it was set
    while the clock was ahead, and counts as expired (a login made a year ahead lived a
    year once the clock was put right)."""
    return expires_at > now + lifetime + CLOCK_SLACK


def due(last: dt.datetime | None, now: dt.datetime, every: dt.timedelta) -> bool:
    """Whether a last-used time written at most ``every`` is to be written now: never
    written, ``every`` gone by, or recorded ahead of now (the clock stepped back: it
    stayed frozen there, as "at most once a minute" saw a negative gap)."""
    return last is None or not dt.timedelta(0) <= now - last < every


@dataclasses.dataclass
class AppState:
    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    clickhouse: ClickHouse
    clock: Clock = utc_now
    # Spool, writer, key cache and rate limiter; built by create_app unless a test
    # passes its own (e.g. with a failing insert) before calling create_app.
    ingest: IngestRuntime | None = None
    # Started by the gunicorn worker after fork (cli.py hooks) or by tests, never at import.
    background: list[Background] = dataclasses.field(default_factory=list)

    @functools.cached_property
    def api_clickhouse(self) -> ClickHouse:
        """The analytics store as API requests use it: each read stopped after
        ``query_timeout_seconds`` (503 query_timeout), so slow searches cannot hold
        every API thread, and past ``query_max_memory_bytes`` (503 query_memory), so that
        one read cannot take the worker's memory (with chDB, the engine's is the worker's).
        Background work (writer, retention) uses ``clickhouse``."""
        timeout, memory = self.settings.query_timeout_seconds, self.settings.query_max_memory_bytes
        if not timeout and not memory:
            return self.clickhouse
        return self.clickhouse.bounded(timeout, memory)

    @functools.cached_property
    def api_sessions(self) -> sessionmaker[Session]:
        """Relational sessions as API requests use them: on PostgreSQL each statement is
        stopped after ``query_timeout_seconds`` (``db.bounded_sessionmaker``). Background
        work and the CLI use ``sessions``, unbounded."""
        return db.bounded_sessionmaker(self.engine, self.settings.query_timeout_seconds)

    def start_background(self) -> None:
        for task in self.background:
            task.start()

    def stop_background(self) -> None:
        for task in reversed(self.background):
            task.stop()

    @classmethod
    def build(
        cls,
        settings: Settings,
        *,
        engine: Engine | None = None,
        clickhouse: ClickHouse | None = None,
        clock: Clock = utc_now,
        api_threads: int = 8,
    ) -> AppState:
        if not settings.database_url or not settings.clickhouse_url:
            # The embedded defaults live in the data dir; create it on first start.
            private.make_data_dir(settings.data_dir)
        engine = engine or db.make_engine(settings.resolved_database_url, api_threads=api_threads)
        timeout = settings.query_timeout_seconds
        clickhouse = clickhouse or ClickHouse(
            settings.resolved_clickhouse_url,
            cluster=settings.clickhouse_cluster,
            # A ClickHouse server's reads end at the query timeout (503 query_timeout), not
            # at the HTTP client's own read timeout first (503 unavailable).
            receive_timeout=max(60.0, timeout + 5) if timeout else 300.0,
        )
        return cls(settings, engine, db.make_sessionmaker(engine), clickhouse, clock)

    def check_stores(self, *, skip_clickhouse: bool = False) -> dict[str, str]:
        """Store name -> why it does not answer; empty when both answer."""
        failures: dict[str, str] = {}
        probes: list[tuple[str, Callable[[], object]]] = [
            ("relational", lambda: db.ping(self.engine))
        ]
        if not skip_clickhouse:
            probes.append(("clickhouse", self.clickhouse.ping))
        for name, ping in probes:
            try:
                ping()
            except Exception as exc:  # any failure to answer means "not ready"
                failures[name] = one_line(exc)
        return failures


def one_line(exc: BaseException) -> str:
    """An error in one line of at most 200 characters: its message's first line."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]
