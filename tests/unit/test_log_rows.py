"""log items -> logs rows (ARCHITECTURE.md "Logs")."""

from __future__ import annotations

import datetime as dt

import orjson
import pytest

from errortrack.errors import BadRequest
from errortrack.ingest.items import ItemContext, dispatch

CTX = ItemContext(7, dt.datetime(2026, 11, 1, 12, tzinfo=dt.UTC), 30, {})
TRACE = "e5b61031519245ccaea3fd1be4e59ce7"


def encoded(payload: bytes) -> list[bytes]:
    """The rows as the spool gets them: JSONEachRow lines, one JSON object each."""
    out = dispatch("log", payload, {"type": "log"}, CTX)
    assert out.log_lines.count(b"\n") == out.log_count == out.count()
    return out.log_lines.splitlines()


def rows(*logs):
    return [orjson.loads(r) for r in encoded(orjson.dumps({"version": 2, "items": list(logs)}))]


@pytest.mark.parametrize(
    ("level", "number"),
    [
        ("trace", 1),
        ("debug", 5),
        ("info", 9),
        ("warn", 13),
        ("error", 17),
        ("fatal", 21),
        ("warning", None),
        ("NOTICE", None),
    ],
)
def test_severity_number_is_derived_from_level_as_sent(level, number):
    (row,) = rows({"timestamp": 1.5, "level": level, "body": "b", "trace_id": TRACE})
    assert (row["level"], row["severity_number"]) == (level, number)


def test_trace_and_span_only_inside_a_span():
    outside, python, node = rows(
        {"level": "info", "body": "o", "trace_id": TRACE, "timestamp": 1},
        {
            "level": "info",
            "body": "p",
            "trace_id": TRACE,
            "span_id": "96af6e9076d708e9",
            "timestamp": 1,
        },
        {
            "level": "info",
            "body": "n",
            "trace_id": TRACE,
            "timestamp": 1,
            "attributes": {
                "sentry.trace.parent_span_id": {"value": "a17ad1e8085dc132", "type": "string"}
            },
        },
    )
    assert (outside["trace_id"], outside["span_id"]) == ("", "")
    assert (python["trace_id"], python["span_id"]) == (TRACE, "96af6e9076d708e9")
    assert (node["trace_id"], node["span_id"]) == (TRACE, "a17ad1e8085dc132")


def test_a_span_id_that_is_no_string_leaves_nodes_parent_span_attribute_in_charge():
    # A truthy non-string span_id (5) hid the attribute: the log was filed outside spans.
    (row,) = rows(
        {
            "level": "info",
            "body": "n",
            "trace_id": TRACE,
            "span_id": 5,
            "timestamp": 1,
            "attributes": {
                "sentry.trace.parent_span_id": {"value": "a17ad1e8085dc132", "type": "string"}
            },
        }
    )
    assert (row["trace_id"], row["span_id"]) == (TRACE, "a17ad1e8085dc132")


@pytest.mark.parametrize(
    ("sent", "filed"),
    [
        ("12", 12),
        ("-12", -12),
        ("007", 7),
        (" 12 ", None),  # Python's int() strips spaces, reads "1_000" and other scripts'
        ("1_000", None),  # digits; no JSON reader takes those for an integer, so a
        ("\u0663", None),  # filter attr[k]=1000 found a log that sent "1_000"
        ("+12", None),
        ("1.0", None),
        ("", None),
        ("9223372036854775808", None),  # past Int64
    ],
)
def test_integers_sent_as_strings_are_filed_only_when_plain_ascii_digits(sent, filed):
    attrs = {"k": {"value": sent, "type": "integer"}}
    (row,) = rows({"level": "info", "body": "b", "timestamp": 1, "attributes": attrs})
    assert row["attributes"] == attrs  # stored as sent either way
    assert row["attr_int"] == ({} if filed is None else {"k": filed})


def test_attributes_exact_and_typed_maps():
    attrs = {
        "s": {"value": "x", "type": "string"},
        "i": {"value": 3, "type": "integer"},
        "istr": {"value": "9007199254740993", "type": "integer"},
        "d": {"value": 2.0, "type": "double", "unit": "ms"},
        "b": {"value": False, "type": "boolean"},
        "a": {"value": ["x", 1, True], "type": "array"},
        "bad": {"value": "seven", "type": "integer"},
    }
    (row,) = rows({"level": "info", "body": "b", "timestamp": 1, "attributes": attrs})
    # Spooled as the object: ClickHouse stores its text (tests/e2e check the bytes).
    assert row["attributes"] == attrs
    assert orjson.dumps(row["attributes"]) == orjson.dumps(attrs)
    assert row["attr_string"] == {"s": "x", "a": '["x",1,true]'}
    assert row["attr_int"] == {"i": 3, "istr": 9007199254740993}
    assert row["attr_float"] == {"d": 2.0}
    assert row["attr_bool"] == {"b": False}


