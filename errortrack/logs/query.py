"""Reading logs: plain functions over the ClickHouse store.

Every value from the caller reaches ClickHouse as a bound parameter (``{name:Type}``);
only fixed fragments chosen from tables in this module are put into the SQL text.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson

from errortrack.analytics import ClickHouse
from errortrack.logs import attributes
from errortrack.logs.filters import LogFilter
from errortrack.paging import PageRequest, page_body

COLUMNS = "id, level, severity_number, body, trace_id, span_id, attributes, timestamp, ingested_at"
# Only the table's sort key (project_id, timestamp): ClickHouse then reads the newest
# granules first and stops at the page (about 10x faster at 10 M rows than adding ``id``
# as a tie-breaker, which forces a full sort; see bench/RESULTS.md). Rows sharing a
# timestamp come back in storage order, which is stable while the parts do not change.
ORDER_BY = {
    "-timestamp": "timestamp DESC",
    "timestamp": "timestamp ASC",
    # These sort every matching row anyway, so ``id`` costs little here, and without it
    # ClickHouse's partial sort orders tied rows differently for each LIMIT/OFFSET:
    # paging skipped some logs and repeated others (an envelope's logs sent without a
    # time all share its arrival time).
    "-severity": "severity_number DESC NULLS LAST, timestamp DESC, id DESC",
    "severity": "severity_number ASC NULLS LAST, timestamp DESC, id DESC",
}
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
        params["start"] = _ch_time(f.start)
    if f.end:
        clauses.append("timestamp < {end:DateTime64(6, 'UTC')}")
        params["end"] = _ch_time(f.end)
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
    count_cap: int = COUNT_CAP,
) -> dict[str, Any]:
    """One page of a project's logs, newest first unless ``f.sort`` says otherwise.

    The first page is read before anything is counted: when it is not full, its length is
    the exact total and no count runs at all (every search that finds fewer than a page
    of logs costs one query). Later pages count first, so that a page past the end costs
    no read.
    """
    where, params = where_clause(project_id, f, absent=attributes.absent_maps(store, project_id, f))
    if page.offset == 0:
        items = _page(store, where, params, f, page)
        if len(items) < page.per_page:
            return page_body(items, len(items), page)
        total, exact = _count(store, where, params, f, page, count_cap)
        return page_body(items, total, page, exact=exact)
    total, exact = _count(store, where, params, f, page, count_cap)
    items = [] if exact and page.past_end(total) else _page(store, where, params, f, page)
    return page_body(items, total, page, exact=exact)


def _page(
    store: ClickHouse, where: str, params: dict[str, Any], f: LogFilter, page: PageRequest
) -> list[dict[str, Any]]:
    rows = store.query_rows(
        f"SELECT {COLUMNS} FROM logs WHERE {where} ORDER BY {ORDER_BY[f.sort]} "
        "LIMIT {limit:UInt32} OFFSET {offset:UInt64}",
        {**params, "limit": page.per_page, "offset": page.offset},
    )
    return [log_item(row) for row in rows]


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
        )[0][0]
    )
    return (found, True) if found <= limit else (limit, False)


def trace_logs(store: ClickHouse, project_id: int, trace_id: str, limit: int) -> list[Any]:
    """A trace's logs in the order they happened (for the trace view), at most ``limit``."""
    where, params = where_clause(project_id, LogFilter(trace_id=trace_id))
    rows = store.query_rows(
        f"SELECT {COLUMNS} FROM logs WHERE {where} ORDER BY {ORDER_BY['timestamp']} "
        "LIMIT {limit:UInt32}",
        {**params, "limit": limit},
    )
    return [log_item(row) for row in rows]


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


def _ch_time(value: dt.datetime) -> str:
    # Sent as text in UTC so that no client or session time zone can shift it; isoformat
    # writes a four-digit year (strftime's %Y writes "1" for year 1, which ClickHouse
    # refused: a 500 until the seventeenth session).
    value = min(max(value.astimezone(dt.UTC), _TIME_MIN), _TIME_MAX)
    return value.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
