"""``span`` items -> span rows: version 2 (Node 11 streams spans) and the older single
span (the browser SDK's standalone spans: INP, CLS, LCP).

Version 2: payload ``{"version": 2, "items": [span, ...]}``; each span carries ``name``,
``trace_id``, ``span_id``, ``parent_span_id``, float ``start_timestamp`` and
``end_timestamp``, ``is_segment`` (true on the transaction's root), ``status`` and typed
``attributes`` (``sentry.op``, ``sentry.segment.name``, ``sentry.segment.id``, ...),
stored exactly as sent.

Single span (no ``items``; ``@sentry/browser`` 8-10 send ``[{"type":"span"}, spanJSON]``):
one span as in a transaction's ``spans[]``: ``start_timestamp`` and ``timestamp``,
``op``, ``description``, ``status``, plain ``data`` (attributes inferred from it, as for
transactions), ``segment_id`` (its own id for a standalone span: a segment) and the
segment's name in ``data.transaction``. Refusing it (until the eighteenth session, a
400) lost the whole envelope.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from errortrack import timestamps
from errortrack.errors import BadRequest
from errortrack.ingest.envelope import decode_payload, items_of
from errortrack.traces.rows import (
    Times,
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


def handle_span(payload: bytes, headers: dict[str, Any], ctx: ItemContext) -> ItemRows:
    from errortrack.ingest.items import ItemRows

    decoded = decode_payload(payload, "span", exact=True)
    if isinstance(decoded, dict) and "items" not in decoded and "span_id" in decoded:
        return ItemRows(spans=[_single(decoded, ctx)])
    return ItemRows(spans=rows(items_of(decoded, "span"), ctx))


def _single(span: dict[str, Any], ctx: ItemContext) -> dict[str, Any]:
    """The older single-span payload (module docstring)."""
    trace_id, span_id = hex_id(span, "trace_id"), span_hex(span, "span_id")
    if not trace_id or not span_id:
        raise BadRequest("span needs a trace_id and a span_id")
    check_ids(span, "span: ", "trace_id", "span_id")
    data = span.get("data")
    data = data if isinstance(data, dict) else {}
    segment_id = span_hex(span, "segment_id")
    is_segment = span.get("is_segment") is True or segment_id == span_id
    times = [
        (timestamps.finite(span.get("start_timestamp")), timestamps.finite(span.get("timestamp")))
    ]
    [(start, end)] = place_item(
        times, 0 if is_segment else None, ctx.received_at.timestamp(), ctx.drift
    )
    return span_row(
        project_id=ctx.project_id,
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=span_hex(span, "parent_span_id"),
        segment_id=segment_id or (span_id if is_segment else ""),
        segment_name=segment_name(text(data, "sentry.segment.name") or text(data, "transaction")),
        is_segment=is_segment,
        op=text(span, "op") or text(data, "sentry.op"),
        description=text(span, "description"),
        start=start,
        end=end,
        status=text(span, "status"),
        received_at=ctx.received_at.timestamp(),
        attributes=infer_attributes(data, span.get("tags")),
        retention_days=ctx.retention_days,
    )


def _attribute_text(attributes: dict[str, Any], name: str) -> str:
    attr = attributes.get(name)
    value = attr.get("value") if isinstance(attr, dict) else None
    return value if isinstance(value, str) else ""


def _times(span: Any) -> Times:
    if not isinstance(span, dict):
        return None, None  # refused by _row
    start, end = span.get("start_timestamp"), span.get("end_timestamp")
    return timestamps.finite(start), timestamps.finite(end)


def _is_segment(span: Any) -> bool:
    """A segment (a transaction's root): ``is_segment: true``; when the SDK does not say
    (sentry-php sends no ``is_segment``; the span protocol's newer form drops it), a span
    that is remote (``is_remote``: its parent is in another service), that names itself
    as its ``sentry.segment.id``, or that has no parent, as Sentry's span buffer finds
    segments by their parent links."""
    if not isinstance(span, dict):
        return False
    flag = span.get("is_segment")
    if flag is not None:
        return flag is True
    if span.get("is_remote") is True or not span_hex(span, "parent_span_id"):
        return True
    attributes = span.get("attributes")
    named = _attribute_text(attributes, "sentry.segment.id") if isinstance(attributes, dict) else ""
    return bool(named) and named.lower() == span_hex(span, "span_id")


def _segments(spans: list[Any]) -> dict[str, Any]:
    """Each span id's segment among the item's spans, by parent links (for SDKs that
    name no ``sentry.segment.id``); a chain that leaves the item, or loops, finds none.

    Each span is resolved once: a walk stops at a span already resolved and gives its
    answer to every span it passed. Walking every chain to its root made a chain of N
    spans cost N²/2 steps, on the event loop: 8,000 spans took 22 s (diff review)."""
    by_id = {span_hex(s, "span_id"): s for s in spans if isinstance(s, dict)}
    found: dict[str, Any] = {}
    for start in by_id:
        path: list[str] = []
        on_path: set[str] = set()
        span_id = start
        root: Any = None
        while True:
            if span_id in found:
                root = found[span_id]
                break
            node = by_id.get(span_id)
            if node is None or span_id in on_path:
                break  # the chain leaves the item, or loops: no segment
            if _is_segment(node):
                root = node
                path.append(span_id)
                break
            path.append(span_id)
            on_path.add(span_id)
            span_id = span_hex(node, "parent_span_id")
        for passed in path:
            found[passed] = root
    return {span_id: root for span_id, root in found.items() if root is not None}


def rows(spans: list[Any], ctx: ItemContext) -> list[dict[str, Any]]:
    from errortrack.ingest.items import check_rows

    check_rows(len(spans), "a span item", ctx)
    # Before any row is made: a segment's span_id is every span's segment_id, and a long
    # one refused only at its own row had been copied into the rows before it.
    for i, span in enumerate(spans):
        if isinstance(span, dict):
            check_ids(span, f"span {i}: ", "trace_id", "span_id")
    times = [_times(span) for span in spans]
    segment = next(
        (i for i, span in enumerate(spans) if times[i][0] is not None and _is_segment(span)),
        None,
    )
    placed = place_item(times, segment, ctx.received_at.timestamp(), ctx.drift)
    segments = _segments(spans)
    return [_row(span, i, ctx, *placed[i], segments) for i, span in enumerate(spans)]


def _row(
    span: Any, index: int, ctx: ItemContext, start: float, end: float, segments: dict[str, Any]
) -> dict[str, Any]:
    if not isinstance(span, dict) or not hex_id(span, "trace_id") or not span_hex(span, "span_id"):
        raise BadRequest(f"span {index} needs a trace_id and a span_id")
    attributes = span.get("attributes")
    if attributes is None:
        attributes = {}
    elif not isinstance(attributes, dict):
        raise BadRequest(f"span {index}: attributes must be an object")
    is_segment = _is_segment(span)
    name = text(span, "name")
    root = segments.get(span_hex(span, "span_id"))
    return span_row(
        project_id=ctx.project_id,
        trace_id=hex_id(span, "trace_id"),
        span_id=span_hex(span, "span_id"),
        parent_span_id=span_hex(span, "parent_span_id"),
        segment_id=_attribute_text(attributes, "sentry.segment.id").lower()
        or (span_hex(root, "span_id") if root is not None else ""),
        segment_name=segment_name(
            _attribute_text(attributes, "sentry.segment.name")
            or (text(root, "name") if root is not None else "")
        ),
        is_segment=is_segment,
        op=_attribute_text(attributes, "sentry.op"),
        description=name,
        start=start,
        end=end,
        status=text(span, "status"),
        received_at=ctx.received_at.timestamp(),
        attributes=attributes,
        retention_days=ctx.retention_days,
    )
