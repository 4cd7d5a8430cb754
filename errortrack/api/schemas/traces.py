"""Schema of the trace view: a span tree, the trace's logs and its error events."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, post_load

from errortrack.api.schemas.issues import EventSummaryOut
from errortrack.api.schemas.logs import LogOut, LogsQuery
from errortrack.api.schemas.paging import CursorText, OneWayToPage, PageQuery, page_of, page_request
from errortrack.issues import cursor

_TIME = {"format": "date-time"}


class TracePath(Schema):
    """The path's ``{trace_id}`` as the document states it (``ApiDoc.path``): the logs
    filter's pattern, as both are read by ``filters.parse_trace_id`` (a 400 otherwise).
    It was a bare string in the document while ``/traces/0`` was a 400."""

    trace_id = fields.Str(
        required=True,
        metadata={
            "description": "32 hex digits, any case, or a UUID with dashes.",
            "pattern": LogsQuery._declared_fields["trace_id"].metadata["pattern"],
        },
    )


class FlatSpanOut(Schema):
    span_id = fields.Str(required=True)
    parent_span_id = fields.Str(required=True, allow_none=True)
    segment_id = fields.Str(required=True, allow_none=True)
    segment_name = fields.Str(required=True, allow_none=True)
    is_segment = fields.Bool(required=True, metadata={"description": "A transaction's root"})
    op = fields.Str(required=True, allow_none=True)
    description = fields.Str(required=True, allow_none=True)
    start_timestamp = fields.Str(required=True, metadata=_TIME)
    end_timestamp = fields.Str(required=True, metadata=_TIME)
    duration_ms = fields.Float(required=True)
    status = fields.Str(required=True, allow_none=True)
    attributes = fields.Dict(required=True, metadata={"description": "{name: {value, type}}"})


class SpanOut(FlatSpanOut):
    children = fields.List(fields.Nested(lambda: SpanOut()), required=True)


SpanPageOut = page_of(FlatSpanOut, cursors=True)


class TruncatedOut(Schema):
    spans = fields.Bool(required=True)
    logs = fields.Bool(required=True)
    events = fields.Bool(required=True)


class TraceOut(Schema):
    trace_id = fields.Str(required=True)
    spans = fields.List(
        fields.Nested(SpanOut),
        required=True,
        metadata={"description": "Root spans (no known parent), each with its children"},
    )
    span_count = fields.Int(required=True)
    logs = fields.List(
        fields.Nested(LogOut), required=True, metadata={"description": "Oldest first"}
    )
    events = fields.List(
        fields.Nested(EventSummaryOut),
        required=True,
        metadata={"description": "Error events in this trace, oldest first"},
    )
    truncated = fields.Nested(
        TruncatedOut,
        required=True,
        metadata={
            "description": "Whether the trace holds more spans (10,000 shown), logs (1,000)"
            " or events (100) than shown: the first ones, in the order above"
        },
    )


class SpansQuery(PageQuery, OneWayToPage):
    cursor = CursorText(
        cursor.decode_span,
        metadata={
            "maxLength": cursor.SPAN_CURSOR_MAX_LENGTH,
            "description": "Continue a walk: the next_cursor of the previous page, as it "
            "came (opaque). Gives the per_page spans after that page's last one (start "
            "time, then span id): every span stored before the walk began is seen exactly "
            "once, whatever arrives meanwhile. Not with page.",
        },
    )

    @post_load
    def _split(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        return {"cursor": data.pop("cursor", None), "page": page_request(data)}
