"""Poison rows: which insert failures are the data's fault, and where such rows are kept.

A row that ClickHouse refuses for what it holds (a value its column cannot take) fails
its batch on every retry. The writer (``spool/writer.py``) then bisects the batch and
moves each row that fails alone here, so that one bad row cannot stop ingest for
everyone. Deciding wrongly in either direction has a price, so the test is narrow:

- a failure is a data error only when ClickHouse names one of ``DATA_ERRORS``;
- everything else (network, timeouts, memory, too many parts, a full disk, a missing
  table, a read-only replica, an unknown code, any Python error) is transient: the
  writer backs off and retries the same rows later, however long that takes.

A transient error taken for a data error would move good rows out of the way (they are
kept here, not lost, but no longer queryable until re-inserted); a data error taken for
a transient one blocks the writer as before. Hence a short list of codes, checked
against ``errorCodeToName`` of the chDB in use (26.9).

A table's hook (the events' grouping, which writes to the relational store before the
insert) can refuse a row the same way; ``is_hook_data_error`` is its test, as narrow:
the store's ``DataError``, a Python error raised on a row's values, or a ClickHouse data
error in the hook's own query.

Rows are kept in ``<spool dir>/quarantine/<table>.jsonl``, one JSON object per row, each
appended and fsync'd before its segment may be deleted. ``errortrack spool requeue``
re-inserts them (``requeue``), keeping those that still fail.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy.exc
from clickhouse_connect.driver.exceptions import Error as DriverError

from errortrack.spool import ownership

DIRECTORY = "quarantine"

# ClickHouse error codes that mean "this input cannot go into this column": parse and
# conversion failures, values out of the type's range. Codes that can also come from a
# cut-off request body (3 UNEXPECTED_END_OF_FILE, 32 ATTEMPT_TO_READ_AFTER_EOF, 33
# CANNOT_READ_ALL_DATA) are left out: over HTTP they may be the network's fault, and a
# spooled row is never cut off (the record's checksum guards it).
DATA_ERRORS: dict[int, str] = {
    6: "CANNOT_PARSE_TEXT",
    19: "SIZE_OF_FIXED_STRING_DOESNT_MATCH",
    25: "CANNOT_PARSE_ESCAPE_SEQUENCE",
    26: "CANNOT_PARSE_QUOTED_STRING",
    27: "CANNOT_PARSE_INPUT_ASSERTION_FAILED",  # a JSONEachRow line that is not an object
    38: "CANNOT_PARSE_DATE",
    41: "CANNOT_PARSE_DATETIME",
    53: "TYPE_MISMATCH",
    69: "ARGUMENT_OUT_OF_BOUND",
    70: "CANNOT_CONVERT_TYPE",
    72: "CANNOT_PARSE_NUMBER",  # also a negative number for an unsigned column
    117: "INCORRECT_DATA",
    128: "TOO_LARGE_ARRAY_SIZE",
    130: "CANNOT_READ_ARRAY_FROM_TEXT",
    131: "TOO_LARGE_STRING_SIZE",
    190: "SIZES_OF_ARRAYS_DONT_MATCH",
    321: "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE",
    349: "CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN",
    376: "CANNOT_PARSE_UUID",
    407: "DECIMAL_OVERFLOW",  # a DateTime64 far out of range (a log dated 1e30)
    441: "CANNOT_PARSE_DOMAIN_VALUE_FROM_STRING",
    467: "CANNOT_PARSE_BOOL",
    469: "VIOLATED_CONSTRAINT",
    626: "CANNOT_SKIP_UNKNOWN_FIELD",
    632: "UNEXPECTED_DATA_AFTER_PARSED_VALUE",
    675: "CANNOT_PARSE_IPV4",
    676: "CANNOT_PARSE_IPV6",
    691: "UNKNOWN_ELEMENT_OF_ENUM",
}
_CODE = re.compile(r"\bCode: (\d+)\.")


def error_code(exc: BaseException) -> int | None:
    """The ClickHouse error code of an insert failure, None when it is not ClickHouse's.

    clickhouse-connect carries it (``code``, over HTTP and over chDB); chDB used directly
    raises ``ChdbError`` with only ``Code: NNN.`` in its message."""
    if isinstance(exc, DriverError):
        if exc.code is not None:
            return exc.code
    elif not type(exc).__module__.startswith("chdb"):
        return None
    found = _CODE.search(str(exc))
    return int(found.group(1)) if found else None


def is_data_error(exc: BaseException) -> bool:
    return error_code(exc) in DATA_ERRORS


# Python errors that a hook's own code raises on what a row holds (a missing key, a value
# of the wrong type or out of range, a time that does not parse). The same rows raise
# them on every retry; a connection, a pool or a lock never raises them.
_ROW_ERRORS = (KeyError, TypeError, ValueError, OverflowError)


def is_hook_data_error(exc: BaseException) -> bool:
    """Whether a table hook (the events' grouping) failed for what its rows hold.

    - the relational store refused a value: DBAPI ``DataError`` (PostgreSQL: text with
      NUL, a number out of range, a string too long for its column), which SQLAlchemy
      raises as ``sqlalchemy.exc.DataError``;
    - a value failed before it reached the store (SQLAlchemy wraps a Python error raised
      while binding parameters in a ``StatementError``), or in the hook's own code;
    - ClickHouse refused a value in the hook's own query (``is_data_error``).

    Everything else is transient, as for inserts: the database unreachable, a timeout,
    a deadlock or serialization failure, a unique or foreign key conflict (two workers
    creating the same issue; a project deleted meanwhile), any other ``DBAPIError``.
    """
    if isinstance(exc, sqlalchemy.exc.DataError):
        return True
    if isinstance(exc, sqlalchemy.exc.DBAPIError):
        return False
    if isinstance(exc, sqlalchemy.exc.StatementError):
        return isinstance(exc.orig, _ROW_ERRORS)
    return isinstance(exc, _ROW_ERRORS) or is_data_error(exc)


def directory(spool_root: Path) -> Path:
    return spool_root / DIRECTORY


class Quarantine:
    """The quarantine files of one spool directory, shared by every process using it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # Per table, the ids in its file and the file's stamp (``_stamp``) when read.
        self._ids: dict[str, tuple[tuple[int, int, int], set[str]]] = {}

    def file(self, table: str) -> Path:
        return self.path / f"{table}.jsonl"

    def add(
        self,
        table: str,
        row_id: str,
        batch: str,
        row: bytes,
        error: str,
        enclosing: Sequence[str] = (),
        counted: bool | None = None,
    ) -> bool:
        """Durably append one row; False when ``row_id`` is there already (a segment
        replayed after a crash mid-bisection refuses the same row again). ``enclosing``:
        the tokens of the ranges the bisection split to reach the row, which ``requeue``
        hands to the table's hook (``writer.enclosing_tokens``); ``counted``, for a table
        with a hook, whether the hook had taken the row before ClickHouse refused it."""
        with self._locked():
            ids = self._known(table)
            if row_id in ids:
                return False
            entry: dict[str, Any] = {
                "id": row_id,
                "table": table,
                "batch": batch,
                # surrogateescape + ensure_ascii: the exact bytes come back, even if not UTF-8.
                "row": row.decode("utf-8", "surrogateescape"),
                "error": error,
                "quarantined_at": dt.datetime.now(dt.UTC).isoformat(),
            }
            if enclosing:
                entry["enclosing"] = list(enclosing)
            if counted is not None:
                entry["counted"] = counted
            _append(self.file(table), (json.dumps(entry, ensure_ascii=True) + "\n").encode())
            ids.add(row_id)
            # Our own line, under the lock: no need to read the file again for it.
            self._ids[table] = (self._stamp(table), ids)
            return True

    def holds(self, table: str, row_id: str) -> bool:
        with self._locked():
            return row_id in self._known(table)

    def held_from(self, table: str, batch: str) -> int:
        """Rows of ``batch`` kept (row ids are ``<batch>:<row>``)."""
        prefix = batch + ":"
        with self._locked():
            return sum(1 for row_id in self._known(table) if row_id.startswith(prefix))

    def _known(self, table: str) -> set[str]:
        """The ids in ``table``'s file; called under the lock. Read again whenever the
        file changed since this process last read it: another worker adds rows too (a
        segment it bisected, then died, is adopted and replayed here; ids cached before
        would quarantine its rows twice, or insert one that stays quarantined) and
        ``requeue`` (the command) rewrites it."""
        stamp = self._stamp(table)
        cached = self._ids.get(table)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        ids = {str(e.get("id")) for e in self.entries(table)}
        self._ids[table] = (stamp, ids)
        return ids

    def _stamp(self, table: str) -> tuple[int, int, int]:
        # The file only grows between rewrites, which are new files (another inode); the
        # time tells a file deleted and started again on the same inode, at the same size.
        try:
            st = os.stat(self.file(table))
        except FileNotFoundError:
            return (0, 0, 0)
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def entries(self, table: str) -> list[dict[str, Any]]:
        """The kept rows; a line that does not parse (edited by hand?) comes back as
        ``{"unreadable": line}`` so that it is neither fatal nor dropped by ``requeue``."""
        try:
            lines = self.file(table).read_bytes().splitlines()
        except FileNotFoundError:
            return []
        return [_parse(line) for line in lines if line.strip()]

    def count(self) -> int:
        """Rows kept, over all tables (what /readyz reports)."""
        try:
            files = [p for p in self.path.iterdir() if p.suffix == ".jsonl"]
        except FileNotFoundError:
            return 0
        return sum(_lines(p) for p in files)

    def requeue(self, table: str, insert: Callable[[dict[str, Any]], None]) -> tuple[int, int]:
        """Hand every kept row of ``table`` to ``insert``; rows it raises for stay.
        Returns (re-inserted, still kept). Holds the lock, so no row is added meanwhile."""
        with self._locked():
            kept = []
            entries = self.entries(table)
            for entry in entries:
                try:
                    if "unreadable" in entry:
                        raise ValueError("the line is not a quarantine entry")
                    insert(entry)
                except Exception as exc:  # any reason: the row stays for the next try
                    kept.append({**entry, "error": str(exc)})
            self._rewrite(table, kept)
            self._ids.pop(table, None)
            return len(entries) - len(kept), len(kept)

    def _rewrite(self, table: str, kept: list[dict[str, Any]]) -> None:
        target = self.file(table)
        if not kept:
            target.unlink(missing_ok=True)
            return
        staging = target.with_suffix(".tmp")
        staging.unlink(missing_ok=True)
        _append(staging, "".join(json.dumps(e, ensure_ascii=True) + "\n" for e in kept).encode())
        staging.replace(target)
        ownership.fsync_dir(self.path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # Several workers (and `errortrack spool requeue`) share the files.
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


# Per quarantine file: its inode and first bytes, size and lines when last counted. The
# files only grow between requeues, which replace or delete them, so a probe reads only
# what was appended since the last one, not a file that a cause refusing every row could
# make gigabytes. A requeue's rewrite is a new file renamed over the old one, so it has
# another inode, even when it keeps the first entry and, with longer errors, grows; a
# file deleted and started again may reuse the inode, but starts with another entry.
_COUNTED: dict[Path, tuple[tuple[int, bytes], int, int]] = {}
_COUNTED_LOCK = threading.Lock()


def _lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            stat = os.fstat(f.fileno())
            head = (stat.st_ino, f.read(256))
            with _COUNTED_LOCK:
                seen, size, lines = _COUNTED.get(path, ((0, b""), 0, 0))
            if (
                seen[0] != head[0]
                or not seen[1]
                or head[1][: len(seen[1])] != seen[1]
                or stat.st_size < size
            ):
                size = lines = 0
            f.seek(size)
            while chunk := f.read(1 << 20):
                lines += chunk.count(b"\n")
                size += len(chunk)
    except FileNotFoundError:
        return 0
    with _COUNTED_LOCK:
        _COUNTED[path] = (head, size, lines)
    return lines


def row_bytes(entry: dict[str, Any]) -> bytes:
    """A kept row's line as it was spooled (``Quarantine.add`` in reverse)."""
    return str(entry["row"]).encode("utf-8", "surrogateescape")


def _parse(line: bytes) -> dict[str, Any]:
    try:
        entry = json.loads(line)
    except ValueError:
        entry = None
    if not isinstance(entry, dict):
        return {"unreadable": line.decode("utf-8", "replace")}
    return entry


def _append(path: Path, data: bytes) -> None:
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
            if written != len(data):
                raise OSError(f"short write to {path} ({written} of {len(data)} bytes)")
        except OSError:
            os.ftruncate(fd, size)  # no half line: the file must stay one entry a line
            raise
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        ownership.fsync_dir(path.parent)
