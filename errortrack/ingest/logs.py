"""``log`` items -> rows of the ``logs`` table (ARCHITECTURE.md "Logs", the seed's rules).

This runs once per log at the highest rate of anything in the server, so it is built
for that (measured in bench/RESULTS.md, seventh session):
- The item is decoded by msgspec into small structs, and each log's ``attributes``
  is kept as the raw bytes the SDK sent (``msgspec.Raw``). Those bytes go into the row
  unchanged (ClickHouse stores a JSON object sent for a String column as its text), so
  the attributes are stored exactly as sent, byte for byte, and are never encoded again.
- The attributes are decoded a second time, into ``Attribute`` structs, only for the
  typed maps. The structs opt out of the cyclic GC (decoded JSON has no cycles), which
  then tracks only the maps' dicts.
- The item's rows are encoded here, at once, by msgspec, as the JSONEachRow lines the
  spool stores (``ItemRows.log_lines``).
Together ~24 % less CPU per log than ``orjson.loads`` of the item, dict rows and an
``orjson.dumps`` of each row, which re-encoded every attribute.
"""

from __future__ import annotations

import contextlib
import re
from typing import TYPE_CHECKING, Any

import msgspec

from errortrack import timestamps
from errortrack.errors import BadRequest
from errortrack.timestamps import corrected

if TYPE_CHECKING:
    from errortrack.ingest.items import ItemContext, ItemRows

# Derived from level by the server; any other level keeps its text and gets NULL.
SEVERITY = {"trace": 1, "debug": 5, "info": 9, "warn": 13, "error": 17, "fatal": 21}
# Node puts the active span in this attribute instead of a top-level span_id.
PARENT_SPAN_ATTRIBUTE = "sentry.trace.parent_span_id"
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_NO_ATTRIBUTES = msgspec.Raw(b"{}")


class Attribute(msgspec.Struct, gc=False):
    """One typed attribute as sent, ``{"value": ..., "type": ...}``; other keys (``unit``)
    are ignored here and kept in the stored attributes."""

    value: Any = None
    type: Any = None


class _Log(msgspec.Struct, gc=False):
    """One log as sent: what the row needs, each field of any JSON type (checked below,
    as before: a wrong type is tolerated, not a 400); other keys are ignored."""

    timestamp: Any = None
    level: Any = None
    body: Any = None
    trace_id: Any = None
    span_id: Any = None
    attributes: msgspec.Raw = msgspec.Raw(b"null")


class _Item(msgspec.Struct, gc=False):
    items: list[_Log]


class _Row(msgspec.Struct, gc=False):
    """A row of the logs table; encoded as a JSON object with these keys, in this order.
    No ``id``: the column's DEFAULT generateUUIDv4() (clickhouse/0010) makes it at insert,
    which cost less than making 100 UUIDs per item here (bench/RESULTS.md)."""

    project_id: int
    timestamp: float
    ingested_at: float
    level: str
    severity_number: int | None
    body: str
    trace_id: str
    span_id: str
    attributes: msgspec.Raw
    attr_string: dict[str, Any]
    attr_int: dict[str, Any]
    attr_float: dict[str, Any]
    attr_bool: dict[str, Any]
    retention_days: int


_ITEM = msgspec.json.Decoder(_Item)
# An object whose values stay raw JSON: checks a payload's syntax without building it.
_RAW_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ATTRIBUTES = msgspec.json.Decoder(dict[str, Attribute] | None)
# For attributes whose values are not all objects (tolerated: those stay out of the maps).
_ANY_ATTRIBUTES = msgspec.json.Decoder(dict[str, Any] | None)
_ENCODER = msgspec.json.Encoder()
_ENCODE = _ENCODER.encode
# msgspec raises its own errors for bad JSON or shapes, UnicodeDecodeError for bad UTF-8
# and RecursionError for JSON nested deeper than Python's recursion limit allows (~990
# levels less the caller's frames; orjson, which reads the stored attributes back, and
# ClickHouse, which stores them, allow 1,024 and 1,000).
_DECODE_ERRORS = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)


def handle_log(payload: bytes, headers: dict[str, Any], ctx: ItemContext) -> ItemRows:
    from errortrack.ingest.items import ItemRows, check_rows

    if not payload.isascii():  # memchr speed; JSON from SDKs is mostly ASCII
        # msgspec skips the fields a struct does not name (an attribute's "unit") without
        # checking their UTF-8, and the attributes are stored as sent: one bad byte there
        # was acknowledged and then made every logs page holding it invalid JSON (or a
        # 500, for a pretty-printed item).
        try:
            payload.decode()
        except UnicodeDecodeError:
            raise BadRequest("log item payload is not valid UTF-8") from None
    try:
        logs = _ITEM.decode(payload).items
    except _DECODE_ERRORS as exc:
        raise _why_not(payload, exc) from None
    check_rows(len(logs), "a log item", ctx)
    received = ctx.received_at.timestamp()
    pid, retention, drift = ctx.project_id, ctx.retention_days, ctx.drift
    # The stored attributes are the bytes as sent, unless a pretty-printed item (which
    # needs a `length` header) put newlines in them: the spool's rows are one per line.
    verbatim = b"\n" not in payload
    rows = [_row(log, i, pid, received, retention, verbatim, drift) for i, log in enumerate(logs)]
    return ItemRows(log_lines=_ENCODER.encode_lines(rows), log_count=len(rows))


