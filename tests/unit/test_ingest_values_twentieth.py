"""Values from SDKs that the twentieth session's review found answered with a 200 and then
stored wrong or not at all, or answered with a 500 that lost the whole envelope.

Real ingest through the app as served (``create_server_app``), the spool, the writer and
chDB; everything is read back from the tables.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import falcon.testing
import msgspec
import orjson
import pytest

from errortrack.server import create_server_app
from errortrack.timestamps import MAX_FUTURE, MAX_PAST, corrected, drift
from tests.ingest_support import make_project, sentry_auth

TRACE = "ab" * 16
ROOT, CHILD = "1" * 16, "2" * 16


@pytest.fixture
def served(state) -> Iterator[tuple[Any, falcon.testing.TestClient, int, dict[str, str]]]:
    with state.sessions() as session:
        pid, key = make_project(session)
    client = falcon.testing.TestClient(create_server_app(state=state))
    yield state, client, pid, sentry_auth(key)
    state.ingest.writer.spool.close()


def _envelope(
    items: list[tuple[dict[str, Any], Any]], header: dict[str, Any] | None = None
) -> bytes:
    lines = [orjson.dumps(header or {})]
    for item_header, payload in items:
        raw = payload if isinstance(payload, bytes) else orjson.dumps(payload)
        lines += [orjson.dumps({**item_header, "length": len(raw)}), raw]
    return b"\n".join(lines) + b"\n"


def _post(client, pid: int, auth: dict[str, str], body: bytes, path: str = "envelope/"):
    return client.simulate_post(f"/api/{pid}/{path}", body=body, headers=auth)


def _spans(clickhouse, pid: int) -> dict[str, dict[str, Any]]:
    rows = clickhouse.query_rows(
        "SELECT span_id, toUnixTimestamp64Micro(start_timestamp), duration_us, attributes,"
        " attr_string, attr_int FROM spans WHERE project_id = {p:UInt64}",
        parameters={"p": pid},
    )
    return {
        r[0]: {"start_us": r[1], "duration_us": r[2], "attributes": r[3], "strings": r[4]}
        | {"ints": r[5]}
        for r in rows
    }


def _one_time(clickhouse, table: str, pid: int) -> list[int]:
    return [
        r[0]
        for r in clickhouse.query_rows(
            f"SELECT toUnixTimestamp64Micro(timestamp) FROM {table} WHERE project_id = {{p:UInt64}}",
            parameters={"p": pid},
        )
    ]


def _us(seconds: float) -> int:
    return round(seconds * 1_000_000)


def _transaction(start: float, end: float, child: tuple[float, float], **extra: Any) -> dict:
    return {
        "type": "transaction",
        "transaction": "GET /clock",
        "start_timestamp": start,
        "timestamp": end,
        "contexts": {"trace": {"trace_id": TRACE, "span_id": ROOT, "op": "http"}},
        "spans": [
            {
                "trace_id": TRACE,
                "span_id": CHILD,
                "parent_span_id": ROOT,
                "op": "db",
                "start_timestamp": child[0],
                "timestamp": child[1],
            }
        ],
        **extra,
    }


def _item(form: str, start: float) -> tuple[dict[str, Any], Any]:
    """One item of ``form`` whose root runs ``start``..``start + 2`` and whose child (for
    the forms that have one) ``start + 0.5``..``start + 1``, all on the sender's clock."""
    end, child = start + 2, (start + 0.5, start + 1)
    if form == "transaction":
        return {"type": "transaction"}, _transaction(start, end, child)
    if form == "span-v2":
        spans = [
            {"trace_id": TRACE, "span_id": ROOT, "name": "root", "is_segment": True}
            | {"start_timestamp": start, "end_timestamp": end, "attributes": {}},
            {"trace_id": TRACE, "span_id": CHILD, "parent_span_id": ROOT, "name": "child"}
            | {"start_timestamp": child[0], "end_timestamp": child[1], "attributes": {}},
        ]
        return {"type": "span", "item_count": 2}, {"version": 2, "items": spans}
    single = {"trace_id": TRACE, "span_id": ROOT, "segment_id": ROOT, "op": "ui.inp"}
    return {"type": "span"}, single | {"start_timestamp": start, "timestamp": end, "data": {}}


# --- 1. times from a wildly wrong clock ---------------------------------------------------

GARBAGE_CLOCKS = [1e12, 1e17, 1e18, 1e19, 1e20, 1e25, 1e30, 1e300, -1e20, -1e25]


