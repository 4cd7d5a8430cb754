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
# A page of logs or spans ends early, with a cursor to go on, once its rows' bulk (a
# log's body and attributes, a span's description and attributes) adds up to more than
# this; it always holds at least one row. The largest page, 1000 logs of 1 MB, was 954
# MiB and cost the worker +2.7 GB (the ClickHouse result, Python strings, the JSON);
# four at once were 10 GB, and an OOM kill takes ingest with it. Any DSN (public in a
# browser app) can send such logs.
PAGE_BYTES = 32 * 1024 * 1024


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


def budgeted(
    select: str,
    columns: str,
    heavy: Sequence[str],
    order: str,
    *,
    keep: int = 1,
    skip: int = 0,
) -> str:
    """``select`` (``SELECT {columns}[, more] FROM ...``) with one more column, last: true
    for each row after the first ``keep`` once it and the rows before it in ``order``
    hold more than ``PAGE_BYTES`` of the ``heavy`` columns; the first ``skip`` rows (read
    only to look at, not the page's) count for nothing. Those rows
    come with the heavy columns empty, so that they cost nothing here: the caller ends
    its page before the first of them (``within_budget``), with a cursor after the last
    row it keeps. ``order`` must be the order the caller's page ends up in, ties broken
    the same way. Computed in ClickHouse over the page alone, after its LIMIT."""
    extra = select.removeprefix(f"SELECT {columns}").split(" FROM ", 1)[0]
    blanked = ", ".join(f"if(_over, '', {c})" if c in heavy else c for c in columns.split(", "))
    size = " + ".join(f"length({c})" for c in heavy)
    if skip:
        # Numbered in a query of its own: window functions do not nest.
        size = f"if(_n > {int(skip)}, {size}, 0)"
        select = f"SELECT *, row_number() OVER (ORDER BY {order}) AS _n FROM ({select})"
    return (
        f"SELECT {blanked}{extra}, _over FROM (SELECT *, "
        f"row_number() OVER (ORDER BY {order}) > {int(keep)} AND "
        f"sum({size}) OVER (ORDER BY {order} "
        f"ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) > {int(PAGE_BYTES)} AS _over "
        f"FROM ({select})) ORDER BY {order}"
    )


def within_budget(rows: list[Any]) -> tuple[list[Any], bool]:
    """The rows of a ``budgeted`` read before the first one past the budget, without the
    budget's column, and whether any was left out."""
    for i, row in enumerate(rows):
        if row[-1]:
            return [r[:-1] for r in rows[:i]], True
    return [r[:-1] for r in rows], False


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
