"""Ingest as plain functions: an envelope (or a /store/ body) -> rows ready for the spool.

Nothing here sees a request: the resource reads the auth places and the body, loads the
key (off its event loop) and hands over the key's ``KeyInfo`` and the parsed envelope or
the body's bytes, then stores the ``Accepted`` rows with ``Ingest.store``. Order matters
for cost: the header auth is checked before the body is decompressed, and the whole
envelope is parsed and turned into rows before anything is spooled, so a malformed item
refuses the envelope without a half write.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import orjson
import sqlalchemy.exc
from sqlalchemy.orm import Session

from errortrack import timestamps
from errortrack.errors import BadRequest, PayloadTooLarge, Unavailable
from errortrack.ingest import auth, envelope, items, ratelimit, surrogates
from errortrack.ingest.ratelimit import CATEGORIES, RateLimiter
from errortrack.issues import events
from errortrack.spool.segments import Spool
from errortrack.state import one_line

log = logging.getLogger(__name__)

_NEWLINE = orjson.OPT_APPEND_NEWLINE
# Items whose envelope header event_id is the id a client expects back.
EVENT_TYPES = frozenset({"event", "transaction"})
KEY_ERROR_TRACEBACK_EVERY = 60.0


@dataclasses.dataclass
class Accepted:
    """An envelope turned into spool-ready rows; nothing is spooled yet."""

    response: dict[str, str]  # the body the client gets once the rows are durable
    tables: dict[str, bytes]  # table -> JSONEachRow lines
    rows: int
    project_id: int = 0
    # Items taken from the project's rate limit, by data category (ratelimit.CATEGORIES).
    charged: dict[str, int] = dataclasses.field(default_factory=dict)
    # Types without a handler, "<type>:rate_limited" for items the rate limit dropped, and
    # "<type>:too_old" for items that lost rows past their retention on arrival.
    dropped: list[str] = dataclasses.field(default_factory=list)
    # X-Sentry-Rate-Limits for a 200 whose envelope lost items to the rate limit, else "".
    rate_limits: str = ""


@dataclasses.dataclass
class Ingest:
    """What ingest needs, built once by the composition root."""

    spool: Spool
    keys: auth.KeyCache
    limiter: RateLimiter
    sessions: Callable[[], Session]
    clock: Callable[[], dt.datetime]
    default_retention_days: int
    max_event_bytes: int  # ERRORTRACK_MAX_EVENT_BYTES
    max_container_bytes: int  # ERRORTRACK_MAX_CONTAINER_BYTES
    # When a key load's failure was last logged with its traceback (monotonic seconds).
    _key_error_logged: float = dataclasses.field(default=-math.inf, init=False)

    def key_info(self, key: str) -> auth.KeyInfo | None:
        """The key's project and state, from the cache or (on a miss) the database."""
        return self.keys.lookup(key, self._load_key)

    def _load_key(self, key: str) -> auth.KeyInfo | None:
        try:
            with self.sessions() as session:
                return auth.load_key(session, key)
        except (sqlalchemy.exc.DBAPIError, sqlalchemy.exc.TimeoutError) as exc:
            # The relational store is down, or its pool busy (TimeoutError): the SDK
            # should come back, not log a 500 for every request whose key is not cached.
            # The traceback once a minute: one per refused request was 20 MB of log in a
            # 40 s outage.
            now = time.monotonic()
            detailed = now - self._key_error_logged >= KEY_ERROR_TRACEBACK_EVERY
            if detailed:
                self._key_error_logged = now
            log.warning("ingest: project keys cannot be read: %s", one_line(exc), exc_info=detailed)
            raise Unavailable("project keys cannot be read now", retry_after=5) from None

    async def store(self, accepted: Accepted) -> None:
        """Spools the rows (durable once this returns): only then is the envelope accepted."""
        if accepted.rows:
            try:
                await self.spool.append_async(accepted.tables, accepted.rows)
            except Unavailable:
                # Refused, so the SDK sends it again: it must not have paid for it.
                self.limiter.refund(accepted.project_id, accepted.charged)
                raise
        for kind in accepted.dropped:
            items.DROPPED.add(kind)

    def context(self, info: auth.KeyInfo, header: dict[str, Any]) -> items.ItemContext:
        retention = info.retention_days or self.default_retention_days
        now = self.clock()
        drift = timestamps.drift(header.get("sent_at"), now.timestamp())
        return items.ItemContext(info.project_id, now, retention, header, drift)


