"""The raw reference shared by the log benchmarks: ingest's spooled rows, inserted into
chDB as the writer inserts them, back to back for a fixed time."""

from __future__ import annotations

import datetime as dt
import multiprocessing
import resource
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from bench.logdata import envelope_logs
from errortrack.ingest.envelope import parse
from errortrack.ingest.items import ItemContext
from errortrack.ingest.logs import handle_log
from errortrack.spool.writer import INSERT_SETTINGS
from tests.ingest_support import log_envelope

T = TypeVar("T")


def in_child(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a new (spawned) process, for its result: chDB opens one directory
    per process, so each run into a fresh directory needs a process of its own."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def log_envelopes(count: int, logs: int = 100, spread_days: float = 0) -> list[bytes]:
    """``count`` distinct envelopes of ``logs`` realistic logs each (bench/logdata.py),
    their timestamps spread over the last ``spread_days`` days."""
    return [
        log_envelope(envelope_logs(logs, seed=i, spread_days=spread_days)) for i in range(count)
    ]


def spooled_lines(bodies: list[bytes]) -> list[bytes]:
    """The JSONEachRow lines ingest spools for these log envelopes, one per log."""
    ctx = ItemContext(1, dt.datetime.now(dt.UTC), 90, {})
    return b"".join(
        handle_log(parse(body).items[0][1], {}, ctx).log_lines for body in bodies
    ).splitlines(keepends=True)


def batches(lines: list[bytes], rows: int) -> list[bytes]:
    return [b"".join(lines[i : i + rows]) for i in range(0, len(lines), rows)]


def sustained(
    client: Any, blocks: list[bytes], seconds: float, table: str = "logs"
) -> tuple[int, float, float]:
    """Insert ``blocks`` in turn, one raw insert each, for ``seconds`` without a pause:
    (rows inserted, seconds taken, CPU seconds of this process meanwhile: the insert
    and the engine's background merges).

    The writer's settings exactly, single-threaded parsing included: it is also the
    engine's faster choice here. Parallel parsing (the engine's default), which the
    reference used until the ninth session, measured 62-67 k against 73-76 k rows/s
    alternating (bench/RESULTS.md, ninth session), so it made the ratio look better than
    it was."""
    rows = n = 0
    # Tokens of its own per call: a second call in one process would reuse the first's,
    # and the engine would drop every block as a duplicate (the logs table's
    # non_replicated_deduplication_window) after doing nearly all of an insert's work.
    prefix = uuid.uuid4().hex[:8]
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        block = blocks[n % len(blocks)]
        client.raw_insert(
            table,
            insert_block=block,
            fmt="JSONEachRow",
            settings={**INSERT_SETTINGS, "insert_deduplication_token": f"raw-{prefix}-{n}"},
        )
        rows += block.count(b"\n")
        n += 1
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    return rows, elapsed, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
