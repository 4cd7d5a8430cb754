"""Schemas of the logs endpoint: the query it reads and the page it answers."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, post_load, pre_load, validate
from marshmallow import ValidationError as SchemaError

from errortrack.api.schemas.paging import (
    CursorText,
    PageQuery,
    page_of,
    page_request,
    refuse_page_with_cursor,
)
from errortrack.errors import ValidationError
from errortrack.logs import cursor, filters, tail
from errortrack.logs.filters import LogFilter


def _domain(parse: Any, *args: Any) -> Any:
    """Run a domain parser; its message becomes a schema error on the current field."""
    try:
        return parse(*args)
    except ValidationError as exc:
        raise SchemaError(exc.message) from None


class Levels(fields.List):
    """``level=error&level=fatal`` or ``level=error,fatal``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(fields.Str(validate=validate.OneOf(filters.LEVELS)), **kwargs)

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> Any:
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str) for v in values):
            raise SchemaError("expected level names")
        return _domain(filters.parse_levels, values)


_HEX = "[0-9a-fA-F]"
_UUID = f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}"
# What filters.parse_trace_id takes, for the OpenAPI document; a Regexp validator would
# see the id after its dashes are removed and so documented the UUID form as refused.
TRACE_ID_PATTERN = f"^({_HEX}{{32}}|{_UUID})$"


class TraceId(fields.Str):
    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> Any:
        return _domain(filters.parse_trace_id, super()._deserialize(value, attr, data, **kwargs))


class Text(fields.Str):
    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> Any:
        return _domain(filters.parse_text, super()._deserialize(value, attr, data, **kwargs))


class _Length(validate.Length):
    """``Length`` that lets None through: a blank ``q`` deserializes to None (no filter),
    and marshmallow still runs the field's validators on it (a 500 until the
    seventeenth session). A subclass, so the OpenAPI description keeps its maxLength."""

    def __call__(self, value: Any) -> Any:
        return value if value is None else super().__call__(value)


