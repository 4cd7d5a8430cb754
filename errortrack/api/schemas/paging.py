"""The page query (page, per_page) and page bodies shared by every list endpoint."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from marshmallow import Schema, fields, pre_load, validate
from marshmallow import ValidationError as SchemaError

from errortrack.errors import ValidationError
from errortrack.paging import DEFAULT_PER_PAGE, MAX_PAGE, MAX_PER_PAGE, PageRequest

# A decimal integer spelled one way: ASCII digits, no leading zero, a minus at most (the
# range check answers a negative). At most 20 digits; a longer one is no page either.
_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]{0,19})")


class QueryInt(fields.Int):
    """An integer query parameter in ASCII digits only. marshmallow's Int reads with
    ``int()``, which also takes other scripts' digits (``page=%D9%A1``, an Arabic-Indic
    one), ``+1``, `` 1``, ``01`` and ``1_0``: each was read as page 1 (found in the
    twentieth session)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        if not isinstance(value, str) or _DECIMAL.fullmatch(value) is None:
            raise self.make_error("invalid")
        return super()._deserialize(value, attr, data, **kwargs)


class CursorText(fields.Str):
    """An opaque keyset cursor, read by ``decode`` (``errortrack.logs.cursor``,
    ``errortrack.issues.cursor``): one it refuses is a 400 naming ``cursor``."""

    def __init__(self, decode: Callable[[str], Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._decode = decode

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        try:
            return self._decode(super()._deserialize(value, attr, data, **kwargs))
        except ValidationError as exc:
            raise SchemaError(exc.message) from None


def refuse_page_with_cursor(data: Mapping[str, Any]) -> None:
    """A list is walked by page or by cursor: both at once is a 400 naming ``cursor``."""
    if "cursor" in data and "page" in data:
        raise SchemaError("give either page or cursor, not both", field_name="cursor")


class OneWayToPage(Schema):
    """The query of a list that takes ``cursor`` beside ``page``: never both."""

    @pre_load
    def _one_way_to_page(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        refuse_page_with_cursor(data)
        return data


class PageQuery(Schema):
    page = QueryInt(
        load_default=1,
        validate=validate.Range(1, MAX_PAGE),
        metadata={"description": "1-based page number; a page past the end is empty."},
    )
    per_page = QueryInt(
        load_default=DEFAULT_PER_PAGE,
        validate=validate.Range(1, MAX_PER_PAGE),
        metadata={"description": f"Items per page, at most {MAX_PER_PAGE}."},
    )


# Lists whose items carry whole event payloads, each up to ERRORTRACK_MAX_EVENT_BYTES
# (1 MiB): a page is built whole in memory, about three copies of it, so 1000 such
# events were a 910 MiB answer costing the worker 2.5 GB, and a few at once got it
# killed, ingest with it (review, twenty-fourth session). Sentry caps its lists at 100.
MAX_PAYLOAD_PER_PAGE = 100


class PayloadPageQuery(PageQuery):
    per_page = QueryInt(
        load_default=DEFAULT_PER_PAGE,
        validate=validate.Range(1, MAX_PAYLOAD_PER_PAGE),
        metadata={
            "description": f"Items per page, at most {MAX_PAYLOAD_PER_PAGE} (each item "
            "carries its event's whole payload)."
        },
    )


def page_request(data: dict[str, Any]) -> PageRequest:
    """Pop ``page`` and ``per_page`` from loaded query data."""
    return PageRequest(page=data.pop("page"), per_page=data.pop("per_page"))


def page_of(item: type[Schema], *, cursors: bool = False) -> type[Schema]:
    """The page body schema (``errortrack.paging.page_body``) for ``item``; with
    ``cursors``, also ``next_cursor``, and ``page`` null on a page asked for by cursor."""
    name = item.__name__.removesuffix("Out") + "Page"
    extra: dict[str, fields.Field] = {}
    if cursors:
        extra["next_cursor"] = fields.Str(
            required=True,
            allow_none=True,
            metadata={
                "description": "Pass as cursor for the next page; null at the end of "
                "the list (nothing after this page)."
            },
        )
    return Schema.from_dict(
        {
            "items": fields.List(fields.Nested(item), required=True),
            "total_count": fields.Int(
                required=True,
                metadata={
                    "description": "Items matching the query; a lower bound when "
                    "total_count_exact is false."
                },
            ),
            "total_count_exact": fields.Bool(
                required=True,
                metadata={
                    "description": "False when the count stopped at the list's cap "
                    "(logs with text, attribute or trace filters: 10,000, or the end "
                    "of the requested page if later); more items exist."
                },
            ),
            "page": fields.Int(
                required=True,
                allow_none=cursors,
                metadata={"description": "null on a page asked for by cursor"} if cursors else {},
            ),
            "per_page": fields.Int(required=True),
            "total_pages": fields.Int(required=True),
            **extra,
        },
        name=name,
    )
