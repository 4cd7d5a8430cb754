"""``span`` items, version 2 (Node 11 streams spans) -> span rows.

Payload ``{"version": 2, "items": [span, ...]}``; each span carries ``name``,
``trace_id``, ``span_id``, ``parent_span_id``, float ``start_timestamp`` and
``end_timestamp``, ``is_segment`` (true on the transaction's root), ``status`` and typed
``attributes`` (``sentry.op``, ``sentry.segment.name``, ``sentry.segment.id``, ...),
stored exactly as sent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from errortrack import timestamps
from errortrack.errors import BadRequest
from errortrack.ingest.envelope import container_items
from errortrack.traces.rows import anchor_of, hex_id, item_shift, placed, span_hex, span_row, text

if TYPE_CHECKING:
    from errortrack.ingest.items import ItemContext, ItemRows


def handle_span(payload: bytes, headers: dict[str, Any], ctx: ItemContext) -> ItemRows:
    from errortrack.ingest.items import ItemRows

    spans = container_items(payload, "span", exact=True)
    return ItemRows(spans=rows(spans, ctx))


def _attribute_text(attributes: dict[str, Any], name: str) -> str:
    attr = attributes.get(name)
    value = attr.get("value") if isinstance(attr, dict) else None
    return value if isinstance(value, str) else ""


def _anchor(spans: list[Any], received: float, drift: float) -> float | None:
    segment = None
    starts = []
    for span in spans:
        start = timestamps.finite(span.get("start_timestamp")) if isinstance(span, dict) else None
        if start is not None:
            starts.append(start)
            if segment is None and span.get("is_segment") is True:
                segment = start
    return anchor_of(segment, starts, received, drift)


def _times(spans: list[Any]) -> list[float]:
    found = []
    for span in spans:
        if isinstance(span, dict):
            for key in ("start_timestamp", "end_timestamp"):
                if (ts := timestamps.finite(span.get(key))) is not None:
                    found.append(ts)
    return found


def rows(spans: list[Any], ctx: ItemContext) -> list[dict[str, Any]]:
    received = ctx.received_at.timestamp()
    anchor = _anchor(spans, received, ctx.drift)
    # One shift for the whole item (the clock drift, or to the arrival when the SDK's
    # clock is implausible): spans keep their places relative to each other.
    shift = item_shift(anchor, _times(spans), received, ctx.drift)
    placed_anchor = received if anchor is None else anchor + shift
    return [_row(span, i, ctx, received, shift, placed_anchor) for i, span in enumerate(spans)]


def _row(
    span: Any, index: int, ctx: ItemContext, received: float, shift: float, anchor: float
) -> dict[str, Any]:
    if not isinstance(span, dict) or not hex_id(span, "trace_id") or not span_hex(span, "span_id"):
        raise BadRequest(f"span {index} needs a trace_id and a span_id")
    attributes = span.get("attributes")
    if attributes is None:
        attributes = {}
    elif not isinstance(attributes, dict):
        raise BadRequest(f"span {index}: attributes must be an object")
    is_segment = span.get("is_segment") is True
    start, end = placed(
        timestamps.finite(span.get("start_timestamp")),
        timestamps.finite(span.get("end_timestamp")),
        shift,
        anchor,
        received,
    )
    name = text(span, "name")
    return span_row(
        project_id=ctx.project_id,
        trace_id=hex_id(span, "trace_id"),
        span_id=span_hex(span, "span_id"),
        parent_span_id=span_hex(span, "parent_span_id"),
        segment_id=_attribute_text(attributes, "sentry.segment.id").lower()
        or (span_hex(span, "span_id") if is_segment else ""),
        segment_name=_attribute_text(attributes, "sentry.segment.name")
        or (name if is_segment else ""),
        is_segment=is_segment,
        op=_attribute_text(attributes, "sentry.op"),
        description=name,
        start=start,
        end=end,
        status=text(span, "status"),
        received_at=received,
        attributes=attributes,
        retention_days=ctx.retention_days,
    )
