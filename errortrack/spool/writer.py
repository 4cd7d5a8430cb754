"""The writer thread: sealed spool segments -> one ClickHouse insert per table.

A segment is deleted only after every table's insert succeeded. Each insert carries the
deduplication token ``<segment name>:<table>``, so re-inserting a segment after a crash
between insert and delete (or after a partly failed segment) is applied once.

``insert(table, data, token)`` is injected: production passes ``clickhouse_insert``,
tests pass one that fails on demand. ``hooks`` (table -> ``hook(rows, batch_token) ->
rows``) run in this thread just before a table's insert (``events`` uses one to assign
issue ids); a hook that raises counts as a failed insert, so the segment is retried.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from errortrack.analytics import ClickHouse
from errortrack.spool import records
from errortrack.spool.segments import Spool

log = logging.getLogger(__name__)

Insert = Callable[[str, bytes, str], None]
Hook = Callable[[list[dict[str, Any]], str], list[dict[str, Any]]]
INSERT_SETTINGS = {
    # Timestamps arrive as float Unix seconds or ISO 8601 strings.
    "date_time_input_format": "best_effort",
    # Parallel parsing cuts a batch into 10 MiB chunks parsed at once, each chunk and its
    # block held in memory together: the peak RSS target (700 MB) is closer without it,
    # and a single-threaded parse of a 20k-row batch was no slower in the benchmark
    # (bench/RESULTS.md, with clickhouse/0008).
    "input_format_parallel_parsing": 0,
    # Event payloads arrive as raw JSON objects for a String column (the default since
    # ClickHouse 23; said here because the stored bytes depend on it).
    "input_format_json_read_objects_as_strings": 1,
}
# Event rows end with this key (errortrack.issues.events.event_row). Keys before it hold
# scalars, and a JSON string holds no unescaped quote, so its first match is the key.
_PAYLOAD_KEY = b',"payload":'


def clickhouse_insert(store: ClickHouse) -> Insert:
    def insert(table: str, data: bytes, token: str) -> None:
        # The writer thread gets its own client (ClickHouse.client() is per thread).
        store.client().raw_insert(
            table,
            insert_block=data,
            fmt="JSONEachRow",
            settings={**INSERT_SETTINGS, "insert_deduplication_token": token},
        )

    return insert


class Writer:
    def __init__(
        self,
        spool: Spool,
        insert: Insert,
        *,
        max_age: float = 1.0,
        hooks: Mapping[str, Hook] | None = None,
        backoff: tuple[float, float] = (0.2, 5.0),
    ) -> None:
        self.spool = spool
        self.insert = insert
        self.max_age = max_age
        self.hooks = dict(hooks or {})
        self.backoff = backoff
        self.failures = 0  # consecutive failed attempts; exposed for tests and logs
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.spool.open()
        self._thread = threading.Thread(target=self._run, name="spool-writer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 20.0) -> None:
        """Seal, give the thread ``timeout`` to insert what is left, release the spool."""
        self.spool.seal()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.spool.close()

    def _run(self) -> None:
        delay = self.backoff[0]
        # On stop, keep going until the spool is drained or an insert fails.
        while not (self._stop.is_set() and (self.spool.pending() == 0 or self.failures)):
            try:
                if self.step(wait=min(self.max_age / 4, 0.25)):
                    delay = self.backoff[0]
            except Exception as exc:  # any failure: keep the segment, retry later
                self.failures += 1
                log.warning("spool insert failed (attempt %d): %s", self.failures, exc)
                if self._stop.wait(delay):
                    return
                delay = min(delay * 2, self.backoff[1])

    def step(self, wait: float = 0.0) -> bool:
        """Seal an old-enough segment, insert the oldest sealed one; True if one was done."""
        self.spool.seal_due(self.max_age)
        path = self.spool.next_sealed(wait)
        if path is None:
            return False
        self.write_segment(path)
        self.spool.done(path)
        self.failures = 0
        return True

    def drain(self) -> None:
        """Seal and insert everything now, in the caller's thread (tests, shutdown)."""
        self.spool.seal()
        while self.step():
            pass

    def write_segment(self, path: Path) -> None:
        tables, _ = records.decode(path.read_bytes())
        for table in records.TABLES:
            data = tables.get(table)
            if not data:
                continue
            token = f"{path.stem}:{table}"
            hook = self.hooks.get(table)
            if hook is not None:
                rows = hook([decode_row(line) for line in data.splitlines()], token)
                data = b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in rows)
                if not data:
                    continue
            self.insert(table, data, token)


def decode_row(line: bytes) -> dict[str, Any]:
    """A spooled JSONEachRow line as a dict for a hook; a trailing ``payload`` stays raw
    JSON (``orjson.Fragment``), written back unchanged by ``orjson.dumps``.

    The fast path applies only when ``payload`` is the last key (the line ends right
    after its string or object value); rows of other shapes, such as those spooled by an
    older version with ``retention_days`` last, are parsed whole."""
    cut = line.find(_PAYLOAD_KEY)
    if cut < 0 or not line.endswith((b'"}', b"}}")):
        return orjson.loads(line)
    row: dict[str, Any] = orjson.loads(line[:cut] + b"}")
    row["payload"] = orjson.Fragment(line[cut + len(_PAYLOAD_KEY) : -1])
    return row