def _assert_item_ends_at_the_arrival(spans, form: str, start: float, received: float) -> None:
    """Every span at its distance from the item's end (``start + 2`` as the sender's float
    holds it) before the arrival: the positions are the exact differences of the times
    sent, which a float ``received - end`` lost for a clock reading 1e20 or more."""
    end = start + 2
    assert spans[ROOT]["start_us"] == pytest.approx(_us(received - (end - start)), abs=1)
    assert spans[ROOT]["duration_us"] == pytest.approx(_us(end - start), abs=1)
    if form != "span-single":
        child_start, child_end = start + 0.5, start + 1
        assert spans[CHILD]["start_us"] == pytest.approx(_us(received - (end - child_start)), abs=1)
        assert spans[CHILD]["duration_us"] == pytest.approx(_us(child_end - child_start), abs=1)


@pytest.mark.parametrize("form", ["transaction", "span-v2", "span-single"])
@pytest.mark.parametrize("start", GARBAGE_CLOCKS)
def test_a_whole_item_from_a_garbage_clock_ends_at_the_arrival(served, clickhouse, form, start):
    # Was: start 1e20 placed ~70 min ahead, 1e25 on 2038-01-19, 1e30 and 1e300 at 0 and
    # then dropped as too old, all after a 200.
    state, client, pid, auth = served
    received = state.clock().timestamp()
    resp = _post(client, pid, auth, _envelope([_item(form, start)]))
    assert resp.status_code == 200, resp.text
    state.ingest.writer.drain()
    spans = _spans(clickhouse, pid)
    assert set(spans) == ({ROOT} if form == "span-single" else {ROOT, CHILD})
    _assert_item_ends_at_the_arrival(spans, form, start, received)


@pytest.mark.parametrize("reading", [1e12, 1e19, 1e20, 1e25, 1e30, 1e300])
def test_a_sent_at_from_a_garbage_clock_corrects_nothing(served, clickhouse, reading):
    # sent_at "1e30" made a drift of -1e30, and `ts + drift` of a log and an event dated
    # 1e30 came to 0: a 200, then the log expired at once and the event was dropped as
    # too old; 1e25 stored both in 2038, 1e20 an hour ahead. Such a sent_at is no
    # offset to correct by: the times are judged as sent.
    state, client, pid, auth = served
    received = state.clock().timestamp()
    logs = {
        "version": 2,
        "items": [{"body": "garbage clock", "level": "info", "timestamp": reading}],
    }
    event = {"event_id": "e" * 32, "timestamp": reading, "message": "garbage clock"}
    # An envelope holds one event or transaction: the transaction is sent apart.
    body = _envelope(
        [({"type": "log", "item_count": 1}, logs), ({"type": "event"}, event)],
        {"event_id": "e" * 32, "sent_at": repr(reading)},
    )
    resp = _post(client, pid, auth, body)
    assert resp.status_code == 200, resp.text
    assert resp.json == {"id": "e" * 32}
    body = _envelope(
        [({"type": "transaction"}, _item("transaction", reading)[1])],
        {"sent_at": repr(reading)},
    )
    assert _post(client, pid, auth, body).status_code == 200
    state.ingest.writer.drain()
    assert _one_time(clickhouse, "logs", pid) == [_us(received)]
    assert _one_time(clickhouse, "events", pid) == [_us(received)]
    _assert_item_ends_at_the_arrival(_spans(clickhouse, pid), "transaction", reading, received)


@pytest.mark.parametrize(
    ("sent_at", "expected"),
    [
        ("1e20", 0.0),
        ("-1e20", 0.0),
        ("2106-02-08T00:00:00Z", 0.0),  # no row could carry it
        ("1970-01-02T00:00:00Z", None),  # a clock reset to the epoch: still corrected
        ("2106-02-07T00:00:00Z", None),
    ],
)
def test_only_a_sent_at_a_row_could_carry_is_a_drift(sent_at, expected):
    received = dt.datetime.now(dt.UTC).replace(microsecond=0).timestamp()
    sent = dt.datetime.fromisoformat(sent_at).timestamp() if expected is None else None
    want = received - sent if sent is not None else expected
    assert drift(sent_at, received) == want


@pytest.mark.parametrize("reading", [1e17, 1e19, 1e20, 1e25, 1e30])
def test_corrected_never_answers_a_time_outside_the_window(reading):
    # A drift as large as the clock loses the arrival in `ts + drift`; whatever the
    # float error, the answer lies in the window around the arrival.
    received = dt.datetime.now(dt.UTC).replace(microsecond=0).timestamp()
    got = corrected(reading, received, received - reading)
    assert received - MAX_PAST <= got <= received + MAX_FUTURE


