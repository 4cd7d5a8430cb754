"""The writer thread: sealed spool segments -> one ClickHouse insert per table.

A segment is deleted only after every table's insert succeeded. Each insert carries the
deduplication token ``<segment name>:<table>``, so re-inserting a segment after a crash
between insert and delete (or after a partly failed segment) is applied once.

``insert(table, data, token)`` is injected: production passes ``clickhouse_insert``,
tests pass one that fails on demand. ``hooks`` (table -> ``hook(rows, token, enclosing)
-> rows``) run in this thread just before a table's insert (``events`` uses one to assign
issue ids); a hook that raises counts as a failed insert, so the segment is retried.
``token`` is the insert's own; ``enclosing`` names the larger batches that held these
rows before a bisection split them (empty for a whole batch), so that a hook that
counts can tell rows it took before from rows it sees for the first time; ``requeue``
adds ``counted=True`` for a row the hook took before ClickHouse refused it.

Poison rows (docs/INGEST.md). Failures are retried with backoff, forever, and the oldest
segment goes first, so a row that ClickHouse refuses for its data would stop every later
insert. When a table's insert has failed ``quarantine_after`` times in a row with a data
error (``quarantine.is_data_error``: ClickHouse named a parse or range error; anything
else is transient), the writer bisects that table's rows instead:

- it inserts halves with the token ``<segment name>:<table>:<lo>-<hi>`` (rows
  ``lo..hi-1`` of the table's spooled lines, which never change), and splits each half
  refused with a data error again, down to single rows;
- ClickHouse matches a token only against itself, so rows sent together under one token
  must never go together again once parts of them are in. Hence the marker file
  (``Spool.mark_bisect``, fsync'd before the first part) and its journal of the ranges
  split since (``Spool.record_split``, before their halves): a replay after a crash
  splits what was split, resends the rest with the same tokens, and ClickHouse drops
  what went in before;
- a row refused alone, and again on ``ALONE_RETRIES`` more tries, is appended to
  ``<spool dir>/quarantine/<table>.jsonl`` (fsync'd) and logged at ERROR, then the
  segment completes as usual. A transient error at any step raises: the writer backs
  off and the replay resumes the bisection;
- past ``quarantine_limit`` rows of one batch, a refused row is taken for a cause that
  is not in the rows (a column changed under the writer, a setting lost): the writer
  raises ``SystemicRefusal`` and retries as for any failure, so the rest stays in the
  spool and goes in by halves once the cause is fixed, instead of going row by row into
  a quarantine that ``requeue`` would empty one insert (one part) per row.

A table with a hook gets it per part, with the part's token and the tokens of the
ranges that enclose it (``enclosing``): for the grouping hook a part is a replay when
one of those was taken before (it ran on the whole batch before the insert that failed:
it assigns issue ids, drops events ClickHouse holds, counts nothing twice), and new rows
otherwise.

A hook that fails for what a row holds (``quarantine.is_hook_data_error``: the
relational store refused a value, as PostgreSQL refuses NUL in text, or the hook's own
code raised on a row) would stop ingest the same way, and gets the same treatment: after
``quarantine_after`` failures in a row the batch is bisected, a part the hook refuses
counts as refused, and a row it refuses alone is quarantined with the hook's error. Any
other hook failure (the database down, a lock timeout) is retried as before.

Nothing of this runs while inserts succeed: the normal path costs one set lookup.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson

from errortrack.analytics import ClickHouse
from errortrack.spool import quarantine, records
from errortrack.spool.segments import DAMAGED, Spool

log = logging.getLogger(__name__)

Insert = Callable[[str, bytes, str], None]


class Hook(Protocol):
    """A table's hook: the rows to insert, given the rows spooled (see the docstring)."""

    def __call__(
        self,
        rows: list[dict[str, Any]],
        token: str,
        enclosing: Sequence[str],
        /,
        *,
        counted: bool = False,
    ) -> list[dict[str, Any]]: ...


