"""Schemas of the issue endpoints: list query, issue, events page."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, fields, post_load, validate
from marshmallow import ValidationError as SchemaError

from errortrack.api.schemas.paging import PageQuery, page_of, page_request
from errortrack.errors import ValidationError
from errortrack.issues.read import ISSUE_SORTS, parse_statuses
from errortrack.models import ISSUE_STATUSES

_TIME = {"format": "date-time"}


class Statuses(fields.List):
    """``status=resolved&status=muted`` or ``status=resolved,muted``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(fields.Str(validate=validate.OneOf(ISSUE_STATUSES)), **kwargs)

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> Any:
        values = value if isinstance(value, list) else [value]
        try:
            return parse_statuses(str(v) for v in values)
        except ValidationError as exc:
            raise SchemaError(exc.message) from None


class IssuesQuery(PageQuery):
    status = Statuses(
        metadata={"description": "Only these statuses (repeat or comma-separate); all if absent."}
    )
    sort = fields.Str(
        load_default="-last_seen",
        validate=validate.OneOf(list(ISSUE_SORTS)),
        metadata={"description": "Most recently seen first by default."},
    )

    @post_load
    def _split(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        return {
            "statuses": tuple(data.pop("status", ())),
            "sort": data.pop("sort"),
            "page": page_request(data),
        }


class EventsQuery(PageQuery):
    @post_load
    def _split(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        return {"page": page_request(data)}


class IssueOut(Schema):
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


IssuePageOut = page_of(IssueOut)
EventPageOut = page_of(EventOut)
