"""Real SDK envelopes (shared fixtures) through the event, transaction and span handlers."""

import datetime as dt
from pathlib import Path

import msgspec
import orjson
import pytest

from errortrack.errors import BadRequest
from errortrack.ingest.envelope import parse
from errortrack.ingest.items import ItemContext
from errortrack.issues import summary
from errortrack.issues.events import handle_event
from errortrack.issues.fingerprint import fingerprint, hash_parts
from errortrack.traces.spans_v2 import handle_span
from errortrack.traces.transactions import handle_transaction

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sdk-envelopes"
RECEIVED = dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.UTC)
HANDLERS = {"event": handle_event, "transaction": handle_transaction, "span": handle_span}


def ctx(header=None):
    return ItemContext(
        project_id=42, received_at=RECEIVED, retention_days=30, envelope_header=header or {}
    )


def handle(name, kind):
    envelope = parse((FIXTURES / name).read_bytes())
    [(headers, payload)] = [(h, p) for h, p in envelope.items if h["type"] == kind]
    return HANDLERS[kind](payload, headers, ctx(envelope.header)), payload


def test_python_exception_event_row():
    result, payload = handle("python/0006_c_exception_message.envelope", "event")
    [row] = result.events
    assert result.event_id == "aacf9e42aa114d73accfed70a6848b69"
    assert row["event_id"] == "aacf9e42-aa11-4d73-accf-ed70a6848b69"
    assert row["issue_id"] == 0  # assigned by the writer's grouping hook
    assert row["title"] == "ZeroDivisionError: division by zero"
    assert row["culprit"] == "__main__ in inner_fail"
    assert (row["level"], row["platform"]) == ("error", "python")
    assert (row["release"], row["environment"]) == ("demoapp-py@1.0.0", "capture-test")
    assert row["timestamp"] == dt.datetime(2026, 11, 22, 2, 8, 3, 921902, tzinfo=dt.UTC).timestamp()
    assert row["received_at"] == RECEIVED.timestamp()
    assert (row["trace_id"], row["span_id"]) == (
        "d9b6755dc82d4250a77124de0f359a8d",
        "b7dc2840630866b1",
    )
    # The payload travels as the raw bytes sent (a JSON fragment), and is the last key.
    assert orjson.dumps(row["payload"]) == payload
    assert list(row)[-1] == "payload"
    assert row["fingerprint"] == fingerprint(orjson.loads(payload))
    assert (row["project_id"], row["retention_days"]) == (42, 30)


def test_python_message_with_custom_fingerprint_and_default():
    result, _ = handle("python/0007_c_exception_message.envelope", "event")
    [row] = result.events
    assert row["title"] == "py capture_message hello"
    assert row["level"] == "warning"
    expected = hash_parts(["custom", "custom-fp", "message", "py capture_message hello"])
    assert row["fingerprint"] == expected


def test_python_logging_event_groups_by_logentry_template():
    result, _ = handle("python/0013_f_stdlib_logging.envelope", "event")
    [row] = result.events
    assert row["title"] == "F stdlib critical dict-arg"  # formatted for people
    assert row["fingerprint"] == hash_parts(["message", "F stdlib critical %(who)s"])
    assert row["level"] == "fatal"


def test_node_exception_event_row_with_float_timestamp():
    result, _ = handle("node/0031_c_exception_message.envelope", "event")
    [row] = result.events
    assert row["title"] == "TypeError: node boom: x must not be zero"
    assert row["culprit"] == "innerFail(node_client)"
    assert row["timestamp"] == 1795313374.182
    assert row["platform"] == "node"


def test_node_capture_message_typeless_exception_groups_by_message():
    result, _ = handle("node/0032_c_exception_message.envelope", "event")
    [row] = result.events
    assert row["title"] == "node capture_message hello"
    expected = hash_parts(["custom", "custom-fp", "message", "node capture_message hello"])
    assert row["fingerprint"] == expected


def test_node_unhandled_exception_is_fatal():
    result, _ = handle("node/0035_c_unhandled_exception.envelope", "event")
    assert result.events[0]["level"] == "fatal"
    assert result.events[0]["culprit"] == "Timeout._onTimeout(node_client)"


