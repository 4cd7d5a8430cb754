"""Sentry envelope parsing (develop.sentry.dev "Envelopes").

An envelope is a JSON header line, then items: an item header line and a payload. With
``length`` in the item header the payload is exactly that many bytes (it may contain
newlines) and is followed by a newline or the end of the body; without it, the payload
runs to the next newline or to the end (Node never sends ``length`` nor a final newline).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import msgspec
import orjson

from errortrack.errors import BadRequest, PayloadTooLarge
from errortrack.ingest import surrogates


@dataclasses.dataclass
class Envelope:
    header: dict[str, Any]
    # (item header, payload) in order of appearance.
    items: list[tuple[dict[str, Any], bytes]]


# Bytes an envelope or item header line may hold. SDKs send a few hundred (the
# envelope's trace context and SDK info, an attachment's file name). A header line is
# read before the key is checked when the key is in it (``dsn``), and a 20 MiB one of
# nested arrays, 30 KB gzipped, took 2.3 s of the event loop and +0.8 GB to read, for
# a 401 (ingest review, thirty-first session).
MAX_HEADER_BYTES = 64 * 1024


def header_too_large(what: str) -> PayloadTooLarge:
    return PayloadTooLarge(f"{what} is over {MAX_HEADER_BYTES:,} bytes")


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    if len(raw) > MAX_HEADER_BYTES:
        raise header_too_large(what)
    try:
        # sentry-sdk copies a transaction's name into the envelope header (its trace
        # context) and an attachment's file name into its item header: a lone surrogate
        # there refused the whole envelope (ingest.surrogates).
        value, _ = surrogates.read_repaired(orjson.loads, raw, orjson.JSONDecodeError)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadRequest(f"{what} must be a JSON object")
    return value


_NEWLINES = re.compile(rb"\n+")


def _line(body: bytes, start: int) -> tuple[bytes, int]:
    """The line starting at ``start`` (without its newline) and where the next one starts."""
    end = body.find(b"\n", start)
    if end < 0:
        return body[start:], len(body)
    return body[start:end], end + 1


# Items one envelope may hold, as many as the rows it may make (items.MAX_ENVELOPE_ROWS):
# items that make no row (a session, an attachment, an empty log item) were not counted,
# and 20 MiB of '{"type":"x"}' items, 20 KB gzipped, held the event loop for 16 s and
# took 1.3 GB, for a 200 (DoS review, twenty-ninth session). SDKs send a handful.
MAX_ENVELOPE_ITEMS = 100_000


def too_many_items() -> PayloadTooLarge:
    """The 413 of an envelope past ``MAX_ENVELOPE_ITEMS`` (here, and as ``skim`` reads)."""
    return PayloadTooLarge(
        f"the envelope holds more than {MAX_ENVELOPE_ITEMS:,} items; send fewer per envelope"
    )


def parse(body: bytes) -> Envelope:
    if not body.strip():
        raise BadRequest("empty envelope: expected a JSON header line")
    first, pos = _line(body, 0)
    header = _json_object(first, "envelope header (line 1)")
    items: list[tuple[dict[str, Any], bytes]] = []
    size = len(body)
    while pos < size:
        # A run of blank lines at once: a flood of them cost a Python step each (20 MiB
        # of newlines took ~9 s of the event loop).
        run = _NEWLINES.match(body, pos)
        if run is not None:
            pos = run.end()
            continue
        raw_header, after = _line(body, pos)
        if not raw_header.strip():
            # Blank lines between items (or a trailing one) carry nothing.
            pos = after
            continue
        number = len(items) + 1
        if number > MAX_ENVELOPE_ITEMS:
            raise too_many_items()
        item_header = _json_object(raw_header, f"item {number} header")
        payload, pos = _payload(body, after, item_header, number)
        items.append((item_header, payload))
    return Envelope(header, items)


def _payload(body: bytes, start: int, header: dict[str, Any], number: int) -> tuple[bytes, int]:
    kind = header.get("type")
    name = f"item {number} ({kind})" if isinstance(kind, str) else f"item {number}"
    if not isinstance(kind, str) or not kind:
        raise BadRequest(f"{name} header has no type")
    length = header.get("length")
    if length is None:
        return _line(body, start)
    if not isinstance(length, int) or isinstance(length, bool) or length < 0:
        raise BadRequest(f"{name}: length must be a whole number of bytes, got {length!r}")
    end = start + length
    if end > len(body):
        raise BadRequest(
            f"{name} is truncated: its header says length {length}, "
            f"but only {len(body) - start} bytes follow"
        )
    if end < len(body) and body[end : end + 1] != b"\n":
        raise BadRequest(
            f"{name}: the payload of length {length} is not followed by a newline; "
            "is the length wrong?"
        )
    return body[start:end], end + 1


def container_items(payload: bytes, kind: str, *, exact: bool = False) -> list[Any]:
    """The ``items`` list of a ``{"items": [...]}`` item payload (log and span v2 items).

    ``exact`` reads with msgspec, which keeps an integer beyond 64 bits an integer
    (orjson makes it a float, and the stored attribute then said "integer" beside a
    float). Anything else is a 400 that names the item kind, so the whole envelope is
    refused before anything is spooled."""
    return items_of(decode_payload(payload, kind, exact=exact), kind)


def decode_payload(payload: bytes, kind: str, *, exact: bool = False) -> Any:
    """An item's JSON payload, or a 400 naming the item kind (``exact``: as above)."""
    try:
        return msgspec.json.decode(payload) if exact else orjson.loads(payload)
    except (orjson.JSONDecodeError, msgspec.DecodeError) as exc:
        raise BadRequest(f"{kind} item payload is not valid JSON: {exc}") from None
    except UnicodeDecodeError:
        # msgspec checks a string's UTF-8 as it decodes it: this was a 500.
        raise BadRequest(f"{kind} item payload is not valid UTF-8") from None
    except RecursionError:
        # msgspec's own limit on nesting (orjson's is a JSONDecodeError above).
        raise BadRequest(f"{kind} item payload is nested too deeply") from None


def items_of(container: Any, kind: str) -> list[Any]:
    items = container.get("items") if isinstance(container, dict) else None
    if not isinstance(items, list):
        raise BadRequest(f'{kind} item payload must be an object {{"items": [...]}}')
    return items
