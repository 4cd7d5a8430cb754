"""Unusual values an SDK may send in a log: each is acknowledged and must then insert,
since a batch that fails for its data is retried forever and holds up every later
insert (the writer takes the oldest segment first). A log dated 1e30 did exactly that
until the seventh session (test_ingest_http.py covers it with spans)."""

from __future__ import annotations

import json

import orjson
import pytest

from tests.ingest_support import ingest_auth, sentry_auth

BIG = b"1" + b"0" * 400  # an integer literal no 64-bit or double type holds


def _raw_log_envelope(log: bytes) -> bytes:
    item = b'{"items":[' + log + b"]}"
    return b"{}\n" + orjson.dumps({"type": "log", "length": len(item)}) + b"\n" + item + b"\n"


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _attr(value: bytes, kind: bytes) -> bytes:
    return b'{"body":"a","attributes":{"k":{"value":' + value + b',"type":"' + kind + b'"}}}'


CASES = {
    "huge integer as double": _attr(BIG, b"double"),
    "huge integer as integer": _attr(BIG, b"integer"),
    "huge integer in array": _attr(b"[" + BIG + b"]", b"array"),
    "huge integer timestamp": b'{"body":"a","timestamp":' + BIG + b"}",
    "huge string timestamp": b'{"body":"a","timestamp":"' + BIG + b'"}',
    "huge integer body": b'{"body":' + BIG + b"}",
    "deep attributes": _attr(_nested(400), b"array"),
    # Near the deepest msgspec reads here (its limit follows Python's recursion limit,
    # ~990 levels less the caller's frames): ClickHouse must read the stored text too
    # (input_format_json_max_depth, 1,000).
    "attributes 900 deep": _attr(_nested(900), b"array"),
    "empty key": b'{"body":"a","attributes":{"":{"value":"x","type":"string"}}}',
    "nul characters": _attr(b'"\\u0000\\u0001"', b"string").replace(b'"a"', b'"\\u0000"'),
    # No -0.0 timestamp here: it is stored as 1970-01-01, long past any retention, so a
    # TTL merge may drop the row before the count (the time itself: test_log_rows.py).
    "negative zero": b'{"body":"a","attributes":{"d":{"value":-0.0,"type":"double"}}}',
}


@pytest.mark.parametrize("name", list(CASES))
def test_an_accepted_log_always_inserts(name, state, ingest_client, project, clickhouse):
    pid, key = project
    resp = ingest_client.simulate_post(
        f"/api/{pid}/envelope/", body=_raw_log_envelope(CASES[name]), headers=sentry_auth(key)
    )
    assert resp.status_code == 200, resp.text  # each is a log an SDK could send
    state.ingest.writer.drain()
    count = clickhouse.command(f"SELECT count() FROM logs WHERE project_id = {pid}")
    assert int(count) == 1


# Integer literals orjson cannot give back: beyond 64 bits it reads a float, beyond a
# double's range nothing (it raises). Both are JSON, msgspec takes both, and a log
# stores its attributes as sent.
BEYOND_64_BITS = b"18446744073709551616"
BEYOND_DOUBLE = BIG
NUMBERS = b'{"a":{"value":' + BEYOND_64_BITS + b',"type":"integer"},"b":{"value":[' + BEYOND_DOUBLE
NUMBERS += (
    b'],"type":"array"},"c":{"value":1e5,"type":"double"},"d":{"value":-0.0,"type":"double"}}'
)


def test_attributes_read_back_as_the_bytes_sent(ingest_world):
    """Found in the fifteenth session: one log holding an integer beyond a double's
    range made every logs page that held it a 500, and integers beyond 64 bits came
    back as floats; the API now returns the stored bytes as they are."""
    world = ingest_world
    pid = world.project_id
    log = b'{"body":"big","attributes":' + NUMBERS + b"}"
    resp = world.client.simulate_post(
        f"/api/{pid}/envelope/",
        body=_raw_log_envelope(log),
        headers=ingest_auth(world.factory, pid),
    )
    assert resp.status_code == 200, resp.text
    world.state.ingest.writer.drain()
    for path in (f"/api/projects/{pid}/logs", f"/api/projects/{pid}/logs?q=big"):
        page = world.call("viewer", "GET", path)
        assert page.status_code == 200, page.text
        assert b'"attributes":' + NUMBERS + b"," in page.content
        assert json.loads(page.text)["items"][0]["attributes"] == json.loads(NUMBERS)


def test_event_payload_reads_back_as_the_bytes_sent(ingest_world):
    world = ingest_world
    pid = world.project_id
    event = b'{"event_id":"' + b"e" * 32 + b'","message":"big","extra":{"n":' + BEYOND_64_BITS
    event += b',"f":1e5}}'
    body = b'{"event_id":"' + b"e" * 32 + b'"}\n{"type":"event"}\n' + event + b"\n"
    resp = world.client.simulate_post(
        f"/api/{pid}/envelope/", body=body, headers=ingest_auth(world.factory, pid)
    )
    assert resp.status_code == 200, resp.text
    world.state.ingest.writer.drain()
    (issue,) = world.call("viewer", "GET", f"/api/projects/{pid}/issues").json["items"]
    page = world.call("viewer", "GET", f"/api/projects/{pid}/issues/{issue['id']}/events")
    assert page.status_code == 200, page.text
    assert b'"payload":' + event in page.content