def _raised_in(frame: dict, platform: str | None) -> dict:
    event = {"exception": {"values": [{"type": "E", "stacktrace": {"frames": [frame]}}]}}
    return {**event, "platform": platform} if platform else event


@pytest.mark.parametrize(
    ("platform", "frame", "expected"),
    [
        # Sentry's Frame.get_culprit_string: JavaScript is call-shaped ...
        ("javascript", {"filename": "/app.js", "function": "go"}, "go(/app.js)"),
        ("node", {"module": "server", "function": None}, "?(server)"),
        # ... native code is named by its function ...
        ("native", {"package": "/usr/lib/x.so", "function": "crash"}, "crash"),
        ("cocoa", {"module": "M", "function": "-[V tap:]"}, "-[V tap:]"),
        # ... and the frame's own platform wins over the event's.
        ("python", {"platform": "javascript", "filename": "a.js", "function": "f"}, "f(a.js)"),
        ("python", {"module": "app.views", "function": "index"}, "app.views in index"),
        (None, {"module": "m", "function": "f", "platform": ["odd"]}, "m in f"),
    ],
)
def test_culprit_is_spelled_as_sentry_spells_the_platform(platform, frame, expected):
    assert summary.culprit(_raised_in(frame, platform)) == expected


def _by_id(rows):
    return {r["span_id"]: r for r in rows}


@pytest.mark.parametrize(
    ("name", "kind", "root", "status"),
    [
        ("python/0009_d_transaction_2_spans.envelope", "transaction", "bd141c5409342695", ""),
        ("node/0036_d_transaction_2_spans.envelope", "span", "88fe8244e1579c18", "ok"),
        (
            "node/0048_d_transaction_2_spans_static.envelope",
            "transaction",
            "bbf5ac8a4cfc95e6",
            "ok",
        ),
    ],
)
def test_transaction_with_two_child_spans_gives_three_linked_rows(name, kind, root, status):
    result, _ = handle(name, kind)
    rows = _by_id(result.spans)
    assert len(rows) == 3 and not result.events and result.event_id is None
    assert rows[root]["is_segment"] is True and rows[root]["parent_span_id"] == ""
    children = [r for sid, r in rows.items() if sid != root]
    assert all(r["parent_span_id"] == root and r["is_segment"] is False for r in children)
    assert {r["op"] for r in children} == {"db.query", "http.client"}
    assert {r["description"] for r in children} == {
        "SELECT * FROM carts",
        "POST https://pay.example/charge",
    }
    assert rows[root]["op"] == "http.server"
    assert len({r["trace_id"] for r in rows.values()}) == 1
    for r in rows.values():
        assert r["segment_id"] == root
        assert r["segment_name"].startswith("GET /") and r["segment_name"].endswith("/checkout")
        assert r["status"] == status
        assert 0 < r["duration_us"] < 1_000_000
        assert rows[root]["start_timestamp"] <= r["start_timestamp"]


def test_python_span_data_and_tags_become_typed_attributes():
    result, _ = handle("python/0009_d_transaction_2_spans.envelope", "transaction")
    rows = _by_id(result.spans)
    payment = rows["a1ef1433b618a265"]
    assert payment["attr_string"]["payment"] == "card"
    assert payment["attr_string"]["sentry.release"] == "demoapp-py@1.0.0"
    assert orjson.loads(payment["attributes"])["thread.name"] == {
        "value": "MainThread",
        "type": "string",
    }
    assert rows["803a75504668188b"]["attr_string"]["db.system"] == "postgresql"
    assert rows["bd141c5409342695"]["duration_us"] == 56104


def test_node_span_v2_attributes_are_stored_exactly_and_typed():
    result, payload = handle("node/0036_d_transaction_2_spans.envelope", "span")
    sent = {s["span_id"]: s for s in orjson.loads(payload)["items"]}
    for row in result.spans:
        assert orjson.loads(row["attributes"]) == sent[row["span_id"]]["attributes"]
    root = _by_id(result.spans)["88fe8244e1579c18"]
    assert root["attr_int"]["sentry.sample_rate"] == 1
    child = _by_id(result.spans)["a27023c3a5fa71d7"]
    assert child["attr_bool"]["sentry.is_localhost"] is False
    assert child["attr_string"]["db.system"] == "postgresql"
    assert root["attr_string"]["sentry.op"] == "http.server"