# Where msgspec found an item that is not an object: "... - at `$.items[3]`".
_NOT_AN_OBJECT = re.compile(r"Expected `object`, got `\w+` - at `\$\.items\[(\d+)\]`")


def _why_not(payload: bytes, exc: Exception) -> BadRequest:
    """The 400 for a payload msgspec refused, in the words the API has always used.

    Without reading the items into Python objects again: that re-read (orjson, only to
    word this answer) took 2.2 s and ~0.57 GB for 12 MiB of nested arrays, 18 KB
    gzipped (ingest review, thirty-first session). Reading the payload as raw JSON checks
    its syntax and builds nothing."""
    try:
        _RAW_OBJECT.decode(payload)
    except msgspec.ValidationError:
        return BadRequest('log item payload must be an object {"items": [...]}')
    except _DECODE_ERRORS as error:
        return BadRequest(f"log item payload is not valid JSON: {error}")
    if isinstance(exc, msgspec.ValidationError):
        message = str(exc)
        if (found := _NOT_AN_OBJECT.fullmatch(message)) is not None:
            return BadRequest(f"log {found[1]} is not a JSON object")
        if message.endswith("- at `$.items`") or message.startswith("Object missing"):
            return BadRequest('log item payload must be an object {"items": [...]}')
    return BadRequest(f"log item payload is not valid: {exc}")


def _row(
    log: _Log,
    index: int,
    project_id: int,
    received: float,
    retention: int,
    verbatim: bool,
    drift: float,
) -> _Row:
    attributes = _attributes(log.attributes, index)
    if attributes is None:
        attributes, raw = {}, _NO_ATTRIBUTES
    elif verbatim:
        raw = log.attributes
    else:
        raw = msgspec.Raw(_ENCODE(_ANY_ATTRIBUTES.decode(log.attributes)))
    level = log.level
    if type(level) is not str:
        level = ""
    timestamp = log.timestamp
    # Moved by the sender's clock drift, if any; missing, not a time, or outside Sentry's
    # window around the arrival (Relay's rule for logs): the arrival time. A log from a
    # clock years behind would otherwise be dropped by the TTL at once, one years ahead
    # kept past its retention. Numbers (seconds) from most SDKs; RFC 3339 strings from
    # sentry-go's first releases with logs (until the eighteenth session they meant none,
    # and every Go log was dated at its arrival).
    if type(timestamp) is float or type(timestamp) is int:
        timestamp = corrected(timestamp, received, drift)
    elif type(timestamp) is str and (parsed := timestamps.parse(timestamp)) is not None:
        timestamp = corrected(parsed, received, drift)
    else:
        timestamp = received
    body = log.body
    if type(body) is not str:
        body = "" if body is None else _ENCODE(body).decode()
    trace_id, span_id = _trace_and_span(log.trace_id, log.span_id, attributes)
    if len(level) > MAX_LEVEL or len(trace_id) > MAX_ID or len(span_id) > MAX_ID:
        raise _too_long(index, level, trace_id, span_id)
    strings, ints, floats, bools = _typed(attributes)
    return _Row(
        project_id,
        timestamp,
        received,
        level,
        SEVERITY.get(level),
        body,
        trace_id,
        span_id,
        raw,
        strings,
        ints,
        floats,
        bools,
        retention,
    )


# A log's level and ids are short (SDKs send "info" and 32 and 16 hex digits), and only a
# log's body and attributes count against a page's byte budget: 1,000 logs of 1 MB span
# ids made a 954 MiB page that took the worker to 3.8 GB (API review, thirty-first
# session). Ids as spans' (traces.rows.MAX_ID, not imported: traces imports this module).
MAX_LEVEL = 64
MAX_ID = 64


def _too_long(index: int, level: str, trace_id: str, span_id: str) -> BadRequest:
    field, limit = next(
        (name, limit)
        for name, value, limit in (
            ("level", level, MAX_LEVEL),
            ("trace_id", trace_id, MAX_ID),
            ("span_id", span_id, MAX_ID),
        )
        if len(value) > limit
    )
    return BadRequest(f"log {index}: {field} is longer than {limit} characters")


