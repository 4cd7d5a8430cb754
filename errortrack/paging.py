"""Page-number pagination shared by every list endpoint (logs, issues, events).

Every list answers ``{items, total_count, total_count_exact, page, per_page, total_pages}``;
a page past the end is an empty page, not an error, so that a client paging while rows
expire or get deleted never sees a 404 in the middle of a walk. ``total_count_exact`` is
false only where a list caps its count (the logs list, see ``errortrack.logs.query``):
``total_count`` is then a lower bound, as Elasticsearch's ``track_total_hits`` and
Sentry's ``X-Max-Hits`` do.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from errortrack.errors import ValidationError

DEFAULT_PER_PAGE = 50
MAX_PER_PAGE = 1000
# Far beyond any real walk, small enough that page * per_page stays a 64-bit offset.
MAX_PAGE = 1_000_000_000


@dataclasses.dataclass(frozen=True)
class PageRequest:
    page: int = 1
    per_page: int = DEFAULT_PER_PAGE

    def __post_init__(self) -> None:
        # Checked here too (not only in the HTTP schema) so that MCP and other callers of
        # the services get the same 400 for the same mistake.
        if not 1 <= self.page <= MAX_PAGE:
            raise ValidationError(f"page must be between 1 and {MAX_PAGE}", field="page")
        if not 1 <= self.per_page <= MAX_PER_PAGE:
            raise ValidationError(
                f"per_page must be between 1 and {MAX_PER_PAGE}", field="per_page"
            )

    @property
    def offset(self) -> int:
        return (self.page - 1) * self.per_page

    def past_end(self, total: int) -> bool:
        """True when this page starts after the last row: no need to ask the store."""
        return self.offset >= total


def page_body(
    items: Sequence[Any], total: int, request: PageRequest, *, exact: bool = True
) -> dict[str, Any]:
    return {
        "items": list(items),
        "total_count": total,
        "total_count_exact": exact,
        "page": request.page,
        "per_page": request.per_page,
        "total_pages": math.ceil(total / request.per_page),
    }


def parse_choices(
    raw: Iterable[str],
    allowed: Sequence[str],
    *,
    field: str,
    aliases: Mapping[str, str] | None = None,
) -> tuple[str, ...]:
    """A list filter given as ``x=a&x=b`` or ``x=a,b`` alike; order kept, no repeats.

    Any value outside ``allowed`` (after ``aliases``) is a 400 naming ``field``."""
    found: list[str] = []
    for chunk in raw:
        for part in chunk.split(","):
            name = part.strip().lower()
            name = (aliases or {}).get(name, name)
            if name not in allowed:
                raise ValidationError(
                    f"{field} must be one of {', '.join(allowed)}, not {part.strip()!r}",
                    field=field,
                )
            if name not in found:
                found.append(name)
    return tuple(found)


def encode_cursor(value: list[Any]) -> str:
    """A keyset cursor's text: base64url of a small JSON array, opaque to clients (the
    logs, issues, events, spans and tail cursors)."""
    return base64.urlsafe_b64encode(orjson.dumps(value)).rstrip(b"=").decode("ascii")


def cursor_fields(text: Any, *, size: int, max_length: int, refused: str) -> list[Any]:
    """The JSON array of ``size`` items inside a cursor ``encode_cursor`` wrote; anything
    else (edited, truncated, made up, too long) is a 400 naming ``cursor``, never a 500."""
    if not isinstance(text, str) or not text or len(text) > max_length:
        raise ValidationError(refused, field="cursor")
    try:
        value = orjson.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, TypeError, binascii.Error, orjson.JSONDecodeError):
        raise ValidationError(refused, field="cursor") from None
    if not isinstance(value, list) or len(value) != size:
        raise ValidationError(refused, field="cursor")
    return value