def test_store_body_is_an_event_item():
    body = orjson.dumps({"message": "legacy store 7", "timestamp": 1795313374.5, "level": "info"})
    result = handle_event(body, {"type": "event"}, ctx())
    assert result.events[0]["title"] == "legacy store 7"
    assert len(result.event_id) == 32  # none sent: the server assigns one


def test_implausible_timestamp_gets_the_arrival_time():
    future = RECEIVED.timestamp() + 86400
    result = handle_event(orjson.dumps({"message": "m", "timestamp": future}), {}, ctx())
    assert result.events[0]["timestamp"] == RECEIVED.timestamp()


@pytest.mark.parametrize(
    ("handler", "payload", "message"),
    [
        (handle_event, b"{nope", "not valid JSON"),
        (handle_event, b"[1, 2]", "JSON object"),
        (handle_event, b'{"event_id": "xyz"}', "event_id"),
        (handle_transaction, b'{"transaction": "t"}', "contexts.trace"),
        (
            handle_transaction,
            b'{"contexts": {"trace": {"trace_id": "a", "span_id": "b"}}, "spans": [{"op": "x"}]}',
            "span_id",
        ),
        (handle_span, b'{"version": 2}', "items"),
        (handle_span, b'{"version": 2, "items": [{"trace_id": "a"}]}', "span 0"),
    ],
)
def test_malformed_payloads_are_refused_with_a_clear_error(handler, payload, message):
    with pytest.raises(BadRequest, match=message):
        handler(payload, {}, ctx())


def _v2_span(span_id, start, end, *, parent="", segment=False):
    return {
        "trace_id": "ab" * 16,
        "span_id": span_id,
        "parent_span_id": parent,
        "name": span_id,
        "start_timestamp": start,
        "end_timestamp": end,
        "is_segment": segment,
    }


@pytest.mark.parametrize("bad_start", [RECEIVED.timestamp() - 40 * 86400, 0, 1, "nan", 1e20])
def test_one_span_with_a_bad_clock_moves_no_other_span(bad_start):
    # The item's shift was taken from its earliest start: one span 40 days old (or at 0)
    # dated the root and its good children 40 days (or 56 years) ahead.
    now = RECEIVED.timestamp() - 2
    spans = [
        _v2_span("1" * 16, now, now + 1, segment=True),
        _v2_span("2" * 16, now + 0.1, now + 0.5, parent="1" * 16),
        _v2_span("3" * 16, bad_start, now + 0.7, parent="1" * 16),
    ]
    payload = orjson.dumps({"version": 2, "items": spans})
    rows = _by_id(handle_span(payload, {"type": "span"}, ctx()).spans)
    assert rows["1" * 16]["start_timestamp"] == now
    assert rows["1" * 16]["duration_us"] == 1_000_000
    assert rows["2" * 16]["start_timestamp"] == now + 0.1
    # The bad one starts with its segment; its end is kept when it is plausible.
    assert rows["3" * 16]["start_timestamp"] == now
    assert rows["3" * 16]["duration_us"] == 700_000


def test_a_transaction_child_with_a_bad_clock_starts_with_its_root():
    now = RECEIVED.timestamp() - 2
    year = 365 * 86400.0
    event = {
        "type": "transaction",
        "transaction": "GET /",
        "start_timestamp": now,
        "timestamp": now + 1,
        "contexts": {"trace": {"trace_id": "ab" * 16, "span_id": "1" * 16}},
        "spans": [
            {"span_id": "2" * 16, "start_timestamp": now + 0.2, "timestamp": now + 0.4},
            {"span_id": "3" * 16, "start_timestamp": now + year, "timestamp": now + year + 1},
            {"span_id": "4" * 16, "start_timestamp": 1, "timestamp": 2},
            {"span_id": "5" * 16, "start_timestamp": now + 0.5, "timestamp": now - 1},
        ],
    }
    rows = _by_id(handle_transaction(orjson.dumps(event), {}, ctx()).spans)
    assert [rows[c * 16]["start_timestamp"] for c in "12345"] == [
        now,
        now + 0.2,
        now,
        now,
        now + 0.5,
    ]
    assert [rows[c * 16]["duration_us"] for c in "12345"] == [1_000_000, 200_000, 0, 0, 0]


