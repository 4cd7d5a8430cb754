"""Poison rows, the parts without ClickHouse: which failures are data errors, the
bisection markers beside spool segments, and the quarantine files (durable, one entry
per row, exact bytes, corruption tolerated)."""

from __future__ import annotations

import sqlite3

import chdb
import pytest
import sqlalchemy.exc
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

from errortrack.spool.quarantine import (
    Quarantine,
    error_code,
    is_data_error,
    is_hook_data_error,
    row_bytes,
)
from errortrack.spool.segments import Spool, bisect_marker
from errortrack.spool.writer import enclosing_tokens, part_token


@pytest.mark.parametrize(
    "exc",
    [
        DatabaseError("Code: 27. DB::Exception: Cannot parse input", code=27),
        DatabaseError("Code: 41. DB::Exception: Cannot read DateTime", code=41),
        DatabaseError("Code: 407. DB::Exception: out of range for DateTime64", code=407),
        DatabaseError("Code: 72. Unsigned type must not contain '-' symbol", code=72),
        DatabaseError("Code: 376. Cannot parse UUID from String", code=376),
        # Over HTTP a retried request comes back as an OperationalError; the code decides.
        OperationalError("Received ClickHouse exception, code: 117", code=117),
        # show_clickhouse_errors=False hides the text, not the code.
        DatabaseError("The ClickHouse server returned an error", code=53),
        chdb.ChdbError("Code: 6. DB::Exception: Cannot parse string 'x' as UInt64"),
    ],
)
def test_data_errors(exc):
    assert is_data_error(exc)


@pytest.mark.parametrize(
    "exc",
    [
        DatabaseError("Code: 241. DB::Exception: Memory limit exceeded", code=241),
        DatabaseError("Code: 252. DB::Exception: Too many parts", code=252),
        DatabaseError("Code: 159. DB::Exception: Timeout exceeded", code=159),
        DatabaseError("Code: 243. DB::Exception: Not enough space", code=243),
        DatabaseError("Code: 60. DB::Exception: Table errortrack.logs does not exist", code=60),
        DatabaseError("Code: 242. DB::Exception: Table is in readonly mode", code=242),
        DatabaseError("Code: 164. DB::Exception: Cannot execute query in readonly mode", code=164),
        DatabaseError("Code: 32. Attempt to read after eof", code=32),  # a cut-off body
        OperationalError("Error HTTPConnectionPool: Connection refused executing HTTP request"),
        DatabaseError("an error without a code"),
        chdb.ChdbError("Code: 241. DB::Exception: Memory limit exceeded"),
        ConnectionError("injected"),
        # Not ClickHouse's, whatever the text says: a hook's own failure.
        ValueError("Code: 27. looks like a parse error"),
    ],
)
def test_everything_else_is_transient(exc):
    assert not is_data_error(exc)


def _wrapped(cls: type[sqlalchemy.exc.DBAPIError], orig: BaseException):
    return cls("INSERT INTO issues ...", {}, orig)


@pytest.mark.parametrize(
    "exc",
    [
        # PostgreSQL: NUL in text, a number or a string too large for its column.
        _wrapped(sqlalchemy.exc.DataError, Exception("PostgreSQL text fields cannot contain NUL")),
        # A value SQLite cannot bind, raised while SQLAlchemy binds the parameters.
        sqlalchemy.exc.StatementError(
            "(builtins.OverflowError) Python int too large to convert to SQLite INTEGER",
            "SELECT ...",
            {},
            OverflowError("Python int too large to convert to SQLite INTEGER"),
        ),
        # The hook's own code on a row: a time that does not parse, a key that is missing.
        ValueError("Invalid isoformat string: 'not a time'"),
        KeyError("fingerprint"),
        TypeError("'<' not supported between instances of 'str' and 'float'"),
        # ClickHouse refusing a value in the hook's own query.
        DatabaseError("Code: 376. Cannot parse UUID from String", code=376),
    ],
)
def test_hook_data_errors(exc):
    assert is_hook_data_error(exc)


