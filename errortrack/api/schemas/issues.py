"""Schemas of the issue endpoints: list queries, issue, events page, one event."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, post_load, pre_load, validate
from marshmallow import ValidationError as SchemaError

from errortrack.api.schemas.logs import TRACE_ID_PATTERN, TraceId
from errortrack.api.schemas.paging import (
    CursorText,
    OneWayToPage,
    PageQuery,
    PayloadPageQuery,
    page_of,
    page_request,
    refuse_page_with_cursor,
)
from errortrack.errors import ValidationError
from errortrack.issues import cursor
from errortrack.issues.read import (
    ISSUE_LEVELS,
    ISSUE_SORTS,
    MAX_TEXT,
    MAX_VALUE_LENGTH,
    MAX_VALUES,
    parse_levels,
    parse_statuses,
    parse_text,
    parse_values,
)
from errortrack.models import ISSUE_STATUSES

_TIME = {"format": "date-time"}


def _domain(parse: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a domain parser (``errortrack.issues.read``); its message becomes a schema
    error on the current field, so MCP and HTTP give the same 400 for the same mistake."""
    try:
        return parse(*args, **kwargs)
    except ValidationError as exc:
        raise SchemaError(exc.message) from None


def _strings(value: Any, what: str) -> list[str]:
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, str) for v in values):
        raise SchemaError(f"expected {what}")
    return values


class Statuses(fields.List):
    """``status=resolved&status=muted`` or ``status=resolved,muted``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(fields.Str(validate=validate.OneOf(ISSUE_STATUSES)), **kwargs)

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> Any:
        values = value if isinstance(value, list) else [value]
        return _domain(parse_statuses, (str(v) for v in values))


class Levels(fields.List):
    """``level=error&level=fatal`` or ``level=error,fatal``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(fields.Str(validate=validate.OneOf(ISSUE_LEVELS)), **kwargs)

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> Any:
        return _domain(parse_levels, _strings(value, "level names"))


class Values(fields.List):
    """Exact values of an event column: ``environment=a&environment=b`` or
    ``environment=a,b``."""

    def __init__(self, **kwargs: Any) -> None:
        item = fields.Str(validate=validate.Length(min=1, max=MAX_VALUE_LENGTH))
        super().__init__(item, validate=validate.Length(max=MAX_VALUES), **kwargs)

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> Any:
        return _domain(parse_values, _strings(value, "text values"), field=attr)


class Text(fields.Str):
    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> Any:
        return _domain(parse_text, super()._deserialize(value, attr, data, **kwargs))


# How parse_values reads every value of environment and release.
_VALUES = (
    " Each value is trimmed first, so a blank one is a 400 too (minLength counts before "
    "trimming); a comma always separates values, so a value holding one cannot be asked for."
)


def _environment() -> Values:
    return Values(
        metadata={
            "description": "Only events in one of these environments, exactly as sent "
            "(repeat or comma-separate: environment=production,staging)." + _VALUES
        }
    )


def _release() -> Values:
    return Values(
        metadata={
            "description": "Only events of one of these releases, exactly as sent "
            "(repeat or comma-separate)." + _VALUES
        }
    )


class _EventCursor(OneWayToPage):
    """``cursor`` on the events lists (``errortrack.issues.cursor``)."""

    cursor = CursorText(
        cursor.decode_event,
        metadata={
            # Checked by cursor.decode_event (a Length validator would see the decoded one).
            "maxLength": cursor.MAX_LENGTH,
            "description": "Continue a walk: the next_cursor of the previous page, as it "
            "came (opaque). Gives the per_page events after that page's last one "
            "(newest first, ties by event_id): every event stored before the walk began "
            "and still stored is seen exactly once, whatever arrives or goes meanwhile. "
            "Not with page.",
        },
    )


class _EventFilters(Schema):
    environment = _environment()
    release = _release()

    @staticmethod
    def _filters(data: dict[str, Any]) -> dict[str, Any]:
        return {
            "environments": tuple(data.pop("environment", ())),
            "releases": tuple(data.pop("release", ())),
        }