def test_a_whole_item_from_a_wrong_clock_moves_together_to_end_at_the_arrival():
    # A 3-minute job from a clock two years behind: moving its start to the arrival put
    # every later span more than 60 s ahead, and all of them collapsed to no duration.
    old = RECEIVED.timestamp() - 2 * 365 * 86400
    arrival = RECEIVED.timestamp()
    spans = [
        _v2_span("1" * 16, old, old + 180, segment=True),
        _v2_span("2" * 16, old + 100, old + 170, parent="1" * 16),
    ]
    payload = orjson.dumps({"version": 2, "items": spans})
    rows = _by_id(handle_span(payload, {"type": "span"}, ctx()).spans)
    assert rows["1" * 16]["start_timestamp"] == arrival - 180
    assert rows["1" * 16]["duration_us"] == 180_000_000
    assert rows["2" * 16]["start_timestamp"] == arrival - 80
    assert rows["2" * 16]["duration_us"] == 70_000_000
    event = {
        "type": "transaction",
        "start_timestamp": old,
        "timestamp": old + 180,
        "contexts": {"trace": {"trace_id": "ab" * 16, "span_id": "1" * 16}},
        "spans": [{"span_id": "2" * 16, "start_timestamp": old + 100, "timestamp": old + 170}],
    }
    rows = _by_id(handle_transaction(orjson.dumps(event), {}, ctx()).spans)
    assert (rows["1" * 16]["start_timestamp"], rows["1" * 16]["duration_us"]) == (
        arrival - 180,
        180_000_000,
    )
    assert (rows["2" * 16]["start_timestamp"], rows["2" * 16]["duration_us"]) == (
        arrival - 80,
        70_000_000,
    )


@pytest.mark.parametrize("fast", [120.0, 300.0, 3000.0])
def test_a_long_job_from_a_clock_minutes_fast_keeps_its_durations(fast):
    # Only its start was judged: a 10-minute job from a clock 5 minutes fast started in
    # the window, so nothing moved, and its end and its late spans (past the window's
    # 60 s ahead) collapsed onto their starts with no duration. Spans end before the
    # envelope is sent, so the whole item moves to end at the arrival.
    arrival = RECEIVED.timestamp()
    start, end = arrival + fast - 600, arrival + fast
    event = {
        "type": "transaction",
        "transaction": "cron",
        "start_timestamp": start,
        "timestamp": end,
        "contexts": {"trace": {"trace_id": "ab" * 16, "span_id": "1" * 16}},
        "spans": [
            {"span_id": "2" * 16, "start_timestamp": start + 60, "timestamp": start + 120},
            {"span_id": "3" * 16, "start_timestamp": end - 120, "timestamp": end - 1},
        ],
    }
    rows = _by_id(handle_transaction(orjson.dumps(event), {}, ctx()).spans)
    placed = {c: (rows[c * 16]["start_timestamp"], rows[c * 16]["duration_us"]) for c in "123"}
    assert placed == {
        "1": (arrival - 600, 600_000_000),
        "2": (arrival - 540, 60_000_000),
        "3": (arrival - 120, 119_000_000),
    }
    spans = [
        _v2_span("1" * 16, start, end, segment=True),
        _v2_span("3" * 16, end - 120, end - 1, parent="1" * 16),
    ]
    rows = _by_id(handle_span(orjson.dumps({"version": 2, "items": spans}), {}, ctx()).spans)
    assert (rows["1" * 16]["start_timestamp"], rows["1" * 16]["duration_us"]) == (
        arrival - 600,
        600_000_000,
    )
    assert (rows["3" * 16]["start_timestamp"], rows["3" * 16]["duration_us"]) == (
        arrival - 120,
        119_000_000,
    )