class AfterInsert(Protocol):
    """A hook may also have ``after_insert(token)``, called with the token of its last
    call once ClickHouse holds the rows that call returned; a failure there is logged,
    not retried: the rows are in."""

    def after_insert(self, token: str, /) -> None: ...


class HookRefusal(Exception):
    """A hook's data error, returned by ``Writer._try`` as the refusal of its rows (the
    message is the hook's error's), so that a row refused alone is known to be one the
    hook never took."""


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
    # No limit on the partitions one insert touches (default 100, then TOO_MANY_PARTS,
    # which is transient, so the batch was retried forever and held up all ingest): the
    # tables are partitioned by (day, retention_days), times go 30 days back, and one
    # batch holds every project's rows. Deduplication is per partition (a block's id
    # includes its partition), so a replay of such a batch is still applied once.
    "max_partitions_per_insert_block": 0,
}
# Seconds between the writer's looks for orphaned spool directories
# (``Spool.adopt_orphans``): a worker replaced by a reload (HUP) exits after its
# successor started, and leaves what it could not insert. A look is a directory listing
# and a non-blocking flock per other worker's directory.
ADOPT_EVERY = 2.0
# Tries of a row alone after its first one, before it is quarantined: a data error is
# what ClickHouse said about these bytes, so more would not change the answer.
ALONE_RETRIES = 2
# Rows of one batch quarantined before the rest is taken for a systemic refusal. A poison
# row is rare (a broken SDK, a bug); 100 of a 20k-row batch (0.5 %) is already a cause.
QUARANTINE_LIMIT = 100