# --- 2. JSON nested as deep as orjson reads -----------------------------------------------


def _deep_object(levels: int) -> bytes:
    return b'{"k":' * levels + b"1" + b"}" * levels


def _deep_array(levels: int) -> bytes:
    return b"[" * levels + b"1" + b"]" * levels


def _deep_transaction(received: float) -> bytes:
    # 3 levels above the data, so 1,020 more reach orjson's limit of 1,024.
    data = _deep_object(1020)
    transaction = _transaction(received - 2, received - 1, (received - 1.5, received - 1.2))
    transaction["contexts"]["trace"]["data"] = {"DATA": 1}
    transaction["spans"][0]["data"] = {"arr": "ARR", "n": 5}
    transaction["spans"][0]["tags"] = {"TAGS": 1}
    return (
        orjson.dumps(transaction)
        .replace(b'{"DATA":1}', data)
        .replace(b'"ARR"', _deep_array(1018))
        .replace(b'{"TAGS":1}', _deep_object(1018))
    )


def _assert_deep_transaction_stored(clickhouse, pid: int) -> None:
    from errortrack.traces.rows import MAX_DEPTH

    spans = _spans(clickhouse, pid)
    assert set(spans) == {ROOT, CHILD}
    # MAX_DEPTH levels of objects become a dotted name; the rest stays whole, as the JSON
    # text of it (as Relay trims a data bag that is too deep), exactly as sent.
    name = ".".join(["k"] * MAX_DEPTH)
    root = msgspec.json.decode(spans[ROOT]["attributes"])
    assert root[name] == {"value": _deep_object(1020 - MAX_DEPTH).decode(), "type": "string"}
    child = msgspec.json.decode(spans[CHILD]["attributes"])
    assert child["arr"] == {"value": _deep_array(1018).decode(), "type": "string"}
    assert child["n"] == {"value": 5, "type": "integer"}
    assert child[name] == {"value": _deep_object(1018 - MAX_DEPTH).decode(), "type": "string"}
    assert spans[CHILD]["strings"]["arr"] == _deep_array(1018).decode()


def test_a_transaction_nested_as_deep_as_orjson_reads_is_stored_with_its_envelope(
    served, clickhouse
):
    # A RecursionError in rows._flatten: a 500 that lost the whole envelope.
    state, client, pid, auth = served
    received = state.clock().timestamp()
    logs = {"version": 2, "items": [{"body": "beside", "level": "info", "timestamp": received}]}
    body = _envelope(
        [
            ({"type": "transaction"}, _deep_transaction(received)),
            ({"type": "log", "item_count": 1}, logs),
        ]
    )
    resp = _post(client, pid, auth, body)
    assert resp.status_code == 200, resp.text
    state.ingest.writer.drain()
    _assert_deep_transaction_stored(clickhouse, pid)
    assert _one_time(clickhouse, "logs", pid) == [_us(received)]


def test_a_deep_transaction_sent_to_store_is_stored(served, clickhouse):
    state, client, pid, auth = served
    received = state.clock().timestamp()
    resp = _post(client, pid, auth, _deep_transaction(received), path="store/")
    assert resp.status_code == 200, resp.text
    state.ingest.writer.drain()
    _assert_deep_transaction_stored(clickhouse, pid)


def _deep_params_event(event_id: str) -> bytes:
    event = {"event_id": event_id, "level": "error"}
    event["logentry"] = {"message": "value %r, %s", "params": [{"k": "DEEP"}, "DEEP"]}
    # event > logentry > params > {k: [...]} and event > logentry > params > [...].
    return orjson.dumps(event).replace(b'"DEEP"', _deep_array(1015))


