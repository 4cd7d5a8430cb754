"""Ingest as plain functions: an envelope (or a /store/ body) -> rows ready for the spool.

Nothing here sees a request: the resource reads the body and the auth places and hands
over bytes and strings, then appends the ``Accepted`` rows to the spool. Order matters
for cost: the header auth is checked before the body is decompressed, and the whole
envelope is parsed and turned into rows before anything is spooled, so a malformed item
refuses the envelope without a half write.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Any

import orjson
from sqlalchemy.orm import Session

from errortrack import timestamps
from errortrack.errors import BadRequest, Unauthorized
from errortrack.ingest import auth, envelope, items
from errortrack.ingest.ratelimit import RateLimiter
from errortrack.spool.segments import Spool

_NEWLINE = orjson.OPT_APPEND_NEWLINE
# Items whose envelope header event_id is the id a client expects back.
EVENT_TYPES = frozenset({"event", "transaction"})


@dataclasses.dataclass
class Accepted:
    """An envelope turned into spool-ready rows; nothing is spooled yet."""

    response: dict[str, str]  # the body the client gets once the rows are durable
    tables: dict[str, bytes]  # table -> JSONEachRow lines
    rows: int


@dataclasses.dataclass
class Ingest:
    """What ingest needs, built once by the composition root."""

    spool: Spool
    keys: auth.KeyCache
    limiter: RateLimiter
    sessions: Callable[[], Session]
    clock: Callable[[], dt.datetime]
    default_retention_days: int

    def authorize(self, project_id: int, key: str) -> auth.KeyInfo:
        return auth.authorize(self.key_info(key), project_id)

    def key_info(self, key: str) -> auth.KeyInfo | None:
        """The key's project and state, from the cache or (on a miss) the database."""
        return self.keys.lookup(key, self._load_key)

    def _load_key(self, key: str) -> auth.KeyInfo | None:
        with self.sessions() as session:
            return auth.load_key(session, key)

    def context(self, info: auth.KeyInfo, header: dict[str, Any]) -> items.ItemContext:
        retention = info.retention_days or self.default_retention_days
        now = self.clock()
        drift = timestamps.drift(header.get("sent_at"), now.timestamp())
        return items.ItemContext(info.project_id, now, retention, header, drift)


def accept_envelope(
    ingest: Ingest, project_id: int, header_key: str | None, body: Callable[[], bytes]
) -> Accepted:
    """Auth, parse, build rows, rate-limit: everything but the spool append."""
    if header_key is not None:
        info = ingest.authorize(project_id, header_key)
        parsed = envelope.parse(body())
    else:
        parsed = envelope.parse(body())
        info = ingest.authorize(project_id, auth.key_from_dsn(parsed.header.get("dsn")))
    ctx = ingest.context(info, parsed.header)
    return _accept(ingest, ctx, [(h.get("type", ""), h, p) for h, p in parsed.items])


def accept_store(
    ingest: Ingest, project_id: int, key: str | None, body: Callable[[], bytes]
) -> Accepted:
    """``accept_envelope`` for a legacy ``/store/`` body (one JSON event)."""
    if key is None:
        raise Unauthorized("no sentry_key: send X-Sentry-Auth or ?sentry_key=")
    info = ingest.authorize(project_id, key)
    raw = body()
    try:
        event = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from None
    if not isinstance(event, dict):
        raise BadRequest("body must be a JSON object (one event)")
    header = {"event_id": event["event_id"]} if isinstance(event.get("event_id"), str) else {}
    ctx = ingest.context(info, {})
    return _accept(ingest, ctx, [("event", {"type": "event"}, raw)], header)


def _accept(
    ingest: Ingest,
    ctx: items.ItemContext,
    parts: list[tuple[str, dict[str, Any], bytes]],
    header: dict[str, Any] | None = None,
) -> Accepted:
    header = ctx.envelope_header if header is None else header
    tables: dict[str, list[dict[str, Any]]] = {"events": [], "spans": []}
    log_lines: list[bytes] = []
    event_id: str | None = None
    accepted = count = 0
    for kind, item_header, payload in parts:
        rows = items.dispatch(kind, payload, item_header, ctx)
        log_lines.append(rows.log_lines)
        tables["events"] += rows.events
        tables["spans"] += rows.spans
        count += rows.count()
        accepted += max(1, rows.count())
        if event_id is None:
            event_id = rows.event_id or (header.get("event_id") if kind in EVENT_TYPES else None)
    ingest.limiter.take(ctx.project_id, accepted)
    encoded = {"logs": b"".join(log_lines)} if count else {}
    for name, rows_of in tables.items():
        if rows_of:
            encoded[name] = b"".join([orjson.dumps(r, option=_NEWLINE) for r in rows_of])
    response = {"id": event_id} if isinstance(event_id, str) and event_id else {}
    return Accepted(response, encoded, count)
