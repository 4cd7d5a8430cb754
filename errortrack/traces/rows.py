"""One row of the ``spans`` table, and typed attributes for SDKs that send plain dicts.

Node 11 sends typed attributes (``{name: {value, type}}``), stored as sent. Python and
classic transactions send ``data`` and ``tags`` dicts; their values become attributes of
the inferred type, so both kinds can be filtered through the same typed maps as logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from errortrack import timestamps
from errortrack.ingest.logs import INT64_MAX, INT64_MIN, typed_maps


def infer_type(value: Any) -> str | None:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer" if INT64_MIN <= value <= INT64_MAX else "string"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return None


def infer_attributes(*sources: Any) -> dict[str, dict[str, Any]]:
    """``{name: {value, type}}`` from plain dicts; nested dicts flatten to dotted names,
    later sources win, and nulls are left out (they carry nothing to filter on)."""
    out: dict[str, dict[str, Any]] = {}
    for source in sources:
        if isinstance(source, Mapping):
            _flatten(source, "", out)
    return out


def _flatten(source: Mapping[str, Any], prefix: str, out: dict[str, dict[str, Any]]) -> None:
    for key, value in source.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            _flatten(value, f"{name}.", out)
            continue
        kind = infer_type(value)
        if kind == "string" and not isinstance(value, str):
            value = str(value)  # an integer beyond Int64 keeps its digits as text
        if kind is not None:
            out[name] = {"value": value, "type": kind}


# The longest an item (a transaction and its spans) is taken to last when placing one
# from a wrong clock; Sentry's own transaction limit is far shorter.
MAX_SPAN_SECONDS = 86400.0


Times = tuple[float | None, float | None]  # a span's (start, end) as sent, finite or None


def place_item(
    times: list[Times], segment: int | None, received: float, drift: float
) -> list[tuple[float, float]]:
    """Every span's (start, end) of one item on the server's clock; ``segment`` indexes
    the segment span's times, if the item has it.

    One shift for the whole item (the clock drift, or, for an item from a wrong clock,
    what brings its end to the arrival), so spans keep their places relative to each
    other; a span still outside the window starts with the anchor (``_placed``).
    """
    starts = [start for start, _ in times if start is not None]
    segment_start = None if segment is None else times[segment][0]
    anchor = _anchor_of(segment_start, starts, received, drift)
    every = [t for pair in times for t in pair if t is not None]
    shift = _item_shift(anchor, every, received, drift)
    fallback = received if anchor is None else anchor + shift
    return [_placed(start, end, shift, fallback, received) for start, end in times]


def _anchor_of(
    segment: float | None, starts: list[float], received: float, drift: float
) -> float | None:
    """The start an item's shift is taken from: the segment's when it is plausible, else
    the latest plausible one (spans end before the envelope is sent), else the segment's
    or the latest: then the whole item comes from a wrong clock and moves together."""

    def plausible(ts: float) -> bool:
        return timestamps.in_window(ts + drift, received)

    if segment is not None and plausible(segment):
        return segment
    good = [ts for ts in starts if plausible(ts)]
    if good:
        return max(good)
    return segment if segment is not None else max(starts, default=None)


def _item_shift(anchor: float | None, times: list[float], received: float, drift: float) -> float:
    """Seconds to move every span of an item by: the clock drift when its ``anchor`` is
    plausible; else (the whole item from a wrong clock) what brings the item's end, the
    latest of its ``times`` from the anchor on, to the arrival, as spans end before the
    envelope is sent. Bringing the anchor there instead put every later span past the
    window's 60 s ahead, and they all collapsed onto the anchor with no duration."""
    if anchor is None:
        return 0.0
    if timestamps.in_window(anchor + drift, received):
        return drift
    # Only ends a span can plausibly have: one garbage end (20 days after its start)
    # would otherwise drag the whole item that far into the past.
    ends = [t for t in times if anchor <= t <= anchor + MAX_SPAN_SECONDS]
    return received - max(ends, default=anchor)


def _placed(
    start: float | None, end: float | None, shift: float, anchor: float, received: float
) -> tuple[float, float]:
    """One span's (start, end), moved by its item's ``shift``.

    A span whose own start still lies outside Sentry's window (a bad clock, a start of
    0) starts at ``anchor``, its segment's start, instead of moving its siblings: one
    such span had shifted a whole item decades ahead, past its retention, or left a
    sibling dated 1970 for the TTL. An end outside the window, or before the start, ends
    the span where it starts.
    """
    begin = anchor if start is None else start + shift
    if not timestamps.in_window(begin, received):
        begin = anchor
    finish = begin if end is None else end + shift
    if finish < begin or not timestamps.in_window(finish, received):
        finish = begin
    return begin, finish


def span_row(
    *,
    project_id: int,
    trace_id: str,
    span_id: str,
    parent_span_id: str,
    segment_id: str,
    segment_name: str,
    is_segment: bool,
    op: str,
    description: str,
    start: float,
    end: float,
    status: str,
    received_at: float,
    attributes: dict[str, Any],
    retention_days: int,
) -> dict[str, Any]:
    # Times no column can hold become the arrival time (docs/INGEST.md, "Choices").
    start = timestamps.storable(start, received_at)
    end = timestamps.storable(end, start)
    return {
        "project_id": project_id,
        "trace_id": trace_id,
        "span_id": span_id,
        "parent_span_id": parent_span_id,
        "segment_id": segment_id,
        "segment_name": segment_name,
        "is_segment": is_segment,
        "op": op,
        "description": description,
        "start_timestamp": start,
        # A span whose end precedes its start (clock steps) gets 0, not a wrapped UInt64.
        "duration_us": max(0, round((end - start) * 1_000_000)),
        "status": status,
        "received_at": received_at,
        # msgspec writes integers beyond 64 bits, which orjson refuses (spans_v2 reads
        # them exactly).
        "attributes": msgspec.json.encode(attributes).decode(),
        **typed_maps(attributes),
        "retention_days": retention_days,
    }


def text(source: Mapping[str, Any], key: str) -> str:
    value = source.get(key)
    return value if isinstance(value, str) else ""


def hex_id(source: Mapping[str, Any], key: str) -> str:
    """A trace id as the API and the trace view compare it: lower-case, without a UUID's
    dashes (SDKs send that already; an upper-case id was stored as sent and its trace
    then never found). Span ids are only lower-cased (``span_hex``), as logs' are."""
    return text(source, key).replace("-", "").lower()


def span_hex(source: Mapping[str, Any], key: str) -> str:
    return text(source, key).lower()