class Values(fields.Str):
    """One string, or several when the parameter is repeated (documented as a string)."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> Any:
        values = value if isinstance(value, list) else [value]
        return [super(Values, self)._deserialize(v, attr, data, **kwargs) for v in values]


class IsoTime(fields.DateTime):
    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> Any:
        if not isinstance(value, str):
            raise SchemaError("expected one ISO 8601 time")
        return _domain(filters.parse_time, value, attr)


# How filters.parse_time reads start and end (datetime.fromisoformat has no second 60).
_TIME = (
    " Trimmed; without an offset it is UTC; finer than a microsecond is rounded up to the "
    "next one; a leap second (:60) is a 400."
)


class _LogFilterQuery(Schema):
    """The filters the logs list and the tail share (``LogFilter``)."""

    level = Levels(
        metadata={
            "description": "Only these levels (by severity number). Repeat the parameter or "
            "separate with commas: level=error&level=fatal or level=error,fatal; each value "
            "is trimmed. The server also takes any case, and warning for warn (beyond the "
            "enum)."
        }
    )
    trace_id = TraceId(
        metadata={
            "description": "Only the logs emitted inside this trace's spans: 32 hex "
            "digits, any case, or a UUID with dashes (trimmed).",
            "pattern": TRACE_ID_PATTERN,
        },
    )
    q = Text(
        validate=_Length(max=filters.MAX_TEXT),
        metadata={
            "description": "Case-insensitive substring of the body (ASCII case folding); "
            "trimmed (maxLength counts after), and blank is no filter."
        },
    )
    start = IsoTime(metadata={"description": "Logs at or after this time (ISO 8601)." + _TIME})
    end = IsoTime(metadata={"description": "Logs before this time (ISO 8601)." + _TIME})
    attr = fields.Dict(
        keys=fields.Str(),
        values=Values(),
        metadata={
            "description": "Attribute filters: attr[<name>]=<value>, e.g. "
            "attr[http.status_code]=503. The value matches the attribute in its own type "
            "(string, integer, double or boolean); repeat a name for any of several values.",
            # An empty example: otherwise Swagger UI's "Try it out" pre-fills
            # attr[additionalProp1]=string, a filter that matches nothing.
            "param": {"style": "deepObject", "explode": True, "example": {}},
            "maxProperties": filters.MAX_ATTR_FILTERS,
        },
    )

    @pre_load
    def _gather_attributes(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        """Fold the ``attr[<name>]`` parameters into one ``attr`` mapping of value lists."""
        data = dict(data)
        found = [(key, data.pop(key)) for key in list(data) if filters.attr_filter_name(key)]
        if found:
            data["attr"] = dict(found)
        return data

    @staticmethod
    def _filter(data: dict[str, Any], sort: str = "-timestamp") -> LogFilter:
        """Pop the filter parameters from loaded data."""
        return LogFilter(
            levels=tuple(data.pop("level", ())),
            trace_id=data.pop("trace_id", None),
            text=data.pop("q", None),
            start=data.pop("start", None),
            end=data.pop("end", None),
            attributes=filters.parse_attr_filters(data.pop("attr", {}).items()),
            sort=sort,
        )


class LogsQuery(PageQuery, _LogFilterQuery):
    sort = fields.Str(
        load_default="-timestamp",
        validate=validate.OneOf(filters.SORTS),
        metadata={"description": "Newest first by default; severity sorts by severity_number."},
    )
    cursor = CursorText(
        cursor.decode,
        metadata={
            # Checked by cursor.decode (a Length validator would see the decoded cursor).
            "maxLength": cursor.MAX_LENGTH,
            "description": "Continue a walk: the next_cursor of the previous page, as it "
            "came (opaque). Gives the per_page logs after that page's last one, unaffected "
            "by logs arriving, expiring or merging meanwhile. Not with page; sort defaults "
            "to the cursor's own.",
        },
    )

    @pre_load
    def _gather_attributes(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        # The same hook, so that page with cursor is the 400 before a bad attr name:
        # marshmallow runs pre_load hooks in name order, not in a base's first.
        refuse_page_with_cursor(data)
        return super()._gather_attributes(data, **kwargs)

    @pre_load
    def _sort_of_cursor(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        """A cursor without ``sort`` continues in its own sort (a client following
        next_cursor need not repeat it); with a different ``sort`` it is a 400."""
        text = data.get("cursor")
        if "sort" in data or not isinstance(text, str):
            return data
        try:
            return {**data, "sort": cursor.decode(text).sort}
        except ValidationError:
            return data  # the cursor field itself reports it

    @post_load
    def _to_filter(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        after = data.pop("cursor", None)
        log_filter = self._filter(data, data.pop("sort"))
        return {"filter": log_filter, "page": page_request(data), "cursor": after}


class LogsTailQuery(_LogFilterQuery):
    per_page = PageQuery._declared_fields["per_page"]
    cursor = CursorText(
        tail.decode,
        metadata={
            "maxLength": tail.MAX_LENGTH,
            "description": "Go on following: the next_cursor of the previous answer, as it "
            "came (opaque). Gives the logs stored after it, oldest stored first. Without "
            "it: the per_page logs stored last.",
        },
    )

    @post_load
    def _to_filter(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        return {
            "filter": self._filter(data),
            "per_page": data.pop("per_page"),
            "cursor": data.pop("cursor", None),
        }


class LogOut(Schema):
    id = fields.UUID(required=True)
    level = fields.Str(required=True, metadata={"description": "As sent, e.g. warn"})
    severity_number = fields.Int(
        required=True, allow_none=True, metadata={"description": "null for unknown levels"}
    )
    body = fields.Str(required=True)
    trace_id = fields.Str(
        required=True, allow_none=True, metadata={"description": "null outside a span"}
    )
    span_id = fields.Str(required=True, allow_none=True)
    attributes = fields.Dict(
        keys=fields.Str(),
        # Any JSON value: SDKs send {value, type} objects, but a value some other sender
        # put there comes back as sent too (documented as objects, such a page failed a
        # client's response validation).
        values=fields.Raw(),
        required=True,
        metadata={
            "description": "As sent: {name: {value, type}} with the original JSON types "
            "(SDKs always send this shape; a bare value another sender used comes back "
            "as it was sent)"
        },
    )
    timestamp = fields.Str(required=True, metadata={"format": "date-time"})
    ingested_at = fields.Str(required=True, metadata={"format": "date-time"})


LogPageOut = page_of(LogOut, cursors=True)


class LogTailOut(Schema):
    items = fields.List(
        fields.Nested(LogOut),
        required=True,
        metadata={"description": "Oldest stored first"},
    )
    next_cursor = fields.Str(
        required=True,
        metadata={
            "description": "Pass as cursor to get the logs stored after these; never null "
            "(poll it to follow)."
        },
    )
    more = fields.Bool(
        required=True,
        metadata={
            "description": "True when logs already stored follow this page: ask again at "
            "once. False: everything stored so far has been given; poll after a pause."
        },
    )