class IssuesQuery(PageQuery):
    status = Statuses(
        metadata={
            "description": "Only these statuses (repeat or comma-separate; each value "
            "trimmed, any case); all if absent."
        }
    )
    level = Levels(
        metadata={
            "description": "Only issues at these levels (the level of their newest event; "
            "repeat or comma-separate: level=error,fatal; each value trimmed). The server "
            "also takes any case, "
            "and warn for warning, critical for fatal, log for info (beyond the enum)."
        }
    )
    q = Text(
        metadata={
            "maxLength": MAX_TEXT,
            "description": "Case-insensitive substring (ASCII case folding) of the title "
            "or the culprit; % and _ are plain characters; trimmed (maxLength counts "
            "after), and blank is no filter.",
        }
    )
    environment = Values(
        metadata={
            "description": "Only issues with at least one stored event in one of these "
            "environments, exactly as sent (repeat or comma-separate)." + _VALUES
        }
    )
    release = Values(
        metadata={
            "description": "Only issues with at least one stored event of one of these "
            "releases, exactly as sent (repeat or comma-separate). With environment: one "
            "event in both." + _VALUES
        }
    )
    sort = fields.Str(
        load_default="-last_seen",
        validate=validate.OneOf(list(ISSUE_SORTS)),
        metadata={
            "description": "Most recently seen first by default; ties by id. id is oldest "
            "created first: an issue's id never changes, so a cursor walk by id or -id "
            "sees every issue that exists throughout the walk exactly once. By the other "
            "sorts an issue whose last_seen, first_seen or count changes during a walk "
            "may be seen twice or not at all."
        },
    )
    cursor = CursorText(
        cursor.decode_issue,
        metadata={
            "maxLength": cursor.MAX_LENGTH,
            "description": "Continue a walk: the next_cursor of the previous page, as it "
            "came (opaque). Gives the per_page issues after that page's last one in its "
            "sort, unaffected by issues added, changed or deleted before that point. Not "
            "with page; sort defaults to the cursor's own.",
        },
    )

    @pre_load
    def _sort_of_cursor(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        """A cursor without ``sort`` continues in its own sort (a client following
        next_cursor need not repeat it); with a different ``sort`` it is a 400
        (``read.list_issues``)."""
        refuse_page_with_cursor(data)
        text = data.get("cursor")
        if "sort" in data or not isinstance(text, str):
            return data
        try:
            return {**data, "sort": cursor.decode_issue(text).sort}
        except ValidationError:
            return data  # the cursor field itself reports it

    @post_load
    def _split(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        return {
            "statuses": tuple(data.pop("status", ())),
            "levels": tuple(data.pop("level", ())),
            "text": data.pop("q", None),
            **_EventFilters._filters(data),
            "sort": data.pop("sort"),
            "cursor": data.pop("cursor", None),
            "page": page_request(data),
        }


class EventsQuery(_EventCursor, _EventFilters, PayloadPageQuery):
    @post_load
    def _split(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        return {
            **self._filters(data),
            "cursor": data.pop("cursor", None),
            "page": page_request(data),
        }


class ProjectEventsQuery(_EventCursor, _EventFilters, PayloadPageQuery):
    trace_id = TraceId(
        metadata={
            "description": "Only the events sent inside this trace: 32 hex digits, any "
            "case, or a UUID with dashes (trimmed).",
            "pattern": TRACE_ID_PATTERN,
        }
    )

    @post_load
    def _split(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        return {
            **self._filters(data),
            "trace_id": data.pop("trace_id", None),
            "cursor": data.pop("cursor", None),
            "page": page_request(data),
        }


class LatestEventQuery(_EventFilters):
    @post_load
    def _split(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        return self._filters(data)


class EventPath(Schema):
    """The path's ``{event_id}`` as the document states it (``ApiDoc.path``), as
    ``read.parse_event_id`` reads it (a 400 otherwise); it was a bare string."""

    event_id = fields.Str(
        required=True,
        metadata={
            "description": "32 hex digits, any case, or a UUID with dashes.",
            # The same shape as a trace id.
            "pattern": TRACE_ID_PATTERN,
        },
    )


class ChangedIssueOut(Schema):
    """An issue as a status change answers it: from the relational store only, so a
    change never waits on (or fails with) ClickHouse; ``IssueOut`` without ``user_count``."""

    id = fields.Int(required=True)
    project_id = fields.Int(required=True)
    title = fields.Str(required=True)
    culprit = fields.Str(required=True)
    level = fields.Str(required=True)
    status = fields.Str(required=True, metadata={"enum": list(ISSUE_STATUSES)})
    count = fields.Int(required=True, metadata={"description": "Events grouped into it"})
    first_seen = fields.Str(required=True, metadata=_TIME)
    last_seen = fields.Str(required=True, metadata=_TIME)
    fingerprint = fields.Str(required=True)


class IssueOut(ChangedIssueOut):
    user_count = fields.Int(
        required=True,
        metadata={
            "description": "Users affected: distinct users among its stored events (each "
            "event's user is the first of its user id, username, email and IP address "
            "sent); events without one are not counted, expired or deleted events no "
            "longer are. Exact for small counts, an estimate from tens of thousands of users up "
            "(ClickHouse's uniq, as Sentry counts them: 100,000 read as 99,993)."
        },
    )


class EventSummaryOut(Schema):
    event_id = fields.Str(required=True, metadata={"description": "32 hex characters"})
    issue_id = fields.Int(required=True)
    timestamp = fields.Str(required=True, metadata=_TIME)
    received_at = fields.Str(required=True, metadata=_TIME)
    level = fields.Str(required=True)
    platform = fields.Str(required=True)
    release = fields.Str(required=True, allow_none=True)
    environment = fields.Str(required=True, allow_none=True)
    title = fields.Str(required=True)
    culprit = fields.Str(required=True)
    trace_id = fields.Str(required=True, allow_none=True)
    span_id = fields.Str(required=True, allow_none=True)


class EventOut(EventSummaryOut):
    payload = fields.Dict(required=True, metadata={"description": "The event as the SDK sent it"})


IssuePageOut = page_of(IssueOut, cursors=True)
EventPageOut = page_of(EventOut, cursors=True)