def test_times_ids_and_retention():
    sent = CTX.received_at.timestamp() - 2.8247666
    a, b = rows(
        {"level": "info", "body": "x", "timestamp": sent},
        {"level": "info", "body": "y"},
    )
    assert a["timestamp"] == sent
    assert b["timestamp"] == CTX.received_at.timestamp()  # missing: the server's time
    assert a["ingested_at"] == CTX.received_at.timestamp()
    # The id is made by ClickHouse at insert (clickhouse/0010), not spooled.
    assert "id" not in a
    assert (a["project_id"], a["retention_days"]) == (7, 30)


def test_times_outside_sentrys_window_get_the_arrival_time():
    # Relay's rule for logs: 30 days back, 60 s ahead. Earlier ones would be dropped by
    # the TTL at once, later ones kept past their retention; 1e30 no column can hold.
    now = CTX.received_at.timestamp()
    sent = [now - 30 * 86400, now + 60, now - 30 * 86400 - 1, now + 61, -0.0, -1, 1e30]
    got = [r["timestamp"] for r in rows(*({"body": "b", "timestamp": t} for t in sent))]
    assert got == [now - 30 * 86400, now + 60] + [now] * 5


def test_a_drifting_clock_moves_every_log_by_the_drift():
    now = CTX.received_at.timestamp()
    day = 86400.0
    behind = ItemContext(7, CTX.received_at, 30, {}, drift=day)
    payload = orjson.dumps(
        {
            "version": 2,
            "items": [
                {"body": "a", "timestamp": now - day - 2.5},
                {"body": "b", "timestamp": int(now - day)},
                {"body": "c", "timestamp": now - 40 * day},  # implausible even then
                {"body": "d"},
            ],
        }
    )
    lines = dispatch("log", payload, {"type": "log"}, behind).log_lines.splitlines()
    got = [orjson.loads(line)["timestamp"] for line in lines]
    assert got == [now - 2.5, int(now - day) + day, now, now]


def test_an_integer_too_large_for_a_float_with_a_drift_gets_the_arrival_time():
    # The drift is not added to a time before it is known to be plausible: 10**400 + a
    # float overflows, which answered the request with a 500.
    behind = ItemContext(7, CTX.received_at, 30, {}, drift=86400.0)
    payload = b'{"items":[{"body":"huge","timestamp":1' + b"0" * 400 + b"}]}"
    [line] = dispatch("log", payload, {"type": "log"}, behind).log_lines.splitlines()
    assert orjson.loads(line)["timestamp"] == CTX.received_at.timestamp()


def test_attributes_are_the_bytes_as_sent():
    # Not re-encoded: spaces, escapes and number forms stay as the SDK wrote them.
    attrs = b'{"u": {"value": "caf\\u00e9 \\"q\\"", "type": "string"}, "n": {"value": 1.50, "type": "double"}}'
    payload = b'{"items":[{"level":"info","body":"b","timestamp":1,"attributes":' + attrs + b"}]}"
    (row,) = encoded(payload)
    assert b'"attributes":' + attrs + b',"attr_string"' in row
    assert orjson.loads(row)["attr_string"] == {"u": 'caf\u00e9 "q"'}
    assert orjson.loads(row)["attr_float"] == {"n": 1.5}


def test_missing_or_null_attributes_are_stored_as_an_empty_object():
    a, b = rows({"level": "info", "body": "a"}, {"level": "info", "body": "b", "attributes": None})
    assert a["attributes"] == b["attributes"] == {}
    assert a["attr_string"] == a["attr_int"] == a["attr_float"] == a["attr_bool"] == {}


def test_a_pretty_printed_item_still_makes_one_line_per_row():
    # With a `length` header an item may span lines; a spooled row must not.
    logs = [{"level": "info", "body": "x", "attributes": {"k": {"value": 1, "type": "integer"}}}]
    payload = orjson.dumps({"items": logs}, option=orjson.OPT_INDENT_2)
    assert b"\n" in payload
    (row,) = encoded(payload)
    assert b"\n" not in row
    assert orjson.loads(row)["attributes"] == logs[0]["attributes"]


def test_integers_beyond_64_bits_in_arrays_and_bodies_are_written_as_sent():
    # msgspec reads them; the JSON text of an array or a non-string body keeps them.
    big = b"123456789012345678901234567890"
    payload = (
        b'{"items":[{"body":{"n":' + big + b'},"attributes":{"xs":{"value":[' + big + b"],"
        b'"type":"array"},"i":{"value":' + big + b',"type":"integer"}}}]}'
    )
    (row,) = encoded(payload)
    assert b'"body":"{\\"n\\":' + big + b'}"' in row
    assert b'"attr_string":{"xs":"[' + big + b']"},"attr_int":{}' in row


