"""``log`` items -> rows of the ``logs`` table (ARCHITECTURE.md "Logs", the seed's rules).

This runs once per log at ingest rates of 100k logs/s, so it stays a flat loop over
plain dicts: no per-log objects beyond the row dict itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from errortrack.errors import BadRequest
from errortrack.ingest.envelope import container_items

if TYPE_CHECKING:
    from errortrack.ingest.items import ItemContext, ItemRows

# Derived from level by the server; any other level keeps its text and gets NULL.
SEVERITY = {"trace": 1, "debug": 5, "info": 9, "warn": 13, "error": 17, "fatal": 21}
# Node puts the active span in this attribute instead of a top-level span_id.
PARENT_SPAN_ATTRIBUTE = "sentry.trace.parent_span_id"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def handle_log(payload: bytes, headers: dict[str, Any], ctx: ItemContext) -> ItemRows:
    from errortrack.ingest.items import ItemRows

    logs = container_items(payload, "log")
    received = ctx.received_at.timestamp()
    pid, retention = ctx.project_id, ctx.retention_days
    return ItemRows(logs=[_row(log, i, pid, received, retention) for i, log in enumerate(logs)])


def _row(log: Any, index: int, project_id: int, received: float, retention: int) -> dict[str, Any]:
    if type(log) is not dict:
        raise BadRequest(f"log {index} is not a JSON object")
    attributes = log.get("attributes")
    if attributes is None:
        attributes = {}
    elif type(attributes) is not dict:
        raise BadRequest(f"log {index}: attributes must be an object")
    level = log.get("level")
    if type(level) is not str:
        level = ""
    timestamp = log.get("timestamp")
    if type(timestamp) is not float and type(timestamp) is not int:
        timestamp = received
    body = log.get("body")
    if type(body) is not str:
        body = "" if body is None else orjson.dumps(body).decode()
    trace_id, span_id = _trace_and_span(log, attributes)
    # No "id": the column's DEFAULT generateUUIDv4() (clickhouse/0010) makes it at
    # insert, which cost less than making 100 UUIDs per item here (bench/RESULTS.md).
    return {
        "project_id": project_id,
        "timestamp": timestamp,
        "ingested_at": received,
        "level": level,
        "severity_number": SEVERITY.get(level),
        "body": body,
        "trace_id": trace_id,
        "span_id": span_id,
        # The object itself, not its text: ClickHouse stores a JSON object sent for a
        # String column as the object's text (input_format_json_read_objects_as_strings,
        # spool/writer.py), so the row is dumped once and nothing is escaped twice.
        # orjson keeps every JSON type (a string "7" stays a string), so the attributes
        # come back exactly as sent.
        "attributes": attributes,
        **typed_maps(attributes),
        "retention_days": retention,
    }


def _trace_and_span(log: dict[str, Any], attributes: dict[str, Any]) -> tuple[str, str]:
    """Both only for logs emitted inside a span; SDKs send a propagation trace_id anyway."""
    span_id = log.get("span_id")
    if not span_id:
        parent = attributes.get(PARENT_SPAN_ATTRIBUTE)
        span_id = parent.get("value") if isinstance(parent, dict) else None
    if not span_id or not isinstance(span_id, str):
        return "", ""
    trace_id = log.get("trace_id")
    return (trace_id if isinstance(trace_id, str) else ""), span_id


def typed_maps(attributes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each attribute in the map of its declared type, for filtering.

    Arrays (and unknown types) go to attr_string as JSON text so that they stay
    searchable; values that do not fit their declared type are left out of the maps
    (they are still in ``attributes``).
    """
    strings: dict[str, Any] = {}
    ints: dict[str, Any] = {}
    floats: dict[str, Any] = {}
    bools: dict[str, Any] = {}
    for name, attr in attributes.items():
        if type(attr) is not dict:
            continue
        value: Any = attr.get("value")
        kind = attr.get("type")
        vtype = type(value)
        if kind == "string":
            strings[name] = value if vtype is str else orjson.dumps(value).decode()
        elif kind == "integer":
            if vtype is int and INT64_MIN <= value <= INT64_MAX:
                ints[name] = value
            elif vtype is str and (number := _as_int(value)) is not None:
                ints[name] = number
        elif kind == "double":
            if vtype is float or vtype is int:
                floats[name] = value
        elif kind == "boolean":
            if vtype is bool:
                bools[name] = value
        elif value is not None:
            strings[name] = orjson.dumps(value).decode()
    return {"attr_string": strings, "attr_int": ints, "attr_float": floats, "attr_bool": bools}


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            return None
    if isinstance(value, int) and INT64_MIN <= value <= INT64_MAX:
        return value
    return None