class SystemicRefusal(Exception):
    """More rows of a batch refused one by one than a poison row explains."""


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
        quarantine_after: int = 5,
        quarantine_limit: int = QUARANTINE_LIMIT,
        adopt_every: float = ADOPT_EVERY,
    ) -> None:
        self.spool = spool
        self.insert = insert
        self.max_age = max_age
        self.hooks = dict(hooks or {})
        self.backoff = backoff
        self.quarantine_after = quarantine_after
        self.quarantine_limit = quarantine_limit
        self.adopt_every = adopt_every
        self._last_adopt = 0.0
        self.quarantine = quarantine.Quarantine(quarantine.directory(spool.root))
        self.failures = 0  # consecutive failed attempts; exposed for tests and logs
        self.quarantined = 0  # rows this writer moved to the quarantine
        self._streak = ("", 0)  # a batch token and its consecutive data errors
        # The tables of a kept segment whose insert went in (step's retries skip them).
        self._went_in: dict[str, set[str]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.spool.open()  # adopts what orphans there are now
        self._last_adopt = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="spool-writer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 20.0) -> None:
        """Seal, give the thread ``timeout`` to insert what is left, release the spool."""
        self.spool.seal()
        self._stop.set()
        stuck = False
        if self._thread is not None:
            self._thread.join(timeout)
            stuck = self._thread.is_alive()
        self.spool.close()
        left = len(self.spool.sealed())
        if stuck or left:
            # Said, because nothing else would: these rows were acknowledged and wait,
            # on disk, for the next process to adopt them (the next worker's writer
            # within seconds after a reload, else the next start).
            log.warning(
                "spool writer stopping: %s; %d segment(s) left in %s for the next worker "
                "or start to insert",
                f"an insert still running after {timeout:g} s" if stuck else "inserts failing",
                left,
                self.spool.dir,
            )

    def _run(self) -> None:
        delay = self.backoff[0]
        # On stop, keep going until the spool is drained or an insert fails.
        while not (self._stop.is_set() and (self.spool.pending() == 0 or self.failures)):
            try:
                if self.step(wait=min(self.max_age / 4, 0.25)):
                    delay = self.backoff[0]
                if not self._stop.is_set():
                    # Busy or not: under steady load the writer may never be idle.
                    self._adopt_due()
            except Exception as exc:  # any failure: keep the segment, retry later
                self.failures += 1
                log.warning("spool insert failed (attempt %d): %s", self.failures, exc)
                if self._stop.wait(delay):
                    return
                delay = min(delay * 2, self.backoff[1])

    def _adopt_due(self) -> None:
        """Adopt orphaned spool directories once ``adopt_every`` has passed."""
        now = time.monotonic()
        if now - self._last_adopt < self.adopt_every:
            return
        self._last_adopt = now
        try:
            self.spool.adopt_orphans()
        except OSError as exc:  # e.g. a full disk failing the fsync: next look retries
            log.warning("spool: adopting orphaned segments failed: %s", exc)

    def step(self, wait: float = 0.0) -> bool:
        """Seal an old-enough segment, insert the oldest sealed one; True if one was done."""
        self.spool.seal_due(self.max_age)
        path = self.spool.next_sealed(wait)
        if path is None:
            return False
        if self.write_segment(path, self._went_in.setdefault(path.name, set())):
            self.spool.done(path)
        else:
            self.spool.keep_damaged(path)
        self._went_in.pop(path.name, None)
        self.failures = 0
        return True

    def drain(self) -> None:
        """Seal and insert everything now, in the caller's thread (tests, shutdown)."""
        self.spool.seal()
        while self.step():
            pass

    def write_segment(self, path: Path, went_in: set[str] | None = None) -> bool:
        """Insert the segment's intact records. False when it holds more than a torn tail
        after them (``_whole_or_torn``): ``step`` keeps it in damaged/, not deletes it.
        ``went_in``: the tables inserted on earlier tries, skipped, and added to."""
        segment = path.read_bytes()
        tables, intact = records.decode(segment)
        # A table that went in on an earlier try of this segment is not sent again: its
        # token would drop it, but not once its partition was dropped (a cleanup, the
        # retention pass or the disk cap: ClickHouse forgets the tokens of the parts it
        # drops), and the rows those removed came back with the retry (review,
        # thirty-second session). Kept in memory (``step``'s): after a crash the tokens
        # are all there is.
        went_in = set() if went_in is None else went_in
        for table in WRITE_ORDER:
            data = tables.get(table)
            if not data or table in went_in:
                continue
            if self.spool.bisecting(path, table):
                self._bisect(path, table, data)  # a replay: resume as the marker says
            else:
                self._write_table(path, table, data)
            went_in.add(table)
        return intact == len(segment) or self._whole_or_torn(path, segment, intact)

    def _whole_or_torn(self, path: Path, segment: bytes, intact: int) -> bool:
        """Reading stopped at a bad record: whether what follows is only a torn tail.

        A torn tail is at most one record cut short (``records.torn_tail``) at the end of
        a segment that may have one (``Spool.may_be_torn``: a crashed process's, or one
        a failed write or sync of ours ended). Its request never got its 200, so it is
        dropped, as before, with a warning. Anything else (a bad record in a segment we
        wrote and synced whole, or more bytes after a bad record) is damage: bit rot, a
        bad sector, a change by hand. The records after the bad one may have been
        acknowledged and are not read past it, so the segment is kept for an operator."""
        rest = len(segment) - intact
        if self.spool.may_be_torn(path) and records.torn_tail(segment, intact):
            log.warning(
                "spool: %s ends with %d bytes of a record cut short (a crash or a failed "
                "write; its request was not acknowledged): dropped; its %d bytes of "
                "intact records before it were inserted",
                path.name,
                rest,
                intact,
            )
            return True
        log.error(
            "spool: %s is damaged: a bad record at byte %d of %d; the %d bytes of intact "
            "records before it were inserted, the %d bytes from it on (which may hold "
            "acknowledged rows) cannot be read: keeping the segment in %s "
            "(docs/INGEST.md, 'Damaged segments')",
            path.name,
            intact,
            len(segment),
            intact,
            rest,
            self.spool.root / DAMAGED,
        )
        return False

    def _write_table(self, path: Path, table: str, data: bytes) -> None:
        token = f"{path.stem}:{table}"
        try:
            hooked = self._hooked(table, data, token, ())
        except Exception as exc:
            if not self._poisoned(token, exc, quarantine.is_hook_data_error):
                raise
            self._start_bisect(path, table, data, f"the {table} hook refuses it: {exc}")
            return
        if not hooked:
            return
        try:
            self._insert(table, hooked, token)
        except Exception as exc:
            if not self._poisoned(token, exc, quarantine.is_data_error):
                raise
            self._start_bisect(path, table, data, f"ClickHouse refuses it: {exc}")

    def _start_bisect(self, path: Path, table: str, data: bytes, why: str) -> None:
        log.error("spool: %s:%s keeps failing for its data, bisecting: %s", path.stem, table, why)
        self.spool.mark_bisect(path, table)
        self._bisect(path, table, data)

    def _hooked(
        self,
        table: str,
        data: bytes,
        token: str,
        enclosing: Sequence[str],
        counted: bool = False,
    ) -> bytes:
        hook = self.hooks.get(table)
        if hook is None:
            return data
        decoded = [decode_row(line) for line in data.splitlines()]
        rows = hook(decoded, token, enclosing, counted=counted)
        return b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in rows)

    def _insert(self, table: str, hooked: bytes, token: str) -> None:
        """Insert a hooked batch, then tell the hook that took it (``AfterInsert``)."""
        self.insert(table, hooked, token)
        after = getattr(self.hooks.get(table), "after_insert", None)
        if after is None:
            return
        try:
            after(token)
        except Exception:
            log.warning("spool: the %s hook failed after %s went in", table, token, exc_info=True)

    def _poisoned(self, token: str, exc: Exception, is_data: Callable[[Exception], bool]) -> bool:
        """Whether ``token``'s batch has now failed with a data error often enough."""
        if not is_data(exc):
            self._streak = ("", 0)
            return False
        streak = self._streak[1] + 1 if self._streak[0] == token else 1
        self._streak = (token, streak)
        return streak >= self.quarantine_after

    # -- poison rows: bisection --------------------------------------------------------
    def _bisect(self, path: Path, table: str, data: bytes) -> None:
        # Split on b"\n" only: a row is one line, whatever else its bytes hold.
        lines = data.split(b"\n")
        if not lines[-1]:
            lines.pop()
        batch = _Batch(path, table, lines, self.spool.splits(path, table))
        if len(lines) == 1:
            self._alone(batch, 0)
        else:
            self._split(batch, 0, len(lines))

    def _split(self, batch: _Batch, lo: int, hi: int) -> None:
        """Insert rows ``lo..hi-1`` (two or more), refused together, in halves."""
        mid = (lo + hi) // 2
        for a, b in ((lo, mid), (mid, hi)):
            if b - a == 1:
                self._alone(batch, a)
            elif (a, b) in batch.split:
                self._split(batch, a, b)  # refused before a crash: parts may be in
            elif self._try(batch, a, b) is not None:
                self.spool.record_split(batch.path, batch.table, a, b)
                batch.split.add((a, b))
                self._split(batch, a, b)

    def _alone(self, batch: _Batch, i: int) -> None:
        row_id = f"{batch.token}:{i}"
        if self.quarantine.holds(batch.table, row_id):
            # Kept on an earlier round (before a crash or a systemic stop): it stays in
            # one place, even if it would go in now (``requeue`` puts it in).
            return
        error: Exception | None = None
        for _ in range(1 + ALONE_RETRIES):
            error = self._try(batch, i, i + 1)
            if error is None:
                return
        if self.quarantine.held_from(batch.table, batch.token) >= self.quarantine_limit:
            why = (
                f"{batch.token}: {self.quarantine_limit} rows quarantined and more refused "
                f"one by one; not the rows' fault, so retrying instead: {error}"
            )
            log.error("spool: %s", why)
            raise SystemicRefusal(why)
        enclosing = enclosing_tokens(batch.token, len(batch.lines), i, i + 1)
        # Refused by the insert after its hook took it (this part or a larger one): the
        # hook counted it, and ``requeue`` must not, however long after.
        counted = None if batch.table not in self.hooks else not isinstance(error, HookRefusal)
        if self.quarantine.add(
            batch.table, row_id, batch.token, batch.lines[i], str(error), enclosing, counted
        ):
            self.quarantined += 1
            log.error("spool: quarantined row %s: %s", row_id, error)

    def _try(self, batch: _Batch, lo: int, hi: int) -> Exception | None:
        """None once rows ``lo..hi-1`` are in; the data error that refused them (the
        hook's or the insert's). Any other error raises: the writer backs off, and the
        replay resumes from the marker."""
        rows = b"\n".join(batch.lines[lo:hi]) + b"\n"
        token = part_token(batch.token, lo, hi)
        enclosing = enclosing_tokens(batch.token, len(batch.lines), lo, hi)
        try:
            hooked = self._hooked(batch.table, rows, token, enclosing)
        except Exception as exc:
            if not quarantine.is_hook_data_error(exc):
                raise
            return HookRefusal(str(exc))
        if not hooked:
            return None
        try:
            self._insert(batch.table, hooked, token)
        except Exception as exc:
            if not quarantine.is_data_error(exc):
                raise
            return exc
        return None

    def reinsert(self, entry: dict[str, Any]) -> None:
        """Insert a quarantined row again (``errortrack spool requeue``) as its bisection
        would have: under the token of its own one-row part, through the table's hook
        with the tokens of the ranges that held it (the grouping hook counted it with one
        of them, unless the hook itself refused it), so that a second requeue, or a replay
        of a segment it is still in, is dropped as a repeat. A row the hook took before
        ClickHouse refused it says so (``counted``), and the hook counts it not again even
        once it has forgotten those tokens (after 7 days). Rows quarantined before hooks
        could refuse rows (ninth session and earlier) say neither: their batch's hook had
        always taken them, which its token tells for 7 days."""
        batch, table = str(entry["batch"]), str(entry["table"])
        i = int(str(entry["id"]).rsplit(":", 1)[1])
        enclosing = entry.get("enclosing") or [batch]
        token = part_token(batch, i, i + 1)
        row = quarantine.row_bytes(entry) + b"\n"
        hooked = self._hooked(table, row, token, enclosing, entry.get("counted") is True)
        if table in self.hooks:
            # The hook has taken it now: if the insert below fails, the entry is kept
            # (requeue keeps this dict) and must not be counted again by a later requeue,
            # once the tokens that would tell are forgotten.
            entry["counted"] = True
        if hooked:
            self._insert(table, hooked, token)


