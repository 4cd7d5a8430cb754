"""One row of the ``spans`` table, and typed attributes for SDKs that send plain dicts.

Node 11 sends typed attributes (``{name: {value, type}}``), stored as sent. Python and
classic transactions send ``data`` and ``tags`` dicts; their values become attributes of
the inferred type, so both kinds can be filtered through the same typed maps as logs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from errortrack import nested, timestamps
from errortrack.errors import BadRequest
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


# How many levels of nested objects in ``data`` or ``tags`` become dotted names; an
# object below them, and an array nested deeper than this, is kept as one string
# attribute, the JSON text of the rest (as Relay trims a data bag that is too deep).
# No SDK nests that far; JSON nested ~1,000 deep (orjson reads up to 1,024 levels) made
# the recursive flattening, or msgspec writing the attributes, raise RecursionError: a
# 500 that lost the whole envelope.
MAX_DEPTH = 32

# The longest dotted name of a nested object that is flattened; a longer one is kept as
# one string attribute, the JSON text of the object, as one below ``MAX_DEPTH`` is. Every
# leaf's name repeats its object's name: ``{"K" * 40_000: {"0": 0, "1": 0, ...}}`` (72 KB)
# made 4,000 names of 40 KB, 320 MB of rows. The bound is on the whole dotted name, not
# on each key: 32 levels of keys each just under it would still repeat 32 times as much.
# 200 is Sentry's longest tag key (Relay's); the longest name in Sentry's attribute
# conventions is 47 characters.
MAX_NAME = 200


def infer_attributes(*sources: Any) -> dict[str, dict[str, Any]]:
    """``{name: {value, type}}`` from plain dicts (a source sent as a list is read as
    ``[key, value]`` pairs, the other form of ``tags``: ``pairs``); nested dicts flatten
    to dotted names (``MAX_DEPTH``), later sources win, and nulls are left out (they
    carry nothing to filter on)."""
    out: dict[str, dict[str, Any]] = {}
    for source in sources:
        if isinstance(source, list):
            source = pairs(source)
        if isinstance(source, Mapping):
            _flatten(source, out)
    return out


def pairs(tags: list[Any]) -> dict[str, Any]:
    """Tags sent as ``[[key, value], ...]``, which Sentry's protocol takes beside an
    object (until the twentieth session they were dropped without a word). An entry that
    is not a two-element pair with a string key is skipped, as a value of no type is; a
    later key wins, as in an object, and values are typed as an object's are."""
    return {
        entry[0]: entry[1]
        for entry in tags
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
    }


def _flatten(source: Mapping[str, Any], out: dict[str, dict[str, Any]]) -> None:
    """``source``'s values into ``out`` under dotted names, depth first and in order (a
    later value of the same name wins), without recursion: a stack of the objects being
    walked, at most ``MAX_DEPTH`` deep."""
    stack = [("", iter(source.items()))]
    while stack:
        prefix, entries = stack[-1]
        for key, value in entries:
            name = f"{prefix}{key}"
            # dict, not Mapping: decoded JSON holds dicts, and the ABC's check cost more
            # than the rest of a flat value's handling.
            if isinstance(value, dict):
                if len(stack) < MAX_DEPTH and len(name) <= MAX_NAME:
                    stack.append((f"{name}.", iter(value.items())))
                    break  # walk it now; this object's remaining entries wait on the stack
                value = json_text(value)
            elif isinstance(value, list) and _deeper_than(value, MAX_DEPTH):
                value = json_text(value)
            kind = infer_type(value)
            if kind == "string" and not isinstance(value, str):
                value = str(value)  # an integer beyond Int64 keeps its digits as text
            if kind is not None:
                out[name] = {"value": value, "type": kind}
        else:
            stack.pop()