@pytest.mark.parametrize("path", ["envelope/", "store/"])
def test_an_event_whose_params_nest_as_deep_as_orjson_reads_is_stored(served, clickhouse, path):
    # str() of the params for the title: a RecursionError, a 500 that lost the envelope.
    state, client, pid, auth = served
    received = state.clock().timestamp()
    event = _deep_params_event("d" * 32)
    logs = {"version": 2, "items": [{"body": "beside", "level": "info", "timestamp": received}]}
    if path == "store/":
        body = event
    else:
        body = _envelope([({"type": "event"}, event), ({"type": "log", "item_count": 1}, logs)])
    resp = _post(client, pid, auth, body, path=path)
    assert resp.status_code == 200, resp.text
    assert resp.json == {"id": "d" * 32}
    state.ingest.writer.drain()
    [(title, payload)] = clickhouse.query_rows(
        "SELECT title, payload FROM events WHERE project_id = {p:UInt64}", parameters={"p": pid}
    )
    # The params as Python's %r and %s show them, however deep, clipped as every title.
    deep = "[" * 1015 + "1" + "]" * 1015
    assert title == (f"value {{'k': {deep}}}, {deep}")[:199] + "\u2026"
    assert payload.encode() == event  # the payload as sent
    assert _one_time(clickhouse, "logs", pid) == ([] if path == "store/" else [_us(received)])


# --- 3. integers beyond 64 bits in a transaction's data and tags --------------------------


@pytest.mark.parametrize("beyond_a_double", [False, True])
def test_transaction_integers_beyond_64_bits_keep_their_digits(served, clickhouse, beyond_a_double):
    # orjson read them as doubles (18446744073709551617 -> 1.8446744073709552e19), and
    # refused one beyond a double (10**400) with a 400 for the whole transaction; a
    # standalone span (msgspec) kept the digits as text all along.
    state, client, pid, auth = served
    received = state.clock().timestamp()
    transaction = _transaction(received - 2, received - 1, (received - 1.5, received - 1.2))
    numbers: dict[str, int] = {"order.id": 2**64 + 1, "user.id": 12345678901234567890123}
    if beyond_a_double:
        numbers["huge"] = 10**400
    transaction["contexts"]["trace"]["data"] = numbers | {"n": 7}
    transaction["spans"][0]["data"] = numbers
    transaction["tags"] = {"ticket": 2**70}
    payload = msgspec.json.encode(transaction)  # orjson cannot write these integers
    resp = _post(client, pid, auth, _envelope([({"type": "transaction"}, payload)]))
    assert resp.status_code == 200, resp.text
    state.ingest.writer.drain()
    spans = _spans(clickhouse, pid)
    digits = {name: {"value": str(value), "type": "string"} for name, value in numbers.items()}
    root = msgspec.json.decode(spans[ROOT]["attributes"])
    assert {name: root[name] for name in numbers} == digits
    assert root["ticket"] == {"value": str(2**70), "type": "string"}
    assert root["n"] == {"value": 7, "type": "integer"}
    assert spans[ROOT]["strings"]["order.id"] == "18446744073709551617"
    assert spans[ROOT]["ints"] == {"n": 7}
    child = msgspec.json.decode(spans[CHILD]["attributes"])
    assert {name: child[name] for name in numbers} == digits


# --- 4. tags sent as a list of [key, value] pairs -----------------------------------------

PAIRS = [
    ["browser", "Firefox"],
    ["region", "eu"],
    ["retries", 3],
    ["lonely"],  # not a pair: skipped, as are the rest
    [1, "numeric key"],
    ["a", "b", "c"],
    "browser=Chrome",
    None,
]


def test_tags_sent_as_pairs_become_attributes(served, clickhouse):
    # Sentry's protocol takes tags as an object or as [key, value] pairs; pairs were
    # dropped without a word.
    state, client, pid, auth = served
    received = state.clock().timestamp()
    transaction = _transaction(received - 2, received - 1, (received - 1.5, received - 1.2))
    transaction["tags"] = PAIRS
    transaction["spans"][0]["tags"] = [["db.role", "replica"]]
    single = {"trace_id": "cd" * 16, "span_id": "3" * 16, "segment_id": "3" * 16, "op": "ui"}
    single |= {"start_timestamp": received - 2, "timestamp": received - 1, "tags": PAIRS}
    body = _envelope([({"type": "transaction"}, transaction), ({"type": "span"}, single)])
    resp = _post(client, pid, auth, body)
    assert resp.status_code == 200, resp.text
    state.ingest.writer.drain()
    spans = _spans(clickhouse, pid)
    for span_id in (ROOT, "3" * 16):
        attributes = msgspec.json.decode(spans[span_id]["attributes"])
        assert {name: attributes[name] for name in ("browser", "region", "retries")} == {
            "browser": {"value": "Firefox", "type": "string"},
            "region": {"value": "eu", "type": "string"},
            "retries": {"value": 3, "type": "integer"},
        }
        assert not {"lonely", "1", "a"} & set(attributes)
        assert spans[span_id]["ints"] == {"retries": 3}
    assert spans[CHILD]["strings"]["db.role"] == "replica"
