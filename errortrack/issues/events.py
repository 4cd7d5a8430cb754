"""``event`` items (and ``/store/`` bodies) -> rows of the ``events`` table.

The row carries the fingerprint, title and culprit computed here, at ingest, where the
event is parsed anyway; ``issue_id`` stays 0 until the writer's grouping hook
(``errortrack.issues.grouping``) resolves the fingerprint to an issue for the whole batch.
"""

from __future__ import annotations

import re
import uuid
from typing import TYPE_CHECKING, Any

import msgspec
import orjson

from errortrack import timestamps
from errortrack.errors import BadRequest
from errortrack.issues import summary
from errortrack.issues.fingerprint import fingerprint
from errortrack.traces.rows import hex_id, span_hex

if TYPE_CHECKING:
    from errortrack.ingest.items import ItemContext, ItemRows

_EVENT_ID = re.compile(r"[0-9a-fA-F]{8}-?(?:[0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}")
# The fields naming an event's user, in the order Sentry picks one for its user tag
# (``sentry:user``), each with the prefix Sentry gives it there.
_USER_FIELDS = (
    ("id", "id:"),
    ("username", "username:"),
    ("email", "email:"),
    ("ip_address", "ip:"),
)
# What an SDK sends for "the address this request came from" (send_default_pii); Relay
# replaces it with the client's address, which ingest does not know here.
_AUTO_IP = "ip:{{auto}}"


def handle_event(payload: bytes, headers: dict[str, Any], ctx: ItemContext) -> ItemRows:
    from errortrack.ingest.items import ItemRows
    from errortrack.traces import transactions

    event = modern(parse(payload))
    if event.get("type") == "transaction":
        # Old SDKs (and /store/) send transactions as plain events. Read again as the
        # transaction item is, so that integers beyond 64 bits keep their digits (orjson
        # made them doubles); only this legacy form pays for the second read.
        return ItemRows(spans=transactions.rows(transactions.decode(payload), ctx))
    event_id = event_id_of(event, ctx.envelope_header)
    row = event_row(event, payload, event_id, ctx)
    return ItemRows(events=[row], event_id=event_id)


# The pre-2018 protocol's names, which raven clients (raven-python, raven-js 1.x, old PHP
# and Ruby clients) send, and Relay reads as the modern ones (relay-event-schema,
# protocol/event.rs, ``legacy_alias``). Until the twenty-third session they were ignored:
# every such error was one "<unlabeled event>" issue.
_LEGACY_NAMES = {
    "sentry.interfaces.Exception": "exception",
    "sentry.interfaces.Message": "logentry",
    "sentry.interfaces.Stacktrace": "stacktrace",
    "sentry.interfaces.Template": "template",
    "sentry.interfaces.User": "user",
    "sentry.interfaces.Http": "request",
    "sentry.interfaces.Contexts": "contexts",
    "sentry.interfaces.Breadcrumbs": "breadcrumbs",
}
_LEGACY_PREFIX = "sentry.interfaces."


def modern(event: dict[str, Any]) -> dict[str, Any]:
    """The event with legacy interface names read as the modern ones (a modern name sent
    too wins, as in Relay), for the fields ingest derives; the payload is stored as sent."""
    if not any(key.startswith(_LEGACY_PREFIX) for key in event):
        return event
    out = dict(event)
    for old, new in _LEGACY_NAMES.items():
        if old in out:
            value = out.pop(old)
            out.setdefault(new, value)
    return out


def parse(payload: bytes, *, what: str = "event payload") -> dict[str, Any]:
    """The event as a dict; ``what`` names the payload in a 400 (a /store/ body)."""
    try:
        event = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        event = _exact(payload, exc, what)
    if not isinstance(event, dict):
        raise BadRequest(f"{what} must be a JSON object")
    return event


def _exact(payload: bytes, refusal: orjson.JSONDecodeError, what: str) -> Any:
    """The payload read by msgspec, which takes what orjson refuses in valid JSON: an
    integer beyond a double (an SDK's ``extra={"n": 10**400}``), which made the whole
    event a 400. The row stores the payload as sent; grouping and the title read the
    parsed value. Invalid JSON stays a 400, with orjson's account of it."""
    try:
        return msgspec.json.decode(payload)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise BadRequest(f"{what} is not valid JSON: {refusal}") from None