def test_a_job_ending_within_a_minute_ahead_is_not_moved():
    # Sentry's window allows 60 s ahead: a clock a few seconds fast is taken as it is.
    arrival = RECEIVED.timestamp()
    event = {
        "type": "transaction",
        "start_timestamp": arrival - 590,
        "timestamp": arrival + 10,
        "contexts": {"trace": {"trace_id": "ab" * 16, "span_id": "1" * 16}},
    }
    [row] = handle_transaction(orjson.dumps(event), {}, ctx()).spans
    assert (row["start_timestamp"], row["duration_us"]) == (arrival - 590, 600_000_000)


def test_one_child_ending_hours_ahead_moves_no_span_of_a_sane_transaction():
    # The item's end is judged by its segment's: a child's garbage end 3 hours after its
    # start only loses that child its duration, as before.
    now = RECEIVED.timestamp() - 2
    event = {
        "type": "transaction",
        "start_timestamp": now,
        "timestamp": now + 1,
        "contexts": {"trace": {"trace_id": "ab" * 16, "span_id": "1" * 16}},
        "spans": [
            {"span_id": "2" * 16, "start_timestamp": now + 0.2, "timestamp": now + 0.4},
            {"span_id": "3" * 16, "start_timestamp": now + 0.5, "timestamp": now + 3 * 3600},
        ],
    }
    rows = _by_id(handle_transaction(orjson.dumps(event), {}, ctx()).spans)
    placed = {c: (rows[c * 16]["start_timestamp"], rows[c * 16]["duration_us"]) for c in "123"}
    assert placed == {"1": (now, 1_000_000), "2": (now + 0.2, 200_000), "3": (now + 0.5, 0)}


def test_one_span_ending_an_hour_ahead_moves_no_sibling_of_an_item_without_segment():
    # Without a segment the item was judged by its latest end: one span's garbage end
    # moved its sane sibling an hour back. Most ends must be ahead for a wrong clock.
    from errortrack.traces.rows import place_item

    now = RECEIVED.timestamp()
    placed = place_item([(now - 10, now - 5), (now - 3, now + 3600)], None, now, 0.0)
    assert placed == [(now - 10, now - 5), (now - 3, now - 3)]


def test_a_lone_span_from_a_clock_minutes_fast_ends_at_the_arrival():
    from errortrack.traces.rows import place_item

    now = RECEIVED.timestamp()
    assert place_item([(now + 290, now + 300)], None, now, 0.0) == [(now - 10, now)]


def test_a_segment_s_garbage_end_does_not_move_a_late_sent_transaction():
    # A transaction sent two hours late (an offline cache) whose root ends days after it
    # started: that end says nothing of the clock; the children's ends, all in the past,
    # do, and nothing moves.
    from errortrack.traces.rows import place_item

    now = RECEIVED.timestamp()
    start = now - 7200
    times = [(start, start + 3 * 86400), (start + 1, start + 2), (start + 3, start + 4)]
    placed = place_item(times, 0, now, 0.0)
    assert placed[1:] == [(start + 1, start + 2), (start + 3, start + 4)]
    assert placed[0] == (start, start)  # its end is outside the window: duration 0


@pytest.mark.parametrize("where", ["event", "envelope"])
def test_an_event_id_with_a_trailing_newline_is_400(where):
    # "$" matched before the newline and uuid.UUID then refused the id: a 500.
    event_id = "b" * 32 + "\n"
    event = {"message": "m", **({"event_id": event_id} if where == "event" else {})}
    header = {"event_id": event_id} if where == "envelope" else {}
    with pytest.raises(BadRequest, match="event_id must be 32 hexadecimal characters"):
        handle_event(orjson.dumps(event), {}, ctx(header))


