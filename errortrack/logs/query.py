"""Reading logs: plain functions over the ClickHouse store.

Every value from the caller reaches ClickHouse as a bound parameter (``{name:Type}``);
only fixed fragments chosen from tables in this module are put into the SQL text.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, NamedTuple

import orjson

from errortrack import paging
from errortrack.analytics import ClickHouse
from errortrack.errors import ValidationError
from errortrack.logs import attributes
from errortrack.logs.cursor import Cursor
from errortrack.logs.filters import LogFilter
from errortrack.paging import PageRequest, page_body, within_budget

COLUMNS = "id, level, severity_number, body, trace_id, span_id, attributes, timestamp, ingested_at"
# What a row's size is counted by: the body and attributes, and the short columns too,
# whose lengths ingest bounds only since the thirty-first session (1 MB span ids stored
# before made a 954 MiB page).
_HEAVY = ("body", "attributes", "level", "trace_id", "span_id")
# Where the sort key's values are in a row of COLUMNS.
_ID, _SEVERITY, _TIMESTAMP = 0, 2, 7
# Every order is complete: ties are broken by ``id``, so that a page's rows do not depend
# on how the stored parts happen to be merged (without it a merge during a walk skipped
# some logs sharing a timestamp and repeated others) and so that a page's last row is a
# keyset cursor (``errortrack.logs.cursor``). The time sorts are not run as written,
# though: ``id`` after the table's sort key (project_id, timestamp) makes ClickHouse sort
# every matching row of the project, ~20x slower at 10 M rows; ``_time_page`` reads in
# key order and settles ties itself (bench/RESULTS.md, nineteenth session).
ORDER_BY = {
    "-timestamp": "timestamp DESC, id DESC",
    "timestamp": "timestamp ASC, id ASC",
    # These sort every matching row anyway, so ``id`` costs little here.
    "-severity": "severity_number DESC NULLS LAST, timestamp DESC, id DESC",
    "severity": "severity_number ASC NULLS LAST, timestamp DESC, id DESC",
}
_TIME = "DateTime64(6, 'UTC')"
_LIKE_SPECIALS = str.maketrans({"\\": "\\\\", "%": "\\%", "_": "\\_"})
# ClickHouse's lower() (which the body index is built on) folds ASCII only; fold the
# search text the same way so that "Timeout" finds "TIMEOUT" and the index still applies.
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def where_clause(
    project_id: int, f: LogFilter, *, absent: attributes.Absent = frozenset()
) -> tuple[str, dict[str, Any]]:
    """The WHERE text and its parameters for one project and filter; ``absent``: typed
    maps known not to hold a filtered attribute (``attributes.absent_maps``)."""
    clauses = ["project_id = {project_id:UInt64}"]
    params: dict[str, Any] = {"project_id": project_id}
    if f.levels:
        clauses.append("severity_number IN {severities:Array(UInt8)}")
        params["severities"] = f.severity_numbers
    if f.trace_id:
        clauses.append("trace_id = {trace_id:String}")
        params["trace_id"] = f.trace_id
    if f.text:
        clauses.append("lower(body) LIKE {text:String}")
        params["text"] = "%" + f.text.translate(_ASCII_LOWER).translate(_LIKE_SPECIALS) + "%"
    if f.start:
        clauses.append("timestamp >= {start:DateTime64(6, 'UTC')}")
        params["start"] = ch_time(f.start)
    if f.end:
        clauses.append("timestamp < {end:DateTime64(6, 'UTC')}")
        params["end"] = ch_time(f.end)
    for i, attr in enumerate(f.attributes):
        clauses.append(attributes.clause(attr, f"a{i}", params, absent))
    return " AND ".join(clauses), params


# Counting every match of a filter the indexes cannot narrow means reading that column
# for the whole project (150 ms and more at 4 M logs on 2 slow cores, bench/RESULTS.md).
# Lists with text, attribute or trace filters therefore count up to this many matches
# (or to the end of the requested page, if later) and say so with total_count_exact.
COUNT_CAP = 10_000


def list_logs(
    store: ClickHouse,
    project_id: int,
    f: LogFilter,
    page: PageRequest,
    *,
    cursor: Cursor | None = None,
    count_cap: int = COUNT_CAP,
) -> dict[str, Any]:
    """One page of a project's logs, newest first unless ``f.sort`` says otherwise; with
    ``cursor``, the ``page.per_page`` logs after it instead of a numbered page.

    The first page is read before anything is counted: when it is not full, its length is
    the exact total and no count runs at all (every search that finds fewer than a page
    of logs costs one query). Later pages count first, so that a page past the end costs
    no read. A cursor page always counts (the rows before the cursor are not known), and
    ``total_count`` is that of the whole filtered list, as on numbered pages.
    """
    if cursor is not None and cursor.sort != f.sort:
        raise ValidationError(
            f"this cursor continues sort={cursor.sort}, not sort={f.sort}", field="cursor"
        )
    where, params = where_clause(project_id, f, absent=attributes.absent_maps(store, project_id, f))
    if cursor is not None:
        after, after_params = _after(cursor)
        found = _page(
            store, f"{where} AND {after}", {**params, **after_params}, f, page.per_page, 0
        )
        total, exact = _count(store, where, params, f, page, count_cap)
        return _body(found, f, page, total, exact, numbered=False)
    if page.offset == 0:
        found = _page(store, where, params, f, page.per_page, 0)
        if not found.more:
            return _body(found, f, page, len(found.rows), True)
        total, exact = _count(store, where, params, f, page, count_cap)
        return _body(found, f, page, total, exact)
    total, exact = _count(store, where, params, f, page, count_cap)
    if exact and page.past_end(total):
        return _body(_Found([], False), f, page, total, exact)
    return _body(_page(store, where, params, f, page.per_page, page.offset), f, page, total, exact)


class _Found(NamedTuple):
    """A page's rows, and whether any row comes after them: known from the read itself
    (one row more), not from the page being full, so that a page shortened by rows
    deleted between its two queries does not end a walk that has more to show."""

    rows: list[Any]
    more: bool


def _body(
    found: _Found,
    f: LogFilter,
    page: PageRequest,
    total: int,
    exact: bool,
    *,
    numbered: bool = True,
) -> dict[str, Any]:
    body = page_body([log_item(row) for row in found.rows], total, page, exact=exact)
    if not numbered:
        body["page"] = None
    last = found.rows[-1] if found.more and found.rows else None
    body["next_cursor"] = last and (
        Cursor.after_row(f.sort, last[_TIMESTAMP], last[_ID], last[_SEVERITY]).encode()
    )
    return body


def budgeted(select: str, order: str, *, keep: int = 1, skip: int = 0) -> str:
    """``paging.budgeted`` for a read of ``COLUMNS``: a log's bulk is its body and
    attributes (``_HEAVY``)."""
    return paging.budgeted(select, COLUMNS, _HEAVY, order, keep=keep, skip=skip)


def _page(
    store: ClickHouse,
    where: str,
    params: dict[str, Any],
    f: LogFilter,
    limit: int,
    offset: int,
) -> _Found:
    # A text search reads each match's body to filter it, and a sort then held every
    # match's body up to the page's end (OFFSET): the page's rows are picked first by
    # their keys, then read whole (``_picked``). Only past the first rows: picking costs
    # a second look at the project's rows, and a first page holds little anyway.
    pick = bool(f.text) and offset + limit > PICK_FROM
    if f.sort in ("-timestamp", "timestamp"):
        return _time_page(store, where, params, f.sort, limit, offset, pick=pick)
    select = _picked(where, ORDER_BY[f.sort], pick, bool(store.cluster))
    rows = store.query_rows(
        budgeted(select, ORDER_BY[f.sort]),
        {**params, "limit": limit + 1, "offset": offset},
        settings=_TEXT_READ if pick else None,
    )
    return _cut(rows[:limit], len(rows) > limit)


# Rows into a list (offset and page) from which a text search's page is picked first.
PICK_FROM = 1_000
# For the reads of a text search that go through many matches (its count, a deep page's
# pick): the body is read in WHERE, not moved to PREWHERE. As PREWHERE the engine read
# the body in blocks that held ~800 MiB for 100,000 logs of 10 KB, against ~50 MiB in
# WHERE, in the same time (0.38-0.49 s against 0.41-0.44; thirty-first session), and
# past ERRORTRACK_QUERY_MAX_MEMORY_BYTES a search could not be counted at all.
_TEXT_READ = {"optimize_move_to_prewhere": 0}


def _picked(where: str, order: str, pick: bool, cluster: bool = False) -> str:
    """The SELECT of a page (``limit``, ``offset`` parameters) of ``COLUMNS`` in ``order``:
    at once, or, with ``pick``, the page's rows chosen by their keys in a subquery that
    reads no body or attributes, then read whole. A search for a word in 200,000 logs of
    10 KB held 4.6 GB for page 199 of 1,000 (API review, thirty-first session). The
    outer read finds them by the table's key (project_id, timestamp) and id. On a
    cluster (``logs`` a Distributed table) the pick runs once, on the node asked, and its
    rows go to the shards (GLOBAL IN): a plain IN would be refused there
    (distributed_product_mode), or pick per shard."""
    page = f"ORDER BY {order} LIMIT {{limit:UInt32}} OFFSET {{offset:UInt64}}"
    if not pick:
        return f"SELECT {COLUMNS} FROM logs WHERE {where} {page}"
    member = "GLOBAL IN" if cluster else "IN"
    return (
        f"SELECT {COLUMNS} FROM logs WHERE project_id = {{project_id:UInt64}} "
        f"AND (timestamp, id) {member} (SELECT timestamp, id FROM logs WHERE {where} {page}) "
        f"ORDER BY {order}"
    )


def _cut(rows: list[Any], more: bool) -> _Found:
    kept, cut = within_budget(rows)
    return _Found(kept, more or cut)


def _time_page(
    store: ClickHouse,
    where: str,
    params: dict[str, Any],
    sort: str,
    limit: int,
    offset: int,
    *,
    pick: bool = False,
) -> _Found:
    """The page of ``ORDER BY timestamp, id`` without sorting every matching row.

    Read in the table's key order (ClickHouse stops at the page), with the row before the
    page and the row after it: unless one of those shares a timestamp with the page's
    edge, the page holds exactly these rows, and only their order within equal
    timestamps is left to settle here. Otherwise ``_tied_page``."""
    newest_first = sort == "-timestamp"
    lead = 1 if offset else 0
    order = f"timestamp {'DESC' if newest_first else 'ASC'}"
    select = _picked(where, order, pick, bool(store.cluster))
    # Budgeted in the page's complete order, which keeps the read's order by time; the
    # row before the page is not the page's: the page's first row is kept too, and the
    # row before counts nothing toward the page's bytes.
    rows = store.query_rows(
        budgeted(select, ORDER_BY[sort], keep=lead + 1, skip=lead),
        {**params, "limit": limit + 1 + lead, "offset": offset - lead},
        settings=_TEXT_READ if pick else None,
    )
    before, page, after = rows[:lead], rows[lead : lead + limit], rows[lead + limit :]
    if not page:
        return _Found([], False)
    edge_tied = (before and before[0][_TIMESTAMP] == page[0][_TIMESTAMP]) or (
        after and after[0][_TIMESTAMP] == page[-1][_TIMESTAMP]
    )
    if edge_tied:
        times = [row[_TIMESTAMP] for row in page]
        del rows, page  # let go of the first read's logs before the second read
        tied = _tied_page(store, where, params, sort, times, offset, _TEXT_READ if pick else None)
        return _cut(tied, bool(after))
    return _cut(sorted(page, key=_time_and_id, reverse=newest_first), bool(after))


def _time_and_id(row: tuple[Any, ...]) -> tuple[Any, int, int]:
    # ClickHouse orders a UUID by its second 64 bits, then its first (a test holds this
    # key to ClickHouse's ORDER BY), and cursors compare ids in ClickHouse.
    value = row[_ID].int
    return row[_TIMESTAMP], value & 0xFFFF_FFFF_FFFF_FFFF, value >> 64


def _tied_page(
    store: ClickHouse,
    where: str,
    params: dict[str, Any],
    sort: str,
    times: list[Any],
    offset: int,
    settings: dict[str, Any] | None = None,
) -> list[Any]:
    """A page whose first or last timestamp is shared with rows beyond it (``settings``:
    those of the page's first read, for its counts too).

    Which rows hold the page's timestamps does not depend on how ties are ordered, so
    the page is those timestamps' rows (``timestamp IN`` is a set of primary-key points:
    a few granules) sorted completely, less the rows of the first timestamp that belong
    to earlier pages. That one count is a point lookup too, unless the whole page shares
    one timestamp."""
    first, last = times[0], times[-1]
    skip = 0
    if offset and first != last:
        # Every row at the first timestamp sorts before the page's later timestamps, so
        # those not on this page came before it.
        at_first = f"{where} AND timestamp = {{first:{_TIME}}}"
        skip = _count_where(store, at_first, params, first, settings)
        skip -= times.count(first)
    elif offset:
        beyond = ">" if sort == "-timestamp" else "<"
        before = f"{where} AND timestamp {beyond} {{first:{_TIME}}}"
        skip = offset - _count_where(store, before, params, first, settings)
    select = (
        f"SELECT {COLUMNS} FROM logs WHERE {where} AND timestamp IN {{times:Array({_TIME})}} "
        f"ORDER BY {ORDER_BY[sort]} LIMIT {{limit:UInt32}} OFFSET {{skip:UInt64}}"
    )
    return store.query_rows(
        budgeted(select, ORDER_BY[sort]),
        {
            **params,
            "times": [ch_time(t) for t in dict.fromkeys(times)],
            "limit": len(times),
            # Never below 0, even if rows were deleted between the two queries.
            "skip": max(skip, 0),
        },
        settings=settings,
    )


def _count_where(
    store: ClickHouse,
    where: str,
    params: dict[str, Any],
    first: Any,
    settings: dict[str, Any] | None = None,
) -> int:
    return int(
        store.query_rows(
            f"SELECT count() FROM logs WHERE {where}",
            {**params, "first": ch_time(first)},
            settings=settings,
        )[0][0]
    )


def _after(cursor: Cursor) -> tuple[str, dict[str, Any]]:
    """The rows after ``cursor`` in its sort (``ORDER_BY``), as a WHERE term."""
    params: dict[str, Any] = {"c_time": ch_time(cursor.timestamp), "c_id": str(cursor.id)}
    at, log_id = f"{{c_time:{_TIME}}}", "{c_id:UUID}"
    if cursor.sort == "timestamp":
        # Spelled with a plain range first, which the primary key narrows.
        return f"(timestamp >= {at} AND (timestamp > {at} OR id > {log_id}))", params
    later = f"(timestamp <= {at} AND (timestamp < {at} OR id < {log_id}))"
    if cursor.sort == "-timestamp":
        return later, params
    # The severity sorts: severity first (nulls last), then newest first, then id.
    if cursor.severity is None:
        return f"(severity_number IS NULL AND {later})", params
    params["c_severity"] = cursor.severity
    beyond = "<" if cursor.sort == "-severity" else ">"
    return (
        f"(severity_number {beyond} {{c_severity:UInt8}} OR severity_number IS NULL"
        f" OR (severity_number = {{c_severity:UInt8}} AND {later}))",
        params,
    )


def _count(
    store: ClickHouse,
    where: str,
    params: dict[str, Any],
    f: LogFilter,
    page: PageRequest,
    cap: int,
) -> tuple[int, bool]:
    """(total, exact). Level and time filters count exactly: the severity_counts
    projection and the sort key answer them without reading the rows. Any other filter
    counts at most ``max(cap, end of this page)`` matches, plus one to tell "more"."""
    if not (f.text or f.attributes or f.trace_id):
        return int(store.query_rows(f"SELECT count() FROM logs WHERE {where}", params)[0][0]), True
    limit = max(cap, page.offset + page.per_page)
    found = int(
        store.query_rows(
            f"SELECT count() FROM (SELECT 1 FROM logs WHERE {where} LIMIT {{cap:UInt64}})",
            {**params, "cap": limit + 1},
            settings=_TEXT_READ if f.text else None,
        )[0][0]
    )
    return (found, True) if found <= limit else (limit, False)


def trace_logs(
    store: ClickHouse, project_id: int, trace_id: str, limit: int
) -> tuple[list[Any], bool]:
    """A trace's first ``limit`` logs in the order they happened (for the trace view),
    fewer when they hold more than ``paging.PAGE_BYTES``; and whether any were left out."""
    where, params = where_clause(project_id, LogFilter(trace_id=trace_id))
    found = _time_page(store, where, params, "timestamp", limit, 0)
    return [log_item(row) for row in found.rows], found.more


def log_item(row: tuple[Any, ...]) -> dict[str, Any]:
    log_id, level, severity, body, trace_id, span_id, attrs, timestamp, ingested = row
    return {
        "id": str(log_id),
        "level": level,
        "severity_number": severity,
        "body": body,
        # Stored empty for logs emitted outside a span: "no trace" reads better as null.
        "trace_id": trace_id or None,
        "span_id": span_id or None,
        "attributes": stored_json(attrs),
        "timestamp": iso_utc(timestamp),
        "ingested_at": iso_utc(ingested),
    }


_EMPTY_OBJECT = orjson.Fragment(b"{}")


def stored_json(text: str) -> orjson.Fragment:
    """A JSON object stored as the SDK sent it (a log's attributes, an event's payload),
    for the response as those very bytes.

    Not parsed and dumped again: orjson reads an integer beyond 64 bits as a float (the
    type changed on the way out) and one beyond a double's range not at all. Log
    ingest (msgspec) stores both as sent, so one such log made every page that held it
    a 500. The text was checked to be JSON at ingest; an empty column (rows written by
    hand) is an empty object."""
    return orjson.Fragment(text) if text else _EMPTY_OBJECT


def iso_utc(value: dt.datetime) -> str:
    """ISO 8601 with microseconds and a Z; ClickHouse hands DateTime64 back naive in UTC."""
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value.isoformat(timespec="microseconds") + "Z"


# What a DateTime64 column holds; no log is stored outside it, so a time beyond it
# selects as the bound does.
_TIME_MIN = dt.datetime(1900, 1, 1, tzinfo=dt.UTC)
_TIME_MAX = dt.datetime(2299, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)


def ch_time(value: dt.datetime) -> str:
    # Sent as text in UTC so that no client or session time zone can shift it; isoformat
    # writes a four-digit year (strftime's %Y writes "1" for year 1, which ClickHouse
    # refused: a 500 until the seventeenth session).
    # ClickHouse hands DateTime64 back naive in UTC; astimezone would read that as local.
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    value = min(max(value.astimezone(dt.UTC), _TIME_MIN), _TIME_MAX)
    return value.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
