"""``items.drop_too_old``: rows already past their retention when they arrive, by the
tables' TTL arithmetic (``toDateTime(<time>) + toIntervalDay(retention_days)``, which
truncates the time to the second), are removed before the spool."""

from __future__ import annotations

import datetime as dt

import orjson

from errortrack.ingest.items import ItemContext, ItemRows, dispatch, drop_too_old

ARRIVAL = dt.datetime(2026, 11, 1, 12, 0, 0, 500000, tzinfo=dt.UTC)  # .5 s past the second
DAY = 86400


def _ctx(retention: int) -> ItemContext:
    return ItemContext(7, ARRIVAL, retention, {})


def _expires_on_arrival(ts: float, retention: int) -> bool:
    """The TTL's own answer: expired once floor(ts) + retention is at or before arrival."""
    return int(ts) + retention * DAY <= ARRIVAL.timestamp()


def test_an_event_is_dropped_exactly_when_the_ttl_would_expire_it_on_arrival():
    arrival = ARRIVAL.timestamp()
    # Around the edge: 7 days before the arrival's whole second, and its neighbours.
    edge = int(arrival) - 7 * DAY
    for ts in (edge - 1.0, edge - 0.001, edge + 0.0, edge + 0.5, edge + 0.999, edge + 1.0):
        rows = ItemRows(events=[{"timestamp": ts}])
        assert drop_too_old(rows, _ctx(7)) is _expires_on_arrival(ts, 7), ts
        assert (rows.events == []) is _expires_on_arrival(ts, 7)


def test_spans_are_dropped_one_by_one_by_their_start():
    arrival = ARRIVAL.timestamp()
    spans = [{"start_timestamp": arrival - 8 * DAY}, {"start_timestamp": arrival - 6 * DAY}]
    rows = ItemRows(spans=list(spans))
    assert drop_too_old(rows, _ctx(7))
    assert rows.spans == spans[1:]
    assert not drop_too_old(ItemRows(spans=spans[1:]), _ctx(7))


def _log_item(*logs: dict) -> bytes:
    return orjson.dumps({"version": 2, "items": list(logs)})


def test_expired_logs_leave_the_item_and_the_others_keep_their_bytes():
    arrival = ARRIVAL.timestamp()
    # A bare "\r" between tokens of the attributes is kept as sent (no "\n" in the item).
    raw = (
        b'{"version":2,"items":['
        b'{"body":"old","timestamp":%d},'
        b'{"body":"new","timestamp":%d,"attributes":{"a":\r{"value":"x","type":"string"}}},'
        b'{"body":"older","timestamp":%d}]}'
    ) % (arrival - 10 * DAY, arrival - 60, arrival - 20 * DAY)
    rows = dispatch("log", raw, {"type": "log"}, _ctx(7))
    only_new = dispatch("log", raw.replace(b"old", b"new"), {"type": "log"}, _ctx(7))
    assert drop_too_old(rows, _ctx(7))
    assert rows.log_count == 1 and rows.count() == 1
    assert rows.log_lines == only_new.log_lines.split(b"\n")[1] + b"\n"
    assert orjson.loads(rows.log_lines)["body"] == "new"


def test_logs_within_their_retention_are_left_alone():
    arrival = ARRIVAL.timestamp()
    payload = _log_item({"body": "a", "timestamp": arrival - 6 * DAY}, {"body": "b"})
    rows = dispatch("log", payload, {"type": "log"}, _ctx(7))
    lines = rows.log_lines
    assert not drop_too_old(rows, _ctx(7))
    assert rows.log_lines is lines and rows.log_count == 2


def test_with_a_retention_over_the_clock_window_no_log_can_be_too_old():
    """Log times are at most 30 days old (older ones get the arrival time), so a longer
    retention drops nothing; the hot path then reads no log at all."""
    arrival = ARRIVAL.timestamp()
    payload = _log_item({"body": "a", "timestamp": arrival - 30 * DAY + 0.2})
    for retention in (31, 90):
        rows = dispatch("log", payload, {"type": "log"}, _ctx(retention))
        assert not drop_too_old(rows, _ctx(retention))
        assert rows.log_count == 1
    # 30 days, at the window's edge: the TTL would drop it on arrival.
    rows = dispatch("log", payload, {"type": "log"}, _ctx(30))
    assert drop_too_old(rows, _ctx(30)) and rows.log_count == 0


def test_items_without_rows_are_untouched():
    rows = ItemRows(dropped="attachment")
    assert not drop_too_old(rows, _ctx(1))
    assert rows.dropped == "attachment"