# Events last: a segment is retried whole, and every table of it that went in before the
# failing one is sent again (ClickHouse drops the repeat by its token) and hooked again.
# For events that second hook is a replay, which could count them into an issue opened
# since (the first one deleted meanwhile) while their insert was dropped: an issue
# counting events it does not hold. With events last, nothing fails after them.
WRITE_ORDER = tuple(sorted(records.TABLES, key=lambda table: table == "events"))


@dataclasses.dataclass
class _Batch:
    """One table's rows of one segment, inserted in parts."""

    path: Path
    table: str
    lines: list[bytes]  # the spooled lines: the same on every replay, unlike a hook's output
    split: set[tuple[int, int]]  # ranges refused together (the marker's journal)

    @property
    def token(self) -> str:
        return f"{self.path.stem}:{self.table}"


def part_token(batch: str, lo: int, hi: int) -> str:
    """The deduplication token of rows ``lo..hi-1`` of a batch (``requeue`` uses a row's)."""
    return f"{batch}:{lo}-{hi}"


def enclosing_tokens(batch: str, rows: int, lo: int, hi: int) -> list[str]:
    """The tokens of the ranges a bisection of ``rows`` rows went through to reach rows
    ``lo..hi-1``, the whole batch's first (``batch`` itself), ``lo..hi-1``'s own not
    included: the halving is fixed, so every replay and ``requeue`` finds the same."""
    out = [batch]
    a, b = 0, rows
    while (a, b) != (lo, hi) and b - a > 1:
        if (a, b) != (0, rows):
            out.append(part_token(batch, a, b))
        mid = (a + b) // 2
        a, b = (a, mid) if hi <= mid else (mid, b)
    return out


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