def test_trace_and_span_ids_are_stored_lower_case_without_dashes():
    # The API's trace filter and trace view compare lower-case hex: an upper-case or
    # dashed id stored as sent was listed but its trace never found.
    trace = "9025BFBF-D9A3-477B-968F-CA308B9A2566"
    expected = "9025bfbfd9a3477b968fca308b9a2566"
    now = RECEIVED.timestamp() - 1
    event = {"message": "m", "contexts": {"trace": {"trace_id": trace, "span_id": "ABCD" * 4}}}
    [row] = handle_event(orjson.dumps(event), {}, ctx()).events
    assert (row["trace_id"], row["span_id"]) == (expected, "abcd" * 4)
    transaction = {
        "type": "transaction",
        "start_timestamp": now,
        "timestamp": now + 1,
        "contexts": {"trace": {"trace_id": trace, "span_id": "ABCD" * 4}},
        "spans": [{"span_id": "EF01" * 4, "parent_span_id": "ABCD" * 4, "start_timestamp": now}],
    }
    spans = handle_transaction(orjson.dumps(transaction), {}, ctx()).spans
    assert {(r["trace_id"], r["span_id"], r["parent_span_id"], r["segment_id"]) for r in spans} == {
        (expected, "abcd" * 4, "", "abcd" * 4),
        (expected, "ef01" * 4, "abcd" * 4, "abcd" * 4),
    }
    v2 = [_v2_span("ABCD" * 4, now, now + 1, segment=True) | {"trace_id": trace}]
    [span] = handle_span(orjson.dumps({"version": 2, "items": v2}), {}, ctx()).spans
    assert (span["trace_id"], span["span_id"], span["segment_id"]) == (
        expected,
        "abcd" * 4,
        "abcd" * 4,
    )


def test_span_v2_attributes_keep_integers_beyond_64_bits():
    # Read with orjson they became floats, stored beside "type": "integer".
    now = RECEIVED.timestamp() - 1
    span = _v2_span("1" * 16, now, now + 1, segment=True)
    payload = orjson.dumps({"version": 2, "items": [span]}).replace(
        b'"is_segment":true',
        b'"is_segment":true,"attributes":{"g":{"value":1180591620717411303424,"type":"integer"},'
        b'"n":{"value":7,"type":"integer"}}',
    )
    [row] = handle_span(payload, {"type": "span"}, ctx()).spans
    assert row["attributes"] == (
        '{"g":{"value":1180591620717411303424,"type":"integer"},"n":{"value":7,"type":"integer"}}'
    )
    assert row["attr_int"] == {"n": 7}  # beyond Int64: kept as sent, not filterable as one


def test_one_garbage_end_does_not_drag_a_wrong_clock_item_into_the_past():
    # The item's end was the latest of its times: one span ending 20 days after its
    # start moved every span 20 days back (past a 7-day retention at once).
    ahead = RECEIVED.timestamp() + 365 * 86400
    spans = [
        _v2_span("1" * 16, ahead, ahead + 2, segment=True),
        _v2_span("2" * 16, ahead + 0.5, ahead + 20 * 86400, parent="1" * 16),
    ]
    payload = orjson.dumps({"version": 2, "items": spans})
    rows = _by_id(handle_span(payload, {"type": "span"}, ctx()).spans)
    assert rows["1" * 16]["start_timestamp"] == RECEIVED.timestamp() - 2
    assert rows["2" * 16]["start_timestamp"] == RECEIVED.timestamp() - 1.5


