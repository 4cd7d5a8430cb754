"""What a logs query may ask for, parsed from text and checked once for every front door.

The HTTP resource (through its marshmallow schema) and the MCP tools both turn their
strings into a :class:`LogFilter` with these functions, so the same mistake gives the
same 400 naming the same parameter everywhere.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation

from errortrack.errors import ValidationError
from errortrack.ingest.logs import SEVERITY
from errortrack.paging import parse_choices

# The six levels SDKs send; ingest derives severity_number from them (ARCHITECTURE.md
# "Logs") and filtering and sorting use that number, never the text.
LEVELS = tuple(SEVERITY)
# Sentry's event levels say "warning"; people type it for logs too.
_LEVEL_ALIASES = {"warning": "warn"}
SORTS = ("-timestamp", "timestamp", "-severity", "severity")

MAX_TEXT = 500
MAX_ATTR_NAME = 200
MAX_ATTR_VALUE = 1000
MAX_ATTR_FILTERS = 20
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
# Everything between "attr[" and the final "]": names such as "items[0]" hold brackets
# themselves, and no bracket in them could be written before (every filter a 400).
_ATTR_KEY = re.compile(r"^attr\[(?P<name>.*)\]$", re.DOTALL)
# ASCII digits only, the whole text (``\d`` takes any Unicode digit and ``$`` a trailing
# newline, so an Arabic-Indic five or "5\n" matched the integer 5); float() is as loose,
# hence _FLOAT.
_INT = re.compile(r"[+-]?[0-9]{1,19}", re.ASCII)
# One way to read each digit: "[0-9]+\.?[0-9]*" let both runs take the same digits, and
# 1,000 digits and an "x" tried every split of them, 22 ms a value, four times a value
# and eight values a request: 0.7 s of the GIL (API review, twenty-ninth session).
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@dataclasses.dataclass(frozen=True)
class AttrFilter:
    """``attr[name]=value``: the attribute equals one of ``values`` in its own type."""

    name: str
    values: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class LogFilter:
    levels: tuple[str, ...] = ()
    trace_id: str | None = None
    text: str | None = None
    start: dt.datetime | None = None
    end: dt.datetime | None = None
    attributes: tuple[AttrFilter, ...] = ()
    sort: str = "-timestamp"

    def __post_init__(self) -> None:
        if self.start and self.end and self.start >= self.end:
            raise ValidationError("end must be later than start", field="end")
        if self.sort not in SORTS:
            raise ValidationError(f"sort must be one of {', '.join(SORTS)}", field="sort")

    @property
    def severity_numbers(self) -> list[int]:
        return sorted({SEVERITY[level] for level in self.levels})


def parse_levels(raw: Iterable[str]) -> tuple[str, ...]:
    """``level=error&level=fatal`` and ``level=error,fatal`` alike; order kept, no repeats."""
    return parse_choices(raw, LEVELS, field="level", aliases=_LEVEL_ALIASES)


def parse_trace_id(raw: str) -> str:
    value = raw.strip().lower().replace("-", "")
    if not _HEX32.match(value):
        raise ValidationError(
            "trace_id must be 32 hexadecimal characters or a UUID", field="trace_id"
        )
    return value


def parse_text(raw: str) -> str | None:
    value = raw.strip()
    if len(value) > MAX_TEXT:
        raise ValidationError(f"q must be at most {MAX_TEXT} characters", field="q")
    return value or None


# A time's fraction of a second (ISO 8601 allows a comma); no other part has a . or a ,.
_FRACTION = re.compile(r"[.,]([0-9]+)")


def parse_time(raw: str, field: str) -> dt.datetime:
    """ISO 8601; a time without an offset is taken as UTC (the server runs in UTC)."""
    text = raw.strip()
    if text.endswith("z"):
        text = text[:-1] + "Z"  # RFC 3339 allows a lower-case z; Python 3.11 does not
    try:
        value = dt.datetime.fromisoformat(text)
        fraction = _FRACTION.search(text)
        if fraction is not None and fraction.group(1)[6:].strip("0"):
            # Finer than a microsecond, which fromisoformat cuts off: rounded up instead,
            # to the first microsecond (logs are kept to one) not before the time sent,
            # so that an inclusive start and an exclusive end both mean what they say.
            value += dt.timedelta(microseconds=1)
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        # Near year 1 or 9999 an offset carries the UTC time out of datetime's range.
        value = value.astimezone(dt.UTC)
    except (ValueError, OverflowError):
        raise ValidationError(
            f"{field} must be an ISO 8601 time such as 2026-11-01T12:00:00Z", field=field
        ) from None
    return value


def attr_filter_name(param: str) -> str | None:
    """The attribute name of an ``attr[<name>]`` query parameter, None for other params."""
    if not param.startswith("attr[") and param != "attr":
        return None
    match = _ATTR_KEY.match(param)
    name = match["name"] if match else ""
    if not name or len(name) > MAX_ATTR_NAME:
        raise ValidationError(
            f"attribute filters look like attr[<name>]=<value> with a name of 1 to "
            f"{MAX_ATTR_NAME} characters; got {param!r}",
            field=param,
        )
    return name


def parse_attr_filters(params: Iterable[tuple[str, list[str]]]) -> tuple[AttrFilter, ...]:
    """Collect every ``attr[name]`` parameter; repeating one name means "any of"."""
    found: dict[str, list[str]] = {}
    for param, values in params:
        name = attr_filter_name(param)
        if name is None:
            continue
        for value in values:
            if len(value) > MAX_ATTR_VALUE:
                raise ValidationError(
                    f"attribute values are at most {MAX_ATTR_VALUE} characters", field=param
                )
            found.setdefault(name, []).append(value)
    if len(found) > MAX_ATTR_FILTERS:
        raise ValidationError(f"at most {MAX_ATTR_FILTERS} attribute filters", field="attr")
    return tuple(AttrFilter(name, tuple(dict.fromkeys(vals))) for name, vals in found.items())


def as_int(value: str) -> int | None:
    if not _INT.fullmatch(value):
        return None
    number = int(value)
    return number if INT64_MIN <= number <= INT64_MAX else None


def as_whole(value: str) -> int | None:
    """An integer attribute's value: integer text, or a double's text whose decimal value
    is a whole number within Int64 ("1000.0" and "1e3" are the integer 1000 too, as "1000" finds
    the double 1000.0; they found no integer attribute)."""
    number = as_int(value)
    if number is not None:
        return number
    if not _FLOAT.fullmatch(value):
        return None
    # Exact, in decimal: through a double, "1.0000000000000001" found the integer 1,
    # "1e-400" the integer 0, and "9007199254740993.0" (past 2**53) missed its integer.
    # The bounds are compared first, so that "1e99999" is never expanded.
    try:
        exact = Decimal(value)
    except InvalidOperation:
        # An exponent past Decimal's own limits ("1e99999999999999999999999"; a 500 on
        # the logs list): no Int64 is that far out, and no zero is written that way
        # that "0" does not find too.
        return None
    if exact.is_zero():
        return 0
    if abs(exact.adjusted()) > 18:  # out of Int64, or a fraction: cheap, unexpanded
        return None
    if not INT64_MIN <= exact <= INT64_MAX or exact != exact.to_integral_value():
        return None
    return int(exact)


def as_float(value: str) -> float | None:
    if not _FLOAT.fullmatch(value):
        return None  # float() also takes "1_5", " 15 ", "nan" and non-ASCII digits
    number = float(value)
    return number if math.isfinite(number) else None


def as_bool(value: str) -> bool | None:
    return {"true": True, "false": False}.get(value.strip().lower())
