"""Classic ``transaction`` items (Python; Node before span streaming) -> span rows.

A transaction is its root span (``contexts.trace`` with the transaction's name and
times) plus ``spans[]``. The root becomes a row with ``is_segment = true``; every row
carries the root's id and name (at most 200 characters: ``rows.MAX_SEGMENT_NAME``) as its
segment. Times are ISO strings (Python) or float seconds (Node).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
import orjson

from errortrack import timestamps
from errortrack.errors import BadRequest, PayloadTooLarge
from errortrack.ingest.logs import INT64_MAX, INT64_MIN
from errortrack.traces.rows import (
    check_ids,
    hex_id,
    infer_attributes,
    place_item,
    segment_name,
    span_hex,
    span_row,
    text,
)

if TYPE_CHECKING:
    from errortrack.ingest.items import ItemContext, ItemRows


def handle_transaction(payload: bytes, headers: dict[str, Any], ctx: ItemContext) -> ItemRows:
    from errortrack.ingest.items import ItemRows

    event = decode(payload)
    if not isinstance(event, dict):
        raise BadRequest("transaction payload must be a JSON object")
    return ItemRows(spans=rows(event, ctx))


def decode(payload: bytes) -> Any:
    """The transaction, read by msgspec as spans v2 are: integers beyond 64 bits exactly
    (orjson made them doubles, 18446744073709551617 became 1.8446744073709552e19 in
    ``data`` and ``tags``, and refused one beyond a double with a 400 for the whole
    transaction), so ``rows.infer_type`` keeps their digits as text. As fast as orjson
    here (5.9 against 5.8 us for a 2.6 KB transaction).

    msgspec nests on Python's stack and raises RecursionError some way short of 1,000
    levels, which orjson reads on its own (up to 1,024): such a payload is read by orjson
    instead, as it always was, rather than refused."""
    try:
        return msgspec.json.decode(payload)
    except msgspec.DecodeError as exc:
        raise BadRequest(f"transaction payload is not valid JSON: {exc}") from None
    except UnicodeDecodeError:
        raise BadRequest("transaction payload is not valid UTF-8") from None
    except RecursionError:
        pass
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"transaction payload is not valid JSON: {exc}") from None


def _root_context(event: dict[str, Any]) -> dict[str, Any]:
    contexts = event.get("contexts")
    trace = contexts.get("trace") if isinstance(contexts, dict) else None
    if (
        not isinstance(trace, dict)
        or not hex_id(trace, "trace_id")
        or not span_hex(trace, "span_id")
    ):
        raise BadRequest("transaction needs contexts.trace with trace_id and span_id")
    # Every span of the transaction carries them (``rows.MAX_ID``).
    check_ids(trace, "contexts.trace.", "trace_id", "span_id")
    return trace


# The longest release and environment copied into every span's attributes: Relay drops
# longer ones as invalid (sentry-release-parser), and so are they here, left out of the
# attributes, rather than repeated in every row: a 112 KB transaction with a 40 KB
# release and 4,000 children had made 322 MB of rows.
MAX_RELEASE = 200
MAX_ENVIRONMENT = 64


def _scope_value(value: Any, limit: int) -> Any:
    """A release or environment as every span's attribute: a string, number or boolean
    whose text is at most ``limit`` characters, typed as before; anything else (a longer
    one, an object, whose keys became one attribute each, or an array) is left out
    (``None``, as a value that was not sent)."""
    if isinstance(value, str):
        return value if len(value) <= limit else None
    if isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        # An integer beyond Int64 is kept as its digits (``rows.infer_type``), up to
        # 640 of them (errortrack/__init__.py: no longer one is read).
        return value if INT64_MIN <= value <= INT64_MAX or len(str(value)) <= limit else None
    return None


# Child spans one transaction may hold (413 past it). SDKs stop at 1,000 (sentry-sdk's
# and @sentry/node's maxSpans). A child of 16 bytes ({"span_id":"b"}) becomes a row of
# ~1.35 KB (the segment's name and ids, release and environment copied into it): 60,000
# of them in a 961 KB transaction, 2 KB gzipped, made 81 MB of rows and cost ~1.5 CPU-s
# (ingest review, thirty-first session); the envelope's 100,000-row cap was sized on logs.
MAX_SPANS = 10_000


def rows(event: dict[str, Any], ctx: ItemContext) -> list[dict[str, Any]]:
    trace = _root_context(event)
    received = ctx.received_at.timestamp()
    children = event.get("spans")
    spans = [s for s in children if isinstance(s, dict)] if isinstance(children, list) else []
    from errortrack.ingest.items import check_rows

    if len(spans) > MAX_SPANS:
        raise PayloadTooLarge(
            f"the transaction holds more than {MAX_SPANS:,} spans; SDKs send at most 1,000"
        )
    check_rows(1 + len(spans), "a transaction", ctx)
    # Before any row is made, as span items are (``spans_v2.rows``).
    for i, span in enumerate(spans):
        check_ids(span, f"span {i} of the transaction: ", "trace_id", "span_id")
    # The root (the event's own times) is the segment: index 0.
    times = [
        (timestamps.finite(s.get("start_timestamp")), timestamps.finite(s.get("timestamp")))
        for s in [event, *spans]
    ]
    (start, end), *placed = place_item(times, 0, received, ctx.drift)
    name = text(event, "transaction")
    common: dict[str, Any] = {
        "project_id": ctx.project_id,
        "trace_id": hex_id(trace, "trace_id"),
        "segment_id": span_hex(trace, "span_id"),
        "segment_name": segment_name(name),
        "received_at": received,
        "retention_days": ctx.retention_days,
    }
    # The SDK's scope (release, environment) is event-wide; every span gets it, as Node
    # 11 does, so spans filter alike whichever SDK sent them (bounded: ``_scope_value``).
    scope: dict[str, Any] = {
        "sentry.release": _scope_value(event.get("release"), MAX_RELEASE),
        "sentry.environment": _scope_value(event.get("environment"), MAX_ENVIRONMENT),
    }
    root = span_row(
        **common,
        span_id=span_hex(trace, "span_id"),
        parent_span_id=span_hex(trace, "parent_span_id"),
        is_segment=True,
        op=text(trace, "op"),
        description=text(trace, "description") or name,
        start=start,
        end=end,
        status=text(trace, "status"),
        attributes=infer_attributes(scope, trace.get("data"), event.get("tags")),
    )
    children_rows = (
        _child(s, common, scope, *times) for s, times in zip(spans, placed, strict=True)
    )
    return [root, *children_rows]


def _child(
    span: dict[str, Any], common: dict[str, Any], scope: dict[str, Any], begin: float, end: float
) -> dict[str, Any]:
    if not span_hex(span, "span_id"):
        raise BadRequest("every span of a transaction needs a span_id")
    return span_row(
        **{**common, "trace_id": hex_id(span, "trace_id") or common["trace_id"]},
        span_id=span_hex(span, "span_id"),
        # A child without a parent hangs off the root, where the SDK recorded it.
        parent_span_id=span_hex(span, "parent_span_id") or common["segment_id"],
        is_segment=False,
        op=text(span, "op"),
        description=text(span, "description"),
        start=begin,
        end=end,
        status=text(span, "status"),
        attributes=infer_attributes(scope, span.get("data"), span.get("tags")),
    )
