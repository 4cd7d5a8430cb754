"""Keyset cursors for the logs list: where a walk stopped, as an opaque string.

Every logs list is ordered completely, ties broken by ``id`` (``errortrack.logs.query``),
so the last row of a page names exactly where the next one starts: its sort key values.
A walk by cursor is therefore unaffected by logs arriving, expiring or being merged
meanwhile, which numbered pages (an offset) are not. The string is base64url of a small
JSON array, ``[sort, timestamp in microseconds, id, severity_number]``: opaque to
clients (documented as such), checked field by field when it comes back, so a cursor
that was edited, truncated or made up is a 400 naming ``cursor``, never a 500.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

from errortrack.errors import ValidationError
from errortrack.logs.filters import SORTS
from errortrack.paging import cursor_fields, encode_cursor

# Far longer than any cursor this module writes (about 100 characters), short enough
# that a made-up one costs nothing to refuse.
MAX_LENGTH = 200
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_US = dt.timedelta(microseconds=1)
# What the logs table's DateTime64 holds (1900-2299): no row, hence no cursor, outside.
_US_MIN = (dt.datetime(1900, 1, 1, tzinfo=dt.UTC) - _EPOCH) // _US
_US_MAX = (dt.datetime(2300, 1, 1, tzinfo=dt.UTC) - _EPOCH) // _US
_REFUSED = "cursor is not one this server gave out (pass next_cursor as it came)"


@dataclasses.dataclass(frozen=True)
class Cursor:
    """The sort key of the last row a page showed."""

    sort: str
    timestamp: dt.datetime  # aware, UTC
    id: uuid.UUID
    severity: int | None = None

    @classmethod
    def after_row(cls, sort: str, timestamp: dt.datetime, log_id: Any, severity: Any) -> Cursor:
        """The cursor after a row as ClickHouse returned it (a DateTime64 comes back
        naive in UTC, or aware)."""
        if timestamp.tzinfo is None:
            timestamp = timestamp.replace(tzinfo=dt.UTC)
        return cls(sort, timestamp.astimezone(dt.UTC), uuid.UUID(str(log_id)), severity)

    def encode(self) -> str:
        micros = (self.timestamp - _EPOCH) // _US
        return encode_cursor([self.sort, micros, self.id.hex, self.severity])


def decode(text: str) -> Cursor:
    """The cursor ``encode`` wrote; anything else is a 400 naming ``cursor``."""
    sort, micros, hex_id, severity = cursor_fields(
        text, size=4, max_length=MAX_LENGTH, refused=_REFUSED
    )
    try:
        log_id = uuid.UUID(hex=hex_id)
    except (ValueError, TypeError, AttributeError):
        raise ValidationError(_REFUSED, field="cursor") from None
    # bool is an int to Python: True must not pass for a timestamp or a severity.
    if (
        sort not in SORTS
        or type(micros) is not int
        or not _US_MIN <= micros < _US_MAX
        or not (severity is None or (type(severity) is int and 0 <= severity <= 255))
    ):
        raise ValidationError(_REFUSED, field="cursor")
    return Cursor(sort, _EPOCH + micros * _US, log_id, severity)
