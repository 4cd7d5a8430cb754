"""One trace's whole story: its spans as a tree, the logs emitted in it, its error events.

Three reads, each narrowed by the project (the sort key's prefix) and the trace id (a
bloom filter index on every table), each capped so one huge trace cannot exhaust memory
(spans in two steps, ``_PICK`` then ``_fetch``, for that).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from errortrack import paging
from errortrack.analytics import ClickHouse
from errortrack.errors import NotFound
from errortrack.issues.cursor import SpanCursor
from errortrack.issues.read import EVENT_COLUMNS, event_item
from errortrack.logs.query import ch_time, iso_utc, stored_json, trace_logs
from errortrack.paging import PageRequest, page_body

MAX_SPANS = 10_000
# Nesting shown as such; deeper spans are listed under their ancestor at this depth. Each
# level is two levels of JSON (the span, its children), and orjson refuses a document
# nested past 255: a recursive function traced 127 levels deep made its trace a 500.
MAX_DEPTH = 100
MAX_LOGS = 1_000
MAX_EVENTS = 100
SPAN_COLUMNS = (
    "span_id, parent_span_id, segment_id, segment_name, is_segment, op, description, "
    "start_timestamp, duration_us, status, attributes"
)
_WHERE = "project_id = {project_id:UInt64} AND trace_id = {trace_id:String}"


def trace_story(store: ClickHouse, project_id: int, trace_id: str) -> dict[str, Any]:
    """404 when the project holds nothing at all for this trace id. Spans and logs each
    stop at their count or at ``paging.PAGE_BYTES``, whichever comes first, and
    ``truncated`` says which were cut."""
    params = {"project_id": project_id, "trace_id": trace_id}
    # LIMIT 1 BY: a transaction the SDK sent again (it saw no answer to the first try) is
    # stored twice, and showed every span twice; each span id is shown once.
    picked = store.query_rows(
        f"SELECT {_PICK} FROM spans WHERE {_WHERE} "
        f"{_PICK_ORDER} LIMIT 1 BY span_id LIMIT {{limit:UInt32}}",
        {**params, "limit": MAX_SPANS + 1},
    )
    kept, spans_cut = _within_budget(picked)
    spans = _fetch(store, params, kept[:MAX_SPANS])
    events = store.query_rows(
        f"SELECT {EVENT_COLUMNS} FROM events WHERE {_WHERE} "
        "ORDER BY timestamp, event_id LIMIT {limit:UInt32}",
        {**params, "limit": MAX_EVENTS + 1},
    )
    logs, logs_cut = trace_logs(store, project_id, trace_id, MAX_LOGS)
    if not (spans or events or logs):
        raise NotFound("trace not found")
    # One row past each cap says whether the list was cut: a trace of 100,000 spans came
    # back as 10,000 with nothing to tell a program so (review, twentieth session).
    truncated = {
        "spans": spans_cut or len(kept) > MAX_SPANS,
        "logs": logs_cut,
        "events": len(events) > MAX_EVENTS,
    }
    events = events[:MAX_EVENTS]
    return {
        "trace_id": trace_id,
        "spans": span_tree([span_node(row) for row in spans]),
        "span_count": len(spans),
        "logs": logs,
        "events": [event_item(row) for row in events],
        "truncated": truncated,
    }


def trace_spans(
    store: ClickHouse,
    project_id: int,
    trace_id: str,
    page: PageRequest,
    *,
    cursor: SpanCursor | None = None,
) -> dict[str, Any]:
    """A trace's spans as a flat list in the tree's order (start time, then span id), each
    span id once, without ``children``, paged by number or by keyset ``cursor`` (the
    ``next_cursor`` of the previous page: spans of a trace still arriving, with earlier
    starts, shifted numbered pages and a walk listed some twice and others never). The
    way past the trace view's first ``MAX_SPANS``. An empty page when the project holds
    no span of the trace."""
    params: dict[str, Any] = {"project_id": project_id, "trace_id": trace_id}
    found = store.query_rows(f"SELECT uniqExact(span_id) FROM spans WHERE {_WHERE}", params)
    total = int(found[0][0])
    picked: list[Any] = []
    limit = {"limit": page.per_page + 1}
    select = f"SELECT {_PICK} FROM spans WHERE {_WHERE}"
    order = f"{_PICK_ORDER} LIMIT 1 BY span_id"
    if cursor is not None:
        # Each span id's first copy, then the cursor: the cursor first let a later copy
        # of a span id listed before it (a sender's retry with another start) come again.
        # The trace's spans are all read for that (their small columns), by its key as
        # the count reads them.
        select = f"SELECT * FROM ({select} {order}) WHERE"
        picked = store.query_rows(
            f"{select} {_SPANS_AFTER} {_ORDER} LIMIT {{limit:UInt32}}",
            {**params, **limit, "c_start": ch_time(cursor.start), "c_id": cursor.span_id},
        )
    elif not page.past_end(total):
        picked = store.query_rows(
            f"{select} {order} LIMIT {{limit:UInt32}} OFFSET {{offset:UInt64}}",
            {**params, **limit, "offset": page.offset},
        )
    more = len(picked) > page.per_page
    # A page cut by its byte budget goes on by its cursor, as one cut by per_page does.
    kept, cut = _within_budget(picked[: page.per_page])
    shown = _fetch(store, params, kept)
    items = [span_node(row) for row in shown]
    for item in items:
        del item["children"]
    body = page_body(items, total, page)
    if cursor is not None:
        body["page"] = None
    last = shown[-1] if (more or cut) and shown else None
    body["next_cursor"] = last and SpanCursor.after_row(last[_START], last[0]).encode()
    return body


_ORDER = "ORDER BY start_timestamp, span_id"


# Spans are read in two steps. The first picks the page's spans (each span id's first
# copy, the order, the count or cursor) from their small columns and each one's size; the
# second reads the picked spans whole. Read in one step, ``LIMIT 1 BY`` kept the engine
# from leaving the large columns until after the sort (as it does for the logs pages), so
# a trace's every description and attributes were held through it, whatever the caps:
# a trace of 30,000 spans named with 50 KB took the worker to 2.3 GB for a 32 MiB page,
# 1.4 GB for a page of one span (API review, thirty-first session).
# A span's size against the page's byte budget: its description and attributes, and the
# short columns, which ingest bounds only since the thirty-first session (1 MB parent ids
# stored before made a 954 MiB page).
_SIZE = " + ".join(
    f"length({column})"
    for column in ("description", "attributes", "parent_span_id", "segment_id", "op", "status")
)
_PICK = f"span_id, start_timestamp, {_SIZE} AS _size"
# Which copy of a span id the pick keeps: the first to start, and of copies starting
# together (a re-sent transaction, or a sender's own copies) the smallest, so that the
# fetch reads a copy of the size the budget counted (one copy counted, a larger one read
# made pages of 25 KB against a budget of 1 KB; diff review, thirty-first session).
_PICK_ORDER = f"{_ORDER}, _size"
# Spans fetched per query: their ids and starts go as parameters, which a ClickHouse
# server takes in the URL (128 KiB a field by default: ~3,300 spans).
_FETCH_CHUNK = 1_000


def _within_budget(picked: list[Any]) -> tuple[list[Any], bool]:
    """The picked spans (``_PICK`` rows) before the first past the page's byte budget
    (``paging.PAGE_BYTES``; the first span always), and whether any was left out."""
    used = 0
    for i, (_, _, size) in enumerate(picked):
        used += size
        if i and used > paging.PAGE_BYTES:
            return picked[:i], True
    return picked, False


def _fetch(store: ClickHouse, params: dict[str, Any], picked: list[Any]) -> list[Any]:
    """The picked spans' rows (``SPAN_COLUMNS``), in the picked order: for each, a copy
    with the picked start and size. A span deleted since it was picked (retention, a
    project's deletion) is left out; the page is shorter, and its cursor goes on."""
    found: dict[tuple[str, Any, int], Any] = {}
    for at in range(0, len(picked), _FETCH_CHUNK):
        chunk = picked[at : at + _FETCH_CHUNK]
        rows = store.query_rows(
            f"SELECT {SPAN_COLUMNS}, {_SIZE} FROM spans WHERE {_WHERE} "
            "AND span_id IN {ids:Array(String)} "
            "AND start_timestamp IN {starts:Array(DateTime64(6, 'UTC'))}",
            {
                **params,
                "ids": [span_id for span_id, _, _ in chunk],
                "starts": sorted({ch_time(start) for _, start, _ in chunk}),
            },
        )
        for row in rows:
            found.setdefault((row[0], row[_START], row[-1]), row[:-1])
    return [
        row
        for span_id, start, size in picked
        if (row := found.get((span_id, start, size))) is not None
    ]


# The spans after a cursor in the list's order, a plain range first for the table's key.
_SPANS_AFTER = (
    "(start_timestamp >= {c_start:DateTime64(6, 'UTC')} "
    "AND (start_timestamp > {c_start:DateTime64(6, 'UTC')} OR span_id > {c_id:String}))"
)
# Where the start is in a row of SPAN_COLUMNS.
_START = 7


def span_node(row: tuple[Any, ...]) -> dict[str, Any]:
    span_id, parent, segment_id, segment_name, is_segment, op, description, *rest = row
    start, duration_us, status, attributes = rest
    return {
        "span_id": span_id,
        "parent_span_id": parent or None,
        "segment_id": segment_id or None,
        "segment_name": segment_name or None,
        "is_segment": bool(is_segment),
        "op": op or None,
        "description": description or None,
        "start_timestamp": iso_utc(start),
        "end_timestamp": iso_utc(start + dt.timedelta(microseconds=duration_us)),
        "duration_ms": duration_us / 1000,
        "status": status or None,
        # As stored (msgspec kept integers beyond 64 bits, and any nesting): parsing them
        # again with orjson failed on such a value, a 500 for the whole trace.
        "attributes": stored_json(attributes),
        "children": [],
    }


def span_tree(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Children under their parents, in start order. A span whose parent is missing (not
    sent, or reported elsewhere) becomes a root; so does one whose parent link would close
    a cycle (SDK data is not trusted to be a tree). Spans nested deeper than ``MAX_DEPTH``
    are listed, in start order, under their ancestor at that depth (``parent_span_id``
    still names each one's parent)."""
    # One node per span id, the first (the query keeps one per id already): a second
    # node of one id could hang under itself, and ``_top`` would never end.
    by_id: dict[str, dict[str, Any]] = {}
    for node in nodes:
        by_id.setdefault(node["span_id"], node)
    nodes = [node for node in nodes if by_id[node["span_id"]] is node]
    # Span id -> a span above it in its tree, walked to the tree's top by ``_top``.
    above: dict[str, str] = {}
    roots = []
    for node in nodes:
        parent = by_id.get(node["parent_span_id"] or "")
        # A node is attached once, while it is still the top of its own tree: attaching
        # it closes a cycle exactly when its parent's tree is its own.
        if parent is None or _top(above, parent["span_id"]) == node["span_id"]:
            roots.append(node)
            continue
        parent["children"].append(node)
        above[node["span_id"]] = parent["span_id"]
    _flatten_below(roots, MAX_DEPTH)
    return roots


def _flatten_below(roots: list[dict[str, Any]], depth: int) -> None:
    """Every node at ``depth`` gets all its descendants as its children, in start order
    (then span id, as the query orders them). Iterative: no recursion limit either."""
    level = 1
    current = roots
    while current and level < depth:
        current = [child for node in current for child in node["children"]]
        level += 1
    for node in current:
        below: list[dict[str, Any]] = []
        stack = list(node["children"])
        while stack:
            child = stack.pop()
            below.append(child)
            stack.extend(child["children"])
            child["children"] = []
        below.sort(key=lambda n: (n["start_timestamp"], n["span_id"]))
        node["children"] = below


def _top(above: dict[str, str], start: str) -> str:
    """The top of ``start``'s tree. Each walk points every span it passed at the top
    (path compression): walking up the whole chain for every span of one deep chain was
    quadratic, 4.5 s of an API thread for 10,000 spans."""
    path = []
    current = start
    while current in above:
        path.append(current)
        current = above[current]
    for span_id in path:
        above[span_id] = current
    return current