def accept_envelope(ingest: Ingest, info: auth.KeyInfo, parsed: envelope.Envelope) -> Accepted:
    """Rows and rate limit for an envelope of an authorized key: everything but the spool."""
    ctx = ingest.context(info, parsed.header)
    return _accept(ingest, ctx, [(h.get("type", ""), h, p) for h, p in parsed.items])


def envelope_key(parsed: envelope.Envelope) -> str:
    """The key in the envelope header's ``dsn``, for a request with none elsewhere."""
    return auth.key_from_dsn(parsed.header.get("dsn"))


def accept_store(ingest: Ingest, info: auth.KeyInfo, raw: bytes) -> Accepted:
    """``accept_envelope`` for a legacy ``/store/`` body (one JSON event)."""
    _check_size("body", raw, ingest.max_event_bytes)  # before it is read
    event, raw = surrogates.read_repaired(
        lambda data: events.parse(data, what="body"), raw, BadRequest
    )
    # The answer's id, held to an event's rule (what the event's own handler applies):
    # a transaction's was echoed as sent.
    header = {"event_id": events.event_id_of(event, {})} if event.get("event_id") else {}
    ctx = ingest.context(info, {})
    return _accept(ingest, ctx, [("event", {"type": "event"}, raw)], header)


def _accept(
    ingest: Ingest,
    ctx: items.ItemContext,
    parts: list[tuple[str, dict[str, Any], bytes]],
    header: dict[str, Any] | None = None,
) -> Accepted:
    header = ctx.envelope_header if header is None else header
    if header.get("event_id") and any(kind == "transaction" for kind, _, _ in parts):
        # A transaction's rows are spans, so the answer's id is the header's: held to the
        # rule an event's id is (a 400, before anything is charged) and answered as one
        # is, 32 lower-case hex. It was echoed as sent ("not-an-id <x>" came back).
        header = {**header, "event_id": events.event_id_of({}, header)}
    made: list[tuple[str, items.ItemRows, tuple[str, int] | None]] = []
    charges: dict[str, int] = {}
    dropped: list[str] = []
    containers: dict[str, int] = {}
    seen_event = False
    for number, (kind, _, payload) in enumerate(parts, 1):
        # As Relay: the envelope is refused (413), so nothing of it is stored; checked
        # before any item is read.
        if kind in _EVENT_KINDS:
            if seen_event:
                # The envelope format's rule (an event "may occur at most once per
                # Envelope", exclusive with a transaction); Relay refuses a second with
                # a 413. 100,000 one-line events in one envelope (~1 MB gzipped) took
                # ~2 s of the loop and ~9 s of grouping (a new issue each).
                raise BadRequest(
                    f"item {number} ({kind}): an envelope holds at most one event or "
                    "transaction item; send each in an envelope of its own"
                )
            seen_event = True
            _check_size(f"{kind} item", payload, ingest.max_event_bytes)
        elif kind in _CONTAINER_KINDS:
            containers[kind] = containers.get(kind, 0) + len(payload)
    for kind, size in containers.items():
        if size > ingest.max_container_bytes:
            raise PayloadTooLarge(
                f"the envelope's {kind} items are {size} bytes, more than the "
                f"{ingest.max_container_bytes} an envelope's {kind} items may be "
                "(ERRORTRACK_MAX_CONTAINER_BYTES); send fewer per envelope"
            )
    rows_left = items.MAX_ENVELOPE_ROWS
    for number, (kind, item_header, payload) in enumerate(parts, 1):
        try:
            item_ctx = dataclasses.replace(ctx, rows_left=rows_left)
            rows = _dispatch(kind, payload, item_header, item_ctx)
            items.check_rows(rows.count(), "an event", item_ctx)  # events: one per item
        except BadRequest as exc:
            if len(parts) > 1:
                # Named as the parser names framing errors ("item 2 (log) is truncated"):
                # which of an envelope's items was refused.
                exc.message = f"item {number} ({kind}): {exc.message}"
            raise
        rows_left -= rows.count()
        if items.drop_too_old(rows, ctx):
            # Expired on arrival: neither stored nor grouped, and not charged. An item
            # left with nothing goes like a rate-limited one: no event id in the answer.
            dropped.append(f"{kind}:too_old")
            if not rows.count():
                continue
        charge = _charge(kind, rows)
        if charge is not None:
            charges[charge[0]] = charges.get(charge[0], 0) + charge[1]
        made.append((kind, rows, charge))
    waits = ingest.limiter.take(ctx.project_id, charges)
    if waits:
        # As Relay: only the limited categories' items go; the rest is stored and the 200
        # names what was limited. Nothing left to store is a 429 (which counts nothing),
        # unless items were taken and dropped as too old: the envelope was processed, as
        # Relay would, so it is a 200 naming the limits and the drops are counted.
        kept = [m for m in made if m[2] is None or m[2][0] not in waits]
        if not any(charge is not None for _, _, charge in kept) and not dropped:
            raise ingest.limiter.refused(ctx.project_id, waits)
        dropped += [
            f"{kind}:rate_limited" for kind, _, charge in made if charge and charge[0] in waits
        ]
        made = kept
        charges = {c: n for c, n in charges.items() if c not in waits}
    tables: dict[str, list[dict[str, Any]]] = {"events": [], "spans": []}
    log_lines: list[bytes] = []
    event_id: str | None = None
    count = 0
    for kind, rows, _ in made:
        if rows.dropped is not None:
            dropped.append(rows.dropped)
        log_lines.append(rows.log_lines)
        tables["events"] += rows.events
        tables["spans"] += rows.spans
        count += rows.count()
        if event_id is None:
            event_id = rows.event_id or (header.get("event_id") if kind in EVENT_TYPES else None)
    encoded = {"logs": b"".join(log_lines)} if count else {}
    for name, rows_of in tables.items():
        if rows_of:
            # Appended one by one: a list of 130k small encodings held ~8 KB of RSS each
            # until the join (1 GB for 2 MiB of spans; review, twenty-eighth session).
            buffer = bytearray()
            for row in rows_of:
                buffer += orjson.dumps(row, option=_NEWLINE)
            encoded[name] = bytes(buffer)
    response = {"id": event_id} if isinstance(event_id, str) and event_id else {}
    limits = ratelimit.header(waits) if waits else ""
    return Accepted(response, encoded, count, ctx.project_id, charges, dropped, limits)


