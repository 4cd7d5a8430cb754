"""Schemas of the storage endpoints: the usage report and the cleanup request/answer."""

from __future__ import annotations

import datetime as dt
from typing import Any

from marshmallow import Schema, fields, validate

from errortrack.api.schemas.access import _JSONBool
from errortrack.db import MAX_ID
from errortrack.storage.cleanup import MAX_DAYS

TABLES = ("logs", "events", "spans")


class _UTC(fields.DateTime):
    """ClickHouse hands DateTime64 back naive (in UTC); without an offset the text is not
    an RFC 3339 date-time as documented (found by tests/e2e/test_schemathesis.py)."""

    def _serialize(self, value: Any, attr: Any, obj: Any, **kwargs: Any) -> Any:
        if isinstance(value, dt.datetime) and value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return super()._serialize(value, attr, obj, **kwargs)


class FiguresOut(Schema):
    rows = fields.Int(required=True)
    bytes_on_disk = fields.Int(required=True)
    compressed_bytes = fields.Int(required=True)
    uncompressed_bytes = fields.Int(required=True)
    oldest = _UTC(required=True, allow_none=True, metadata={"description": "Oldest row (UTC)"})
    newest = _UTC(required=True, allow_none=True, metadata={"description": "Newest row (UTC)"})


class TableOut(FiguresOut):
    parts = fields.Int(required=True)
    partitions = fields.Int(required=True, metadata={"description": "(day, retention) pairs"})


def _per_table(schema: type[Schema]) -> type[Schema]:
    return Schema.from_dict(
        {t: fields.Nested(schema, required=True) for t in TABLES}, name=f"{schema.__name__}ByTable"
    )


class ProjectUsageOut(Schema):
    project_id = fields.Int(required=True)
    name = fields.Str(
        required=True, allow_none=True, metadata={"description": "null: project deleted"}
    )
    exists = fields.Bool(required=True)
    retention_days = fields.Int(required=True, metadata={"description": "In effect for new data"})
    retention_override = fields.Int(
        required=True, allow_none=True, metadata={"description": "null: default"}
    )
    tables = fields.Nested(_per_table(FiguresOut), required=True)
    total = fields.Nested(FiguresOut, required=True)


class RelationalOut(Schema):
    backend = fields.Str(required=True, metadata={"enum": ["sqlite", "postgresql"]})
    bytes = fields.Int(
        required=True, allow_none=True, metadata={"description": "null when not readable"}
    )


class RetentionOut(Schema):
    default_days = fields.Int(required=True)
    disk_cap_bytes = fields.Int(required=True, metadata={"description": "0: no cap"})


class UsageOut(Schema):
    tables = fields.Nested(_per_table(TableOut), required=True)
    projects = fields.List(fields.Nested(ProjectUsageOut), required=True)
    total = fields.Nested(FiguresOut, required=True)
    relational = fields.Nested(RelationalOut, required=True)
    retention = fields.Nested(RetentionOut, required=True)
    estimates = fields.Str(required=True, metadata={"description": "What is estimated"})


class CleanupIn(Schema):
    older_than_days = fields.Int(
        required=True, strict=True, validate=validate.Range(min=1, max=MAX_DAYS)
    )
    # A larger id was a 500 on either store until the sixteenth session.
    project_id = fields.Int(
        load_default=None,
        allow_none=True,
        strict=True,
        validate=validate.Range(min=1, max=MAX_ID),
    )
    # Strict: marshmallow's Bool read "no", "off", "0" and 0 as false, so a caller who
    # meant a dry run in any of those words deleted for real.
    dry_run = _JSONBool(load_default=False)


_Counts = Schema.from_dict({t: fields.Int(required=True) for t in TABLES}, name="TableCounts")


class CleanupOut(Schema):
    cutoff = fields.DateTime(required=True, metadata={"description": "Rows older are removed"})
    project_id = fields.Int(required=True, allow_none=True)
    dry_run = fields.Bool(required=True)
    removed = fields.Nested(_Counts, required=True, metadata={"description": "Rows per table"})
    transactions = fields.Int(required=True, metadata={"description": "Root spans among spans"})
    partitions_dropped = fields.Nested(_Counts, required=True)
    issues_removed = fields.Int(required=True)