def _deeper_than(value: list[Any], limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` levels in ``value``."""
    todo: list[tuple[list[Any] | dict[str, Any], int]] = [(value, 1)]
    while todo:
        node, depth = todo.pop()
        if depth > limit:
            return True
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, list | dict):
                todo.append((child, depth + 1))
    return False


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


def json_text(value: Any) -> str:
    """``value`` as JSON text at any depth (``nested``; orjson's writer stops at 255
    levels). msgspec writes each key and scalar: integers beyond 64 bits keep their
    digits."""
    return nested.write(value, key=lambda name: _json(str(name)), leaf=_json, comma=",", colon=":")


# The longest an item (a transaction and its spans) is taken to last when placing one
# from a wrong clock; Sentry's own transaction limit is far shorter.
MAX_SPAN_SECONDS = 86400.0


Times = tuple[float | None, float | None]  # a span's (start, end) as sent, finite or None


def place_item(
    times: list[Times], segment: int | None, received: float, drift: float
) -> list[tuple[float, float]]:
    """Every span's (start, end) of one item on the server's clock; ``segment`` indexes
    the segment span's times, if the item has it.

    One move for the whole item (the clock drift, or, for an item from a wrong clock,
    what brings its end to the arrival), so spans keep their places relative to each
    other; a span still outside the window starts with the anchor (``_placed``).
    """
    starts = [start for start, _ in times if start is not None]
    segment_start = None if segment is None else times[segment][0]
    anchor = _anchor_of(segment_start, starts, received, drift)
    every = [t for pair in times for t in pair if t is not None]
    ends = [end for _, end in times if end is not None]
    segment_end = None if segment is None else times[segment][1]
    move = _item_move(anchor, every, ends, segment_end, received, drift)
    # Re-checked, never assumed: the arrival when even the anchor's place is implausible.
    fallback = received if anchor is None else move(anchor)
    if not timestamps.in_window(fallback, received):
        fallback = received
    return [_placed(start, end, move, fallback, received) for start, end in times]


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


def _item_move(
    anchor: float | None,
    times: list[float],
    ends: list[float],
    segment_end: float | None,
    received: float,
    drift: float,
) -> Callable[[float], float]:
    """Where each time of an item goes: moved by the clock drift when its ``anchor`` and
    its ends are plausible (``_ends_ahead``); else (the
    whole item from a wrong clock) to its distance before the item's
    end, the latest of its ``times`` from the anchor on, counted back from the arrival, as
    spans end before the envelope is sent. Bringing the anchor there instead put every
    later span past the window's 60 s ahead, and they all collapsed onto the anchor with
    no duration.

    The distance, not a shift: ``received - end`` is a float the size of the wrong clock,
    and adding it back to a time of 1e20 (doubles 16,384 s apart there) lost the arrival
    by up to hours; 1e25 landed in 2038 and 1e30 at 0, dropped as too old after its 200.
    The difference of two times within a factor of two of each other, as an item's from
    one clock are, is exact (Sterbenz), so ``received - (end - t)`` is off by at most
    the rounding at the arrival's size (~0.1 us) and sane items keep exact places."""
    if anchor is None:
        return lambda t: t
    # Only ends a span can plausibly have: one garbage end (20 days after its start)
    # would otherwise drag the whole item that far into the past.
    end = max((t for t in times if anchor <= t <= anchor + MAX_SPAN_SECONDS), default=anchor)
    # A plausible start is not enough: a 10-minute job from a clock 5 minutes fast (too
    # little for the drift, which starts at 55 min) starts in the window but ends past
    # its 60 s ahead, and its end and later spans had collapsed onto their starts.
    if timestamps.in_window(anchor + drift, received) and not _ends_ahead(
        anchor, ends, segment_end, received, drift
    ):
        return lambda t: t + drift
    return lambda t: received - (end - t)


def _ends_ahead(
    anchor: float, ends: list[float], segment_end: float | None, received: float, drift: float
) -> bool:
    """Whether an item whose start is plausible ends past the window's 60 s ahead, as
    one from a clock minutes fast does (spans end before the envelope is sent). Judged
    by the segment's end when it has a plausible one (within a day of the start), else by
    most of its ends: one span's garbage end must not move its sane siblings (nor a
    segment's end days after its start a transaction sent hours late)."""

    def ahead(end: float) -> bool:
        return end + drift > received + timestamps.MAX_FUTURE

    if segment_end is not None and anchor <= segment_end <= anchor + MAX_SPAN_SECONDS:
        return ahead(segment_end)
    judged = [end for end in ends if abs(end - anchor) <= MAX_SPAN_SECONDS]
    return 2 * sum(map(ahead, judged)) > len(judged)


def _placed(
    start: float | None,
    end: float | None,
    move: Callable[[float], float],
    anchor: float,
    received: float,
) -> tuple[float, float]:
    """One span's (start, end), moved as its whole item is (``move``).

    A span whose own start still lies outside Sentry's window (a bad clock, a start of
    0) starts at ``anchor``, its segment's start (the arrival when that is not in the
    window either), instead of moving its siblings: one such span had shifted a whole
    item decades ahead, past its retention, or left a sibling dated 1970 for the TTL. An
    end outside the window, or before the start, ends the span where it starts.
    """
    begin = anchor if start is None else move(start)
    if not timestamps.in_window(begin, received):
        begin = anchor
    finish = begin if end is None else move(end)
    if finish < begin or not timestamps.in_window(finish, received):
        finish = begin
    return begin, finish


# What one span's or the item's data puts into every row of the item is bounded, or an
# O(n) payload made O(n²) bytes of rows, all in memory before any cap was checked: a
# 112 KB transaction named with 40 KB and 4,000 children made 162 MB of rows.
# The segment's name, as every span's ``segment_name``: as Relay trims a transaction's
# name (docs/INGEST.md, "Choices").
MAX_SEGMENT_NAME = 200
# A trace or span id, which the segment's root lends every span of it (real ones are 32
# and 16 hex digits, 36 characters as a UUID): longer is refused (``check_ids``).
MAX_ID = 64
# A span's op and status: short names ("http.client", "internal_error").
MAX_SHORT_TEXT = 200


def segment_name(name: str) -> str:
    """A segment's name as its spans' ``segment_name``: at most ``MAX_SEGMENT_NAME``
    characters (unchanged if shorter)."""
    return name[:MAX_SEGMENT_NAME]


def check_ids(source: Mapping[str, Any], where: str, *keys: str) -> None:
    """400 when one of ``keys`` (ids) of ``source`` is a string longer than ``MAX_ID``;
    ``where`` prefixes the field's name in the message."""
    for key in keys:
        value = source.get(key)
        if isinstance(value, str) and len(value) > MAX_ID:
            raise BadRequest(f"{where}{key} is longer than {MAX_ID} characters")


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
    # Every span source (span items, transactions and their children) comes here: the
    # short columns are bounded as ids are (``check_ids``), or a page of spans with 1 MB
    # parent ids answered 954 MiB and took the worker to 4.8 GB (API review, thirty-first
    # session). ``description`` and ``attributes`` are the pages' own budget's.
    for field, value, limit in (
        ("parent_span_id", parent_span_id, MAX_ID),
        ("segment_id", segment_id, MAX_ID),
        ("op", op, MAX_SHORT_TEXT),
        ("status", status, MAX_SHORT_TEXT),
    ):
        if len(value) > limit:
            raise BadRequest(f"span {span_id}: {field} is longer than {limit} characters")
    # Times no column can hold become the arrival time (docs/INGEST.md, "Choices").
    start = timestamps.storable(start, received_at)
    end = timestamps.storable(end, start)
    # To the microsecond the column keeps, rounded here: ClickHouse cuts a finer start
    # off, and the end read back (start + duration) was then 1 us early.
    start = round(start, 6)
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