def test_a_segment_with_a_bad_clock_moves_none_of_its_good_spans():
    # The shift came from the segment's start: at 0 it carried every child 56 years on.
    now = RECEIVED.timestamp() - 2
    spans = [
        _v2_span("1" * 16, 0, now + 1, segment=True),
        _v2_span("2" * 16, now + 0.1, now + 0.5, parent="1" * 16),
        _v2_span("3" * 16, now + 0.2, now + 0.7, parent="1" * 16),
    ]
    payload = orjson.dumps({"version": 2, "items": spans})
    rows = _by_id(handle_span(payload, {"type": "span"}, ctx()).spans)
    assert [rows[c * 16]["start_timestamp"] for c in "23"] == [now + 0.1, now + 0.2]
    assert rows["1" * 16]["start_timestamp"] == now + 0.2  # the latest plausible start
    event = {
        "type": "transaction",
        "start_timestamp": 0,
        "timestamp": now + 1,
        "contexts": {"trace": {"trace_id": "ab" * 16, "span_id": "1" * 16}},
        "spans": [{"span_id": "2" * 16, "start_timestamp": now + 0.1, "timestamp": now + 0.5}],
    }
    rows = _by_id(handle_transaction(orjson.dumps(event), {}, ctx()).spans)
    assert rows["2" * 16]["start_timestamp"] == now + 0.1
    assert rows["2" * 16]["duration_us"] == 400_000


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        # msgspec keeps these integers exact; float() of them overflowed (a 500).
        ({"start_timestamp": 10**400}, {}),
        ({"attributes": {"d": {"value": 10**23, "type": "double"}}}, {"d": 1e23}),
        ({"attributes": {"d": {"value": 10**400, "type": "double"}}}, {}),
        ({"attributes": {"deep": {"value": "NEST", "type": "string"}}}, "400"),
    ],
)
def test_span_v2_values_beyond_a_double_or_nesting_are_stored_or_400_never_500(change, expect):
    now = RECEIVED.timestamp() - 1
    span = _v2_span("1" * 16, now, now + 1, segment=True) | change
    # msgspec writes the integers as sent (orjson refuses them beyond 64 bits).
    payload = msgspec.json.encode({"version": 2, "items": [span]})
    payload = payload.replace(b'"NEST"', b"[" * 5000 + b"]" * 5000)
    if expect == "400":
        with pytest.raises(BadRequest, match=r"nested too deeply|not valid JSON"):
            handle_span(payload, {"type": "span"}, ctx())
        return
    [row] = handle_span(payload, {"type": "span"}, ctx()).spans
    assert RECEIVED.timestamp() - 2 <= row["start_timestamp"] <= RECEIVED.timestamp()
    orjson.dumps(row)  # the spool's encoder takes it
    assert row["attr_float"] == expect


def _event_row(event):
    [row] = handle_event(orjson.dumps(event), {}, ctx()).events
    return row


def test_legacy_interface_names_are_read_as_relay_reads_them():
    """raven-python sends ``sentry.interfaces.Exception`` (with the stack trace under its
    legacy name too), raven-js 1.x one exception object without ``values``: each was read
    as no exception, and all such errors were one "<unlabeled event>" issue."""
    frames = {"frames": [{"module": "shop.cart", "function": "total", "in_app": True}]}
    legacy = {
        "sentry.interfaces.Exception": {
            "values": [
                {
                    "type": "ZeroDivisionError",
                    "value": "division by zero",
                    "sentry.interfaces.Stacktrace": frames,
                }
            ]
        },
        "platform": "python",
    }
    modern = {
        "exception": {
            "values": [
                {"type": "ZeroDivisionError", "value": "division by zero", "stacktrace": frames}
            ]
        },
        "platform": "python",
    }
    row = _event_row(legacy)
    assert row["title"] == "ZeroDivisionError: division by zero"
    assert row["culprit"] == _event_row(modern)["culprit"] != ""
    assert row["fingerprint"] == _event_row(modern)["fingerprint"]
    single = {"exception": {"type": "KeyError", "value": "'sku'"}}
    other = {"sentry.interfaces.Exception": {"type": "TypeError", "value": "bad"}}
    assert _event_row(single)["title"] == "KeyError: 'sku'"
    assert _event_row(other)["title"] == "TypeError: bad"
    assert _event_row(single)["fingerprint"] != _event_row(other)["fingerprint"]
    # Messages and users under their legacy names, and a modern name sent too wins.
    message = {"sentry.interfaces.Message": {"message": "cache miss for %s", "params": ["a"]}}
    assert (
        _event_row(message)["title"]
        == _event_row({"logentry": message["sentry.interfaces.Message"]})["title"]
        != "<unlabeled event>"
    )
    user = {"message": "x", "sentry.interfaces.User": {"id": "42"}}
    assert _event_row(user)["user_key"] == "id:42"
    both = {**single, "sentry.interfaces.Exception": {"type": "TypeError"}}
    assert _event_row(both)["title"] == "KeyError: 'sku'"
    # The payload is stored as sent.
    assert b"sentry.interfaces.Exception" in orjson.dumps(_event_row(other)["payload"])


def test_python_logging_levels_sent_as_numbers():
    """raven-python sends ``record.levelno``; Relay reads Python's five levels."""
    levels = {10: "debug", 20: "info", 30: "warning", 40: "error", 50: "fatal", 35: "error"}
    for number, name in levels.items():
        assert _event_row({"message": "m", "level": number})["level"] == name, number
    assert _event_row({"message": "m", "level": True})["level"] == "error"