_EVENT_KINDS = frozenset({"event", "transaction"})
# Items holding many rows each (``{"items": [...]}``), capped together per kind, as
# Relay's max_container_size caps them.
_CONTAINER_KINDS = frozenset({"log", "span"})


def _check_size(what: str, payload: bytes, cap: int) -> None:
    if len(payload) > cap:
        raise PayloadTooLarge(
            f"{what} is {len(payload)} bytes, more than the {cap} an event may be "
            "(ERRORTRACK_MAX_EVENT_BYTES)"
        )


def _dispatch(
    kind: str, payload: bytes, item_header: dict[str, Any], ctx: items.ItemContext
) -> items.ItemRows:
    """The item's rows; an item refused for a lone UTF-16 surrogate escape is read again
    with U+FFFD in its place (``ingest.surrogates``), rather than lost with its batch."""
    rows, _ = surrogates.read_repaired(
        lambda data: items.dispatch(kind, data, item_header, ctx), payload, BadRequest
    )
    return rows


def _charge(kind: str, rows: items.ItemRows) -> tuple[str, int] | None:
    """What an item costs, in the one data category SDKs back off from for it: a log line,
    an error event and a streamed span are one item each; a transaction is one however
    many spans it holds, as Sentry counts it. Items without a handler (and items with no
    rows) are dropped anyway: nothing to charge. Each handler makes one kind of row."""
    if rows.log_count:
        return CATEGORIES["log"], rows.log_count
    if rows.events:
        return CATEGORIES["event"], len(rows.events)
    if rows.spans:
        # A transaction sent as a plain event (old SDKs, /store/) is a transaction too.
        if kind == "span":
            return CATEGORIES["span"], len(rows.spans)
        return CATEGORIES["transaction"], 1
    return None