def _attributes(raw: msgspec.Raw, index: int) -> dict[str, Attribute] | None:
    try:
        try:
            return _ATTRIBUTES.decode(raw)
        except msgspec.ValidationError:
            # Not an object, or one whose values are not all objects (those are skipped).
            loose = _ANY_ATTRIBUTES.decode(raw)
            return None if loose is None else attributes_of(loose)
    except msgspec.ValidationError as exc:
        if bytes(raw).lstrip().startswith(b"{"):  # an object, but a value out of range
            raise BadRequest(f"log {index}: attributes are not valid: {exc}") from None
        raise BadRequest(f"log {index}: attributes must be an object") from None
    except _DECODE_ERRORS as exc:
        raise BadRequest(f"log {index}: attributes are not valid JSON: {exc}") from None


def attributes_of(attributes: dict[str, Any]) -> dict[str, Attribute]:
    """Plain ``{name: {"value", "type"}}`` dicts as ``Attribute`` structs. A bare string,
    number, boolean or array (not what SDKs send, but what a hand-written sender might)
    gets the type its JSON value has, so that ``attr[name]=...`` finds it as it finds a
    typed one; a bare null is kept in the stored attributes only."""
    found = {}
    for name, attr in attributes.items():
        if type(attr) is dict:
            found[name] = Attribute(attr.get("value"), attr.get("type"))
        elif (kind := _BARE_TYPES.get(type(attr))) is not None:
            found[name] = Attribute(attr, kind)
    return found


_BARE_TYPES = {str: "string", bool: "boolean", int: "integer", float: "double", list: "array"}


def _trace_and_span(
    trace_id: Any, span_id: Any, attributes: dict[str, Attribute]
) -> tuple[str, str]:
    """Both only for logs emitted inside a span; SDKs send a propagation trace_id anyway."""
    if not span_id or not isinstance(span_id, str):
        parent = attributes.get(PARENT_SPAN_ATTRIBUTE)
        span_id = None if parent is None else parent.value
    if not span_id or not isinstance(span_id, str):
        return "", ""
    # Stored as filters and the trace view compare them: lower-case hex, a trace id
    # without a UUID's dashes. SDKs send that already; other senders found their logs
    # listed with a trace id that the trace_id filter then could not find.
    if not isinstance(trace_id, str):
        return "", span_id.lower()
    return trace_id.replace("-", "").lower(), span_id.lower()


def typed_maps(attributes: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The typed maps of plain attribute dicts (``{name: {"value", "type"}}``), by column."""
    strings, ints, floats, bools = _typed(attributes_of(attributes))
    return {"attr_string": strings, "attr_int": ints, "attr_float": floats, "attr_bool": bools}


_Maps = tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]


def _typed(attributes: dict[str, Attribute]) -> _Maps:
    """Each attribute in the map of its declared type, for filtering: string, integer,
    double and boolean maps, in that order.

    Arrays (and unknown types) go to attr_string as JSON text so that they stay
    searchable; values that do not fit their declared type are left out of the maps
    (they are still in ``attributes``). msgspec writes that text: orjson cannot write
    integers beyond 64 bits, which msgspec reads.
    """
    strings: dict[str, Any] = {}
    ints: dict[str, Any] = {}
    floats: dict[str, Any] = {}
    bools: dict[str, Any] = {}
    for name, attr in attributes.items():
        value = attr.value
        kind = attr.type
        vtype = type(value)
        if kind == "string":
            strings[name] = value if vtype is str else _ENCODE(value).decode()
        elif kind == "integer":
            if vtype is int and INT64_MIN <= value <= INT64_MAX:
                ints[name] = value
            elif vtype is str and (number := _as_int(value)) is not None:
                ints[name] = number
        elif kind == "double":
            if vtype is float:
                floats[name] = value
            elif vtype is int:
                # As a float: the row's encoder may be orjson (spans), which refuses an
                # integer beyond 64 bits; one beyond a double fits no Float64 at all.
                with contextlib.suppress(OverflowError):
                    floats[name] = float(value)
        elif kind == "boolean":
            if vtype is bool:
                bools[name] = value
        elif value is not None:
            strings[name] = _ENCODE(value).decode()
    return strings, ints, floats, bools


def _as_int(value: str) -> int | None:
    """An integer sent as a string, when it is one as JSON writes integers (ASCII digits,
    an optional minus): Python's ``int`` also reads " 12 ", "+12", "1_000" and other
    scripts' digits, which a filter ``attr[k]=1000`` then matched."""
    if not _INTEGER_TEXT.fullmatch(value):
        return None
    number = int(value)
    return number if INT64_MIN <= number <= INT64_MAX else None


# At most 20 digits: Int64's; longer is out of range anyway (and int() of thousands of
# digits is slow).
_INTEGER_TEXT = re.compile(r"-?[0-9]{1,20}")