def test_streamed_spans_without_is_segment_find_their_segment_by_parent_links():
    """sentry-php streams spans with no ``is_segment`` and no ``sentry.segment.id``: the
    root (no parent) is the segment, and its descendants in the item belong to it."""
    trace = "ab" * 16
    spans = [
        {"trace_id": trace, "span_id": "c" * 16, "parent_span_id": "a" * 16, "name": "SELECT"},
        {"trace_id": trace, "span_id": "a" * 16, "parent_span_id": "", "name": "GET /cart"},
        {"trace_id": trace, "span_id": "b" * 16, "parent_span_id": "a" * 16, "name": "render"},
        # A parent outside the item: no segment is guessed.
        {"trace_id": trace, "span_id": "d" * 16, "parent_span_id": "e" * 16, "name": "late"},
    ]
    for span in spans:
        span.update(start_timestamp=1_795_000_000.0, end_timestamp=1_795_000_001.0)
    payload = orjson.dumps({"version": 2, "items": spans})
    rows = {r["span_id"]: r for r in handle_span(payload, {}, ctx()).spans}
    assert [rows[s]["is_segment"] for s in ("a" * 16, "b" * 16, "c" * 16, "d" * 16)] == [
        True,
        False,
        False,
        False,
    ]
    for span_id in ("a" * 16, "b" * 16, "c" * 16):
        assert rows[span_id]["segment_id"] == "a" * 16
        assert rows[span_id]["segment_name"] == "GET /cart"
    assert rows["d" * 16]["segment_id"] == "" and rows["d" * 16]["segment_name"] == ""
    # An explicit is_segment: false stays false, as Node 11 says it.
    spans[1]["is_segment"] = False
    payload = orjson.dumps({"version": 2, "items": spans})
    rows = {r["span_id"]: r for r in handle_span(payload, {}, ctx()).spans}
    assert not any(r["is_segment"] for r in rows.values())


def test_segments_by_parent_links_without_is_segment():
    """The span protocol's newer form drops is_segment: a remote span, or one naming
    itself as its segment, is a segment too."""
    trace = "ab" * 16

    def span(span_id, parent, **extra):
        return {
            "trace_id": trace,
            "span_id": span_id,
            "parent_span_id": parent,
            "name": f"n{span_id[0]}",
            "start_timestamp": 1_795_000_000.0,
            "end_timestamp": 1_795_000_001.0,
            **extra,
        }

    spans = [
        span("a" * 16, "f" * 16, is_remote=True),
        span("b" * 16, "a" * 16),
        span(
            "c" * 16,
            "e" * 16,
            attributes={"sentry.segment.id": {"value": "c" * 16, "type": "string"}},
        ),
        span("d" * 16, "c" * 16),
    ]
    payload = orjson.dumps({"version": 2, "items": spans})
    rows = {r["span_id"]: r for r in handle_span(payload, {}, ctx()).spans}
    assert rows["a" * 16]["is_segment"] and rows["c" * 16]["is_segment"]
    assert rows["b" * 16]["segment_id"] == "a" * 16 and rows["d" * 16]["segment_id"] == "c" * 16


def test_a_long_chain_of_spans_is_resolved_in_linear_time():
    """Each chain was walked to its root from every span on it: 8,000 spans held the
    event loop 22 s. 20,000 now take well under a second (quadratic: minutes)."""
    import time

    trace = "ab" * 16
    ids = [f"{i:016x}" for i in range(1, 20_001)]
    spans = [
        {
            "trace_id": trace,
            "span_id": span_id,
            "parent_span_id": ids[i - 1] if i else "f" * 16,
            "is_remote": False,
            "start_timestamp": 1_795_000_000.0,
            "end_timestamp": 1_795_000_001.0,
        }
        for i, span_id in enumerate(ids)
    ]
    spans[0]["is_segment"] = False  # the chain leaves the item: no segment anywhere
    payload = orjson.dumps({"version": 2, "items": spans})
    started = time.monotonic()
    rows = handle_span(payload, {}, ctx()).spans
    assert time.monotonic() - started < 10
    assert len(rows) == 20_000 and not any(r["segment_id"] for r in rows)