@pytest.mark.parametrize(
    "exc",
    [
        _wrapped(sqlalchemy.exc.OperationalError, sqlite3.OperationalError("database is locked")),
        _wrapped(sqlalchemy.exc.OperationalError, Exception("connection refused")),
        # Two workers creating one issue, or a project deleted meanwhile: gone on retry.
        _wrapped(sqlalchemy.exc.IntegrityError, Exception("duplicate key value")),
        _wrapped(sqlalchemy.exc.InterfaceError, Exception("connection already closed")),
        # A DBAPI error whose cause is a ValueError is still the database's, not the row's.
        _wrapped(sqlalchemy.exc.DBAPIError, ValueError("odd driver state")),
        sqlalchemy.exc.TimeoutError("QueuePool limit reached"),
        DatabaseError("Code: 241. DB::Exception: Memory limit exceeded", code=241),
        RuntimeError("relational store down"),
        ConnectionError("injected"),
    ],
)
def test_any_other_hook_failure_is_transient(exc):
    assert not is_hook_data_error(exc)


def test_the_ranges_enclosing_a_part_are_those_the_halving_went_through():
    # 10 rows: 0-10 -> 0-5 -> 2-5 -> 3-5 -> 3-4, as Writer._split halves them.
    assert enclosing_tokens("s:events", 10, 3, 4) == [
        "s:events",
        part_token("s:events", 0, 5),
        part_token("s:events", 2, 5),
        part_token("s:events", 3, 5),
    ]
    assert enclosing_tokens("s:events", 10, 5, 10) == ["s:events"]  # a first half
    assert enclosing_tokens("s:events", 1, 0, 1) == ["s:events"]  # a batch of one row


def test_a_driver_error_without_a_code_attribute_falls_back_to_its_text():
    assert error_code(DatabaseError("Code: 41. DB::Exception: Cannot read DateTime")) == 41


def test_rows_are_appended_once_each_and_come_back_byte_for_byte(tmp_path):
    kept = Quarantine(tmp_path / "quarantine")
    row = b'{"body":"caf\xc3\xa9 \xff not utf-8","timestamp":"x"}'
    assert kept.add("logs", "s:logs:3", "s:logs", row, "Code: 41. DB::Exception: ...")
    assert not kept.add("logs", "s:logs:3", "s:logs", row, "again")  # a replay
    # Another process (or a restart) reads the ids from the file.
    assert not Quarantine(tmp_path / "quarantine").add("logs", "s:logs:3", "s:logs", row, "x")
    assert kept.add("spans", "s:spans:0", "s:spans", b"{}", "Code: 27.")
    [entry] = kept.entries("logs")
    assert row_bytes(entry) == row
    assert entry["table"] == "logs" and entry["batch"] == "s:logs"
    assert entry["error"].startswith("Code: 41.")
    assert kept.count() == 2
    assert Quarantine(tmp_path / "nowhere").count() == 0


def test_rows_another_process_adds_or_requeues_are_seen_by_one_that_read_the_ids_before(
    tmp_path,
):
    # Two workers: this one adopts and replays a segment the other bisected before it
    # died. Ids read before the other's add made it quarantine the row a second time.
    here, there = Quarantine(tmp_path), Quarantine(tmp_path)
    assert not here.holds("logs", "s:logs:1")  # read (empty) before the other's add
    assert there.add("logs", "s:logs:1", "s:logs", b"{}", "Code: 27.")
    assert here.holds("logs", "s:logs:1") and here.held_from("logs", "s:logs") == 1
    assert not here.add("logs", "s:logs:1", "s:logs", b"{}", "again")
    assert here.add("logs", "s:logs:2", "s:logs", b"{}", "Code: 27.")
    assert [e["id"] for e in there.entries("logs")] == ["s:logs:1", "s:logs:2"]
    # The other requeues them all: a row is no longer held, and is quarantined again.
    assert there.requeue("logs", lambda entry: None) == (2, 0)
    assert not here.holds("logs", "s:logs:1") and here.held_from("logs", "s:logs") == 0
    assert here.add("logs", "s:logs:1", "s:logs", b"{}", "Code: 27.")
    assert there.holds("logs", "s:logs:1")


def test_an_unreadable_line_is_neither_fatal_nor_dropped(tmp_path):
    kept = Quarantine(tmp_path)
    kept.add("logs", "a", "b", b"{}", "e")
    with kept.file("logs").open("a") as f:
        f.write("not json\n")
    assert kept.add("logs", "c", "b", b"{}", "e")
    assert [e.get("id") for e in kept.entries("logs")] == ["a", None, "c"]
    moved, left = kept.requeue("logs", lambda entry: None)
    assert (moved, left) == (2, 1)
    [entry] = kept.entries("logs")
    assert entry["unreadable"] == "not json"