def event_id_of(event: dict[str, Any], envelope_header: dict[str, Any]) -> str:
    """The SDK's id as 32 hex characters, or a new one when none was sent."""
    raw = event.get("event_id") or envelope_header.get("event_id")
    if raw is None:
        return uuid.uuid4().hex
    # fullmatch: "$" also matched before a final newline, and uuid.UUID then refused
    # the id (a 500 until the seventeenth session).
    if not isinstance(raw, str) or not _EVENT_ID.fullmatch(raw):
        raise BadRequest("event_id must be 32 hexadecimal characters")
    return raw.replace("-", "").lower()


def _text(event: dict[str, Any], key: str, default: str = "") -> str:
    value = event.get(key)
    return value if isinstance(value, str) else default


def _trace(event: dict[str, Any]) -> tuple[str, str]:
    contexts = event.get("contexts")
    trace = contexts.get("trace") if isinstance(contexts, dict) else None
    if not isinstance(trace, dict):
        return "", ""
    return hex_id(trace, "trace_id"), span_hex(trace, "span_id")


def user_key(event: dict[str, Any]) -> str:
    """Who the event happened to, for the issue's count of users: the first of the
    user's ``id``, ``username``, ``email`` and ``ip_address`` that holds a value, with
    its prefix (``id:5``, ``username:bob``, ``email:a@b.c``, ``ip:1.2.3.4``), so that id 5
    and username "5" differ; '' when there is none. A value is a non-empty string or a
    number (as text: 5 and 5.0 are "5", as Relay writes them); anything else is skipped."""
    user = event.get("user")
    if not user or not isinstance(user, dict):
        return ""  # most events: no user at all
    for field, prefix in _USER_FIELDS:
        value = user.get(field)
        if type(value) is str:
            if not value:
                continue
            text = value
        elif type(value) is int:  # not bool, a subclass of int
            text = str(value)
        elif type(value) is float:
            text = str(int(value)) if value.is_integer() else repr(value)
        else:
            continue  # absent, null, or not a value (an object, a list, a boolean)
        key = prefix + text
        return "" if key == _AUTO_IP else key
    return ""


def event_row(
    event: dict[str, Any], payload: bytes, event_id: str, ctx: ItemContext
) -> dict[str, Any]:
    received = ctx.received_at.timestamp()
    trace_id, span_id = _trace(event)
    return {
        "project_id": ctx.project_id,
        "issue_id": 0,
        "timestamp": timestamps.clamped(event.get("timestamp"), received, ctx.drift),
        "event_id": str(uuid.UUID(event_id)),
        "received_at": received,
        "level": summary.level(event),
        "platform": _text(event, "platform", "other"),
        "release": _text(event, "release"),
        "environment": _text(event, "environment"),
        "title": summary.title(event),
        "culprit": summary.culprit(event),
        "fingerprint": fingerprint(event),
        "trace_id": trace_id,
        "span_id": span_id,
        "user_key": user_key(event),
        "retention_days": ctx.retention_days,
        # Last, after scalars only: the writer's grouping hook needs the fields before it,
        # so it splits each spooled line at ``,"payload":`` and carries the payload on as
        # raw bytes rather than parse and re-serialise ~8 KB (spool.writer.decode_row).
        "payload": raw_payload(payload),
    }


def raw_payload(payload: bytes) -> str | orjson.Fragment:
    """The event as sent, for the payload column, exact for the detail view.

    A JSON object on one line goes into the row as it is (``orjson.Fragment``): the
    insert reads an object into a String column as its raw text
    (``input_format_json_read_objects_as_strings``), so it is neither escaped here nor
    unescaped there. Anything else (a body with newlines, which would split the spool's
    JSONEachRow line) is sent as a JSON string; both store the same bytes."""
    if (
        payload[:1] == b"{"
        and payload[-1:] == b"}"
        and b"\n" not in payload
        and b"\r" not in payload
    ):
        return orjson.Fragment(payload)
    return payload.decode()
