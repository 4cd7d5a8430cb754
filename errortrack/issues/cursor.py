"""Keyset cursors for the issues list and the events lists: where a walk stopped.

Each of these lists is ordered completely, ties broken by the row's id (the issue's id;
the event's ``event_id``), so the last item of a page names exactly where the next page
starts: its sort key. A walk by cursor is therefore unaffected by rows arriving, being
deleted or expiring before that point, which numbered pages (an offset) are not. As for
the logs list (``errortrack.logs.cursor``) the string is base64url of a small JSON array,
opaque to clients and checked field by field when it comes back, so that a cursor that
was edited, truncated or made up is a 400 naming ``cursor``, never a 500:

- an issue: ``[sort, key, id]``, ``key`` the sort's value of the last issue shown (a time
  in microseconds for the time sorts, the event count for ``-count``, null for the id
  sorts);
- an event: ``["-timestamp", timestamp in microseconds, event_id as 32 hex]``;
- a trace's span: ``["start_timestamp", start in microseconds, span_id]``.

The shapes differ, so no list takes another's cursor (nor a logs cursor).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

from errortrack.db import MAX_ID
from errortrack.errors import ValidationError
from errortrack.paging import cursor_fields, encode_cursor

# Far longer than any cursor this module writes (under 100 characters), short enough that
# a made-up one costs nothing to refuse.
MAX_LENGTH = 200
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US = dt.timedelta(microseconds=1)


def _micros(year: int) -> int:
    return (dt.datetime(year, 1, 1, tzinfo=dt.UTC) - _EPOCH) // _US


# An issue's times are Python datetimes (years 1-9999); no cursor outside them. An
# event's is a ClickHouse DateTime64 (1900-2299).
_ISSUE_US = (_micros(1), (dt.datetime.max.replace(tzinfo=dt.UTC) - _EPOCH) // _US + 1)
_EVENT_US = (_micros(1900), _micros(2300))
_MAX_COUNT = 2**63 - 1  # issues.event_count is a BIGINT
_REFUSED = "cursor is not one this server gave out (pass next_cursor as it came)"

# What each issue sort keys on (``errortrack.issues.read.ISSUE_SORTS``): a time, the
# event count, or nothing but the id.
TIME_SORTS = ("-last_seen", "last_seen", "-first_seen")
COUNT_SORTS = ("-count",)
ID_SORTS = ("id", "-id")
ISSUE_CURSOR_SORTS = TIME_SORTS + COUNT_SORTS + ID_SORTS
EVENTS_ORDER = "-timestamp"


@dataclasses.dataclass(frozen=True)
class IssueCursor:
    """The sort key of the last issue a page showed."""

    sort: str
    key: dt.datetime | int | None  # aware UTC time, event count, or None (id sorts)
    id: int

    def encode(self) -> str:
        key = self.key
        if isinstance(key, dt.datetime):
            key = (key.astimezone(dt.UTC) - _EPOCH) // _US
        return encode_cursor([self.sort, key, self.id])


@dataclasses.dataclass(frozen=True)
class EventCursor:
    """The sort key (timestamp, event_id) of the last event a page showed."""

    timestamp: dt.datetime  # aware, UTC
    event_id: uuid.UUID

    @classmethod
    def after_row(cls, timestamp: dt.datetime, event_id: Any) -> EventCursor:
        """The cursor after a row as ClickHouse returned it (a DateTime64 comes back
        naive in UTC, or aware)."""
        if timestamp.tzinfo is None:
            timestamp = timestamp.replace(tzinfo=dt.UTC)
        return cls(timestamp.astimezone(dt.UTC), uuid.UUID(str(event_id)))

    def encode(self) -> str:
        micros = (self.timestamp - _EPOCH) // _US
        return encode_cursor([EVENTS_ORDER, micros, self.event_id.hex])


def _fields(text: Any, max_length: int = MAX_LENGTH) -> list[Any]:
    return cursor_fields(text, size=3, max_length=max_length, refused=_REFUSED)


def _int_in(value: Any, low: int, high: int) -> bool:
    """An integer low <= value < high; bool is an int to Python and passes for none."""
    return type(value) is int and low <= value < high


def decode_issue(text: Any) -> IssueCursor:
    """The cursor ``IssueCursor.encode`` wrote; anything else is a 400 naming ``cursor``."""
    sort, key, issue_id = _fields(text)
    if not isinstance(sort, str) or not _int_in(issue_id, 1, MAX_ID + 1):
        raise ValidationError(_REFUSED, field="cursor")
    if sort in TIME_SORTS and _int_in(key, *_ISSUE_US):
        return IssueCursor(sort, _EPOCH + key * _US, issue_id)
    if sort in COUNT_SORTS and _int_in(key, 0, _MAX_COUNT + 1):
        return IssueCursor(sort, key, issue_id)
    if sort in ID_SORTS and key is None:
        return IssueCursor(sort, None, issue_id)
    raise ValidationError(_REFUSED, field="cursor")


@dataclasses.dataclass(frozen=True)
class SpanCursor:
    """The sort key (start_timestamp, span_id) of the last span a trace's spans page
    showed (``errortrack.traces.story.trace_spans``)."""

    start: dt.datetime  # aware, UTC
    span_id: str  # 16 lower-case hex digits, as stored

    @classmethod
    def after_row(cls, start: dt.datetime, span_id: str) -> SpanCursor:
        if start.tzinfo is None:
            start = start.replace(tzinfo=dt.UTC)
        return cls(start.astimezone(dt.UTC), span_id)

    def encode(self) -> str:
        return encode_cursor([SPANS_ORDER, (self.start - _EPOCH) // _US, self.span_id])


SPANS_ORDER = "start_timestamp"
# Ingest stores a span id as sent, lower-cased (errortrack.traces.rows.span_hex): 16 hex
# digits from every SDK, but any text from a malformed one. A cursor carries ids up to
# this length (a walk reaching a longer one ends there with a 400), hence its own cap.
SPAN_ID_MAX = 256
SPAN_CURSOR_MAX_LENGTH = 4 * (SPAN_ID_MAX * 6 + 64) // 3  # every character \u-escaped


def decode_span(text: Any) -> SpanCursor:
    """The cursor ``SpanCursor.encode`` wrote; anything else is a 400 naming ``cursor``."""
    order, micros, span_id = _fields(text, SPAN_CURSOR_MAX_LENGTH)
    if order != SPANS_ORDER or not _int_in(micros, *_EVENT_US):
        raise ValidationError(_REFUSED, field="cursor")
    if not isinstance(span_id, str) or len(span_id) > SPAN_ID_MAX:
        raise ValidationError(_REFUSED, field="cursor")
    return SpanCursor(_EPOCH + micros * _US, span_id)


def decode_event(text: Any) -> EventCursor:
    """The cursor ``EventCursor.encode`` wrote; anything else is a 400 naming ``cursor``."""
    order, micros, hex_id = _fields(text)
    if order != EVENTS_ORDER or not _int_in(micros, *_EVENT_US) or not isinstance(hex_id, str):
        raise ValidationError(_REFUSED, field="cursor")
    try:
        event_id = uuid.UUID(hex=hex_id)
    except ValueError:
        raise ValidationError(_REFUSED, field="cursor") from None
    if event_id.hex != hex_id:  # only the form encode writes: 32 lower-case hex digits
        raise ValidationError(_REFUSED, field="cursor")
    return EventCursor(_EPOCH + micros * _US, event_id)