def test_bare_attribute_values_are_filed_under_their_json_type():
    # Not what SDKs send: a hand-written sender's bare values were kept as sent but left
    # out of the maps, so attr[k]=5 could never find them.
    bare = {"k": 5, "f": 1.5, "t": True, "w": "x", "n": None, "a": [1], "o": {"value": 1}}
    (row,) = rows(
        {
            "level": "info",
            "body": "x",
            "attributes": {**bare, "s": {"value": "v", "type": "string"}},
        }
    )
    assert row["attributes"] == {**bare, "s": {"value": "v", "type": "string"}}
    # Arrays as JSON text and an untyped object's value as text, as for typed ones.
    assert row["attr_string"] == {"s": "v", "w": "x", "a": "[1]", "o": "1"}
    assert (row["attr_int"], row["attr_float"], row["attr_bool"]) == (
        {"k": 5},
        {"f": 1.5},
        {"t": True},
    )


def test_odd_field_types_are_tolerated_as_before():
    (row,) = rows(
        {"level": 5, "body": {"k": [1]}, "timestamp": "soon", "span_id": 7, "trace_id": TRACE}
    )
    assert (row["level"], row["severity_number"], row["body"]) == ("", None, '{"k":[1]}')
    assert row["timestamp"] == CTX.received_at.timestamp()
    assert (row["trace_id"], row["span_id"]) == ("", "")


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"{", "not valid JSON"),
        (b"[]", "must be an object"),
        (b'{"items":3}', "must be an object"),
        (b'{"items":[3]}', "log 0 is not a JSON object"),
        (b'{"items":[{"body":"a"},"x"]}', "log 1 is not a JSON object"),
        (b'{"items":[{"level":"' + b"l" * 65 + b'"}]}', "log 0: level is longer than 64"),
        (
            b'{"items":[{},{"span_id":"' + b"a" * 65 + b'"}]}',
            "log 1: span_id is longer than 64 characters",
        ),
        (
            b'{"items":[{"span_id":"ab","trace_id":"' + b"a" * 65 + b'"}]}',
            "log 0: trace_id is longer than 64 characters",
        ),
        (
            b'{"items":[{"attributes":{"sentry.trace.parent_span_id":{"value":"'
            + b"a" * 65
            + b'","type":"string"}}}]}',
            "log 0: span_id is longer than 64 characters",
        ),
        (b'{"items":[{"attributes":[]}]}', "attributes must be an object"),
        (b'{"items":[{"attributes":"a"}]}', "log 0: attributes must be an object"),
        (b'{"items":[{"attributes":{"k":{"value":1e400}}}]}', "attributes are not valid"),
        (b'{"items":[{"timestamp":1e400}]}', "Number out of range - at `$.items[0].timestamp`"),
        (b'{"items": [1,}', "not valid JSON"),
        (b"{}", 'must be an object {"items": [...]}'),
        (b'{"items":null}', 'must be an object {"items": [...]}'),
        (b'{"items":[{"attributes":{"k":{"value":"\xff"}}}]}', "not valid"),
        (b'{"items":[{"body":"\\ud800"}]}', "not valid"),
        (b'{"items":[{"body":' + b"[" * 5000 + b"]" * 5000 + b"}]}", "not valid"),
        (
            b'{"items":[{"attributes":{"k":{"value":' + b"[" * 5000 + b"]" * 5000 + b"}}}]}",
            "not valid",
        ),
    ],
)
def test_malformed_log_items(payload, message):
    with pytest.raises(BadRequest) as info:
        dispatch("log", payload, {"type": "log"}, CTX)
    assert message in info.value.message


@pytest.mark.parametrize("where", ["attribute", "body", "bare attribute"])
def test_an_integer_of_more_than_640_digits_is_a_400(where):
    # Reading digits costs their square: 19 MiB of 4,300-digit numbers held the event
    # loop 1.8-3.2 s (DoS review, twenty-ninth session). 640 is Python's lowest limit.
    def item(digits: int) -> bytes:
        number = b"9" * digits
        log = {
            "attribute": b'{"attributes":{"n":{"value":' + number + b',"type":"integer"}}}',
            "body": b'{"body":' + number + b"}",
            "bare attribute": b'{"attributes":{"n":' + number + b"}}",
        }[where]
        return b'{"items":[' + log + b"]}"

    [row] = encoded(item(640))
    assert b"9" * 640 in row
    with pytest.raises(BadRequest, match="not valid"):
        encoded(item(641))


def test_a_refused_item_is_not_read_into_objects_to_word_its_400():
    """12 MiB of nested arrays (18 KB gzipped) were read whole again with orjson only to
    say which log was not an object: 2.2 s and ~0.57 GB of the event loop."""
    import tracemalloc

    payload = b'{"items":[' + b",".join([b"[[]]"] * 800_000) + b"]}"
    tracemalloc.start()
    try:
        with pytest.raises(BadRequest, match="log 0 is not a JSON object"):
            dispatch("log", payload, {"type": "log"}, CTX)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, peak  # orjson's objects for it: ~100 MB


def test_a_logs_level_and_ids_at_their_limit_are_taken():
    (row,) = rows({"level": "l" * 64, "span_id": "a" * 64, "trace_id": "b" * 64})
    assert (row["level"], row["span_id"], row["trace_id"]) == ("l" * 64, "a" * 64, "b" * 64)