def test_requeue_keeps_the_rows_that_still_fail(tmp_path):
    kept = Quarantine(tmp_path)
    for i in range(4):
        kept.add("logs", f"s:logs:{i}", "s:logs", b'{"n":%d}' % i, "Code: 41.")
    sent = []

    def insert(entry):
        if entry["id"].endswith(":2"):
            raise DatabaseError("Code: 41. still bad", code=41)
        sent.append(row_bytes(entry))

    assert kept.requeue("logs", insert) == (3, 1)
    assert sent == [b'{"n":0}', b'{"n":1}', b'{"n":3}']
    [entry] = kept.entries("logs")
    assert entry["id"] == "s:logs:2" and entry["error"] == "Code: 41. still bad"
    assert kept.requeue("logs", lambda entry: None) == (1, 0)
    assert not kept.file("logs").exists() and kept.count() == 0


def _spool(root):
    spool = Spool(root, max_bytes=10**9, batch_rows=1000)
    spool.open()
    return spool


def test_a_bisection_marker_moves_with_its_segment_and_goes_after_it(tmp_path):
    first = _spool(tmp_path)
    first.append({"logs": b'{"n":1}\n', "spans": b'{"s":1}\n'}, 2)
    first.seal()
    [segment] = first.sealed()
    first.mark_bisect(segment, "logs")
    first.record_split(segment, "logs", 0, 8)
    first.record_split(segment, "logs", 4, 8)
    with bisect_marker(segment, "logs").open("a") as journal:
        journal.write("2-")  # torn by a crash: never synced, so never acted on
    first.close()

    second = _spool(tmp_path)  # adopts the segment and its marker
    [adopted] = second.sealed()
    assert adopted.parent == second.dir and adopted.name == segment.name
    assert second.bisecting(adopted, "logs") and not second.bisecting(adopted, "spans")
    assert second.splits(adopted, "logs") == {(0, 8), (4, 8)}
    second.done(adopted)
    assert sorted(p.name for p in second.dir.iterdir()) == ["lock"]
    second.close()


def test_a_marker_left_without_its_segment_is_removed_at_start(tmp_path):
    # The process died between deleting the segment and its marker.
    first = _spool(tmp_path)
    first.append({"logs": b'{"n":1}\n'}, 1)
    first.seal()
    [segment] = first.sealed()
    first.mark_bisect(segment, "logs")
    segment.unlink()
    first.close()
    second = _spool(tmp_path)
    assert list(second.dir.glob("*.bisect")) == [] and second.sealed() == []
    second.close()


def test_the_count_reads_only_what_was_appended_and_follows_a_requeue(tmp_path):
    kept = Quarantine(tmp_path)
    for i in range(3):
        kept.add("logs", f"s:logs:{i}", "s:logs", b"{}", "Code: 41.")
    assert kept.count() == 3
    # Blank out the second entry's newline behind the count's back: a count that reread
    # the file would find one line less; one that reads only what was appended does not.
    data = kept.file("logs").read_bytes()
    second_end = data.index(b"\n", data.index(b"\n") + 1)
    with kept.file("logs").open("r+b") as f:
        f.seek(second_end)
        f.write(b" ")
    kept.add("logs", "s:logs:3", "s:logs", b"{}", "Code: 41.")
    assert kept.count() == 4
    assert Quarantine(tmp_path).count() == 4  # the same process: the same counts
    # A requeue replaces the file, which is counted afresh, also when a new one is longer.
    kept.requeue("logs", lambda e: None)
    assert kept.count() == 1  # the damaged line stays, unreadable (see above)
    kept.file("logs").unlink()
    for i in range(6):
        kept.add("logs", f"t:logs:{i}", "t:logs", b"{}", "Code: 41.")
    assert kept.count() == 6


def test_the_count_follows_a_requeue_that_keeps_the_first_entry_with_a_longer_error(
    tmp_path,
):
    # The rewritten file starts with the same bytes and, with longer errors, is no
    # smaller than the one counted before: only its inode tells it apart.
    kept = Quarantine(tmp_path)
    for i in range(3):
        kept.add("logs", f"s:logs:{i}", "s:logs", b"{" + b" " * 300 + b"}", "Code: 6.")
    assert kept.count() == 3
    size = kept.file("logs").stat().st_size

    def insert(entry: dict) -> None:
        if entry["id"] != "s:logs:1":
            raise RuntimeError("Code: 6. a longer message this time " + "y" * 300)

    assert kept.requeue("logs", insert) == (1, 2)
    assert kept.file("logs").stat().st_size >= size
    assert kept.count() == 2
