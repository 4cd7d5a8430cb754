"""Reading logs: plain functions over the ClickHouse store.

Every value from the caller reaches ClickHouse as a bound parameter (``{name:Type}``);
only fixed fragments chosen from tables in this module are put into the SQL text.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson

from errortrack.analytics import ClickHouse
from errortrack.logs.filters import AttrFilter, LogFilter, as_bool, as_float, as_int
from errortrack.paging import PageRequest, page_body

COLUMNS = "id, level, severity_number, body, trace_id, span_id, attributes, timestamp, ingested_at"
# Only the table's sort key (project_id, timestamp): ClickHouse then reads the newest
# granules first and stops at the page (about 10x faster at 10 M rows than adding ``id``
# as a tie-breaker, which forces a full sort; see bench/RESULTS.md). Rows sharing a
# timestamp come back in storage order, which is stable while the parts do not change.
ORDER_BY = {
    "-timestamp": "timestamp DESC",
    "timestamp": "timestamp ASC",
    "-severity": "severity_number DESC NULLS LAST, timestamp DESC",
    "severity": "severity_number ASC NULLS LAST, timestamp DESC",
}
_LIKE_SPECIALS = str.maketrans({"\\": "\\\\", "%": "\\%", "_": "\\_"})
# ClickHouse's lower() (which the body index is built on) folds ASCII only; fold the
# search text the same way so that "Timeout" finds "TIMEOUT" and the index still applies.
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def where_clause(
    project_id: int, f: LogFilter, *, never_strings: frozenset[str] = frozenset()
) -> tuple[str, dict[str, Any]]:
    """The WHERE text and its parameters for one project and filter. ``never_strings``:
    attribute names known not to occur as strings in the project (see list_logs)."""
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
        clauses.append(_attr_clause(attr, f"a{i}", params, attr.name not in never_strings))
    return " AND ".join(clauses), params


def _attr_clause(attr: AttrFilter, key: str, params: dict[str, Any], strings: bool) -> str:
    """Matches when the attribute, in the map of its own type, equals one of the values.

    The text of the value decides which typed maps can match: "503" can be the integer
    503, the double 503.0 or the string "503"; "true" a boolean or a string. A value
    never matches an attribute of a type it cannot be (e.g. "abc" and an integer).
    """
    params[f"{key}_name"] = attr.name
    name = f"{{{key}_name:String}}"
    typed: list[tuple[str, str, list[Any]]] = [
        ("attr_string", "String", list(attr.values) if strings else []),
        ("attr_int", "Int64", [v for v in map(as_int, attr.values) if v is not None]),
        ("attr_float", "Float64", [v for v in map(as_float, attr.values) if v is not None]),
        ("attr_bool", "Bool", [v for v in map(as_bool, attr.values) if v is not None]),
    ]
    parts = []
    for column, ch_type, values in typed:
        if not values:
            continue
        param = f"{key}_{column}"
        params[param] = values
        # mapContains first: a missing key reads as the type's default ('' / 0 / false).
        parts.append(
            f"(mapContains({column}, {name}) AND {column}[{name}] IN {{{param}:Array({ch_type})}})"
        )
    return "(" + " OR ".join(parts) + ")" if parts else "0"


def list_logs(
    store: ClickHouse, project_id: int, f: LogFilter, page: PageRequest
) -> dict[str, Any]:
    """One page of a project's logs, newest first unless ``f.sort`` says otherwise."""
    where, params = where_clause(project_id, f, never_strings=_never_strings(store, project_id, f))
    total = int(store.query_rows(f"SELECT count() FROM logs WHERE {where}", params)[0][0])
    items: list[dict[str, Any]] = []
    if not page.past_end(total):
        rows = store.query_rows(
            f"SELECT {COLUMNS} FROM logs WHERE {where} ORDER BY {ORDER_BY[f.sort]} "
            "LIMIT {limit:UInt32} OFFSET {offset:UInt64}",
            {**params, "limit": page.per_page, "offset": page.offset},
        )
        items = [log_item(row) for row in rows]
    return page_body(items, total, page)


def _never_strings(store: ClickHouse, project_id: int, f: LogFilter) -> frozenset[str]:
    """Attribute names filtered with values that could also be numbers or booleans, but
    that never occur as string attributes in this project.

    Reading the string map is what makes ``attr[http.status_code]=503`` slow (~4x the
    integer map alone); whether a name occurs as a string at all is answered by the
    bloom filter on the string map's keys in a few milliseconds, so it is worth asking.
    """
    names = [
        a.name
        for a in f.attributes
        if any(
            as_int(v) is not None or as_float(v) is not None or as_bool(v) is not None
            for v in a.values
        )
    ]
    found = set()
    for name in names:
        rows = store.query_rows(
            "SELECT 1 FROM logs WHERE project_id = {project_id:UInt64} "
            "AND mapContains(attr_string, {name:String}) LIMIT 1",
            {"project_id": project_id, "name": name},
        )
        if not rows:
            found.add(name)
    return frozenset(found)


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
    log_id, level, severity, body, trace_id, span_id, attributes, timestamp, ingested = row
    return {
        "id": str(log_id),
        "level": level,
        "severity_number": severity,
        "body": body,
        # Stored empty for logs emitted outside a span: "no trace" reads better as null.
        "trace_id": trace_id or None,
        "span_id": span_id or None,
        "attributes": orjson.loads(attributes) if attributes else {},
        "timestamp": iso_utc(timestamp),
        "ingested_at": iso_utc(ingested),
    }


def iso_utc(value: dt.datetime) -> str:
    """ISO 8601 with microseconds and a Z; ClickHouse hands DateTime64 back naive in UTC."""
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value.isoformat(timespec="microseconds") + "Z"


def _ch_time(value: dt.datetime) -> str:
    # Sent as text in UTC so that no client or session time zone can shift it.
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
