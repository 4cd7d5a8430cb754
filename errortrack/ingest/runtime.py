"""Ingest's long-lived parts, built by the composition root: spool, writer, caches."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from errortrack import db
from errortrack.ingest.auth import KeyCache
from errortrack.ingest.body import BodyBudget
from errortrack.ingest.ratelimit import RateLimiter
from errortrack.ingest.service import Ingest
from errortrack.spool.segments import Spool
from errortrack.spool.writer import Hook, Insert, Writer, clickhouse_insert
from errortrack.state import AppState

# How long a key load's statement may run on PostgreSQL (lock waits included). A key is
# one indexed row; longer means the store is locked or stalled, and the SDK is better
# told 503 (or answered from the key's last answer: auth.STALE_SECONDS).
KEY_LOAD_SECONDS = 5.0


@dataclasses.dataclass
class IngestRuntime:
    ingest: Ingest
    writer: Writer
    bodies: BodyBudget

    def start(self) -> None:
        """Take the spool directory, adopt leftovers and start the writer thread."""
        self.writer.start()

    def stop(self) -> None:
        """Insert what is spooled (as far as ClickHouse allows) and stop the thread."""
        self.writer.stop()


def build(
    state: AppState,
    *,
    insert: Insert | None = None,
    hooks: Mapping[str, Hook] | None = None,
    backoff: tuple[float, float] = (0.2, 5.0),
) -> IngestRuntime:
    """``insert`` replaces the ClickHouse insert (tests inject failures with it)."""
    settings = state.settings
    spool = Spool(
        settings.spool_dir,
        max_bytes=settings.spool_max_bytes,
        batch_rows=settings.writer_batch_rows,
        batch_bytes=settings.writer_batch_bytes,
        min_free_bytes=settings.min_free_bytes,
    )
    ingest = Ingest(
        spool=spool,
        keys=KeyCache(),
        limiter=RateLimiter(settings.rate_limit_per_second),
        # A key load's statement is stopped after KEY_LOAD_SECONDS (a lock on the keys
        # table held ingest requests, and /readyz behind them, for as long as the lock).
        sessions=db.bounded_sessionmaker(state.engine, KEY_LOAD_SECONDS),
        clock=state.clock,
        default_retention_days=settings.retention_days,
        max_event_bytes=settings.max_event_bytes,
        max_container_bytes=settings.max_container_bytes,
    )
    writer = Writer(
        spool,
        insert or clickhouse_insert(state.clickhouse),
        max_age=settings.writer_max_age_ms / 1000,
        hooks=hooks,
        backoff=backoff,
        quarantine_after=settings.writer_quarantine_after,
    )
    return IngestRuntime(ingest, writer, BodyBudget(settings.max_held_body_bytes))
