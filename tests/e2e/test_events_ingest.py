"""Real SDK envelopes through the HTTP ingest, the spool, the writer and its grouping hook,
into chDB (events, spans) and the relational store (issues)."""

import time
from pathlib import Path

import orjson
import sqlalchemy as sa

from errortrack.models import Issue
from tests.ingest_support import sentry_auth

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sdk-envelopes"
ERRORS = [
    "python/0006_c_exception_message.envelope",
    "python/0007_c_exception_message.envelope",
    "node/0031_c_exception_message.envelope",
    "node/0032_c_exception_message.envelope",
    "node/0035_c_unhandled_exception.envelope",
]
FIRST_ID = "aacf9e42aa114d73accfed70a6848b69"  # the event id in ERRORS[0]
TRACES = [
    "python/0009_d_transaction_2_spans.envelope",
    "node/0036_d_transaction_2_spans.envelope",
    "node/0048_d_transaction_2_spans_static.envelope",
]


def post(client, project_id, key, name):
    body = (FIXTURES / name).read_bytes()
    resp = client.simulate_post(f"/api/{project_id}/envelope/", body=body, headers=sentry_auth(key))
    assert resp.status_code == 200, resp.text
    return resp.json


def issues(state, project_id):
    with state.sessions() as session:
        rows = session.scalars(sa.select(Issue).where(Issue.project_id == project_id))
        return {i.title: i for i in rows}


def test_error_events_are_stored_and_grouped(state, ingest_client, project, clickhouse):
    pid, key = project
    answers = [post(ingest_client, pid, key, name) for name in ERRORS]
    assert answers[0] == {"id": "aacf9e42aa114d73accfed70a6848b69"}
    state.ingest.writer.drain()
    found = issues(state, pid)
    assert {t: i.event_count for t, i in found.items()} == {
        "ZeroDivisionError: division by zero": 1,
        "py capture_message hello": 1,
        "TypeError: node boom: x must not be zero": 1,
        "node capture_message hello": 1,
        "RangeError: unhandled boom from node": 1,
    }
    rows = clickhouse.query_rows(
        "SELECT issue_id, title, culprit, level, platform, trace_id, length(payload) > 0 "
        "FROM events WHERE project_id = {p:UInt64}",
        parameters={"p": pid},
    )
    assert len(rows) == 5
    for issue_id, title, culprit, level, platform, trace_id, has_payload in rows:
        issue = found[title]
        assert issue_id == issue.id and culprit == issue.culprit and level == issue.level
        assert platform in {"python", "node"} and len(trace_id) == 32 and has_payload


def test_an_event_sent_again_is_stored_and_counted_once(state, ingest_client, project, clickhouse):
    """SDKs resend an event whose request seemed to fail; Sentry keeps the first copy."""
    pid, key = project
    # Twice in one batch, then again after that batch is in ClickHouse.
    first = [post(ingest_client, pid, key, ERRORS[0]) for _ in range(2)]
    state.ingest.writer.drain()
    later = post(ingest_client, pid, key, ERRORS[0])
    # The same error raised again: the same issue, its own event id.
    body = (FIXTURES / ERRORS[0]).read_bytes().replace(FIRST_ID.encode(), b"b" * 32)
    resp = ingest_client.simulate_post(f"/api/{pid}/envelope/", body=body, headers=sentry_auth(key))
    assert resp.json == {"id": "b" * 32}
    state.ingest.writer.drain()
    assert first == [later] * 2 == [{"id": FIRST_ID}] * 2
    assert issues(state, pid)["ZeroDivisionError: division by zero"].event_count == 2
    rows = clickhouse.query_rows(
        "SELECT toString(event_id), count() FROM events WHERE project_id = {p:UInt64} "
        "GROUP BY event_id ORDER BY event_id",
        parameters={"p": pid},
    )
    assert [n for _, n in rows] == [1, 1]
    assert [e.replace("-", "") for e, _ in rows] == [FIRST_ID, "b" * 32]


def test_an_event_with_nul_characters_is_grouped_and_does_not_hold_up_the_spool(
    state, ingest_client, project, clickhouse
):
    """PostgreSQL text cannot hold NUL. Such an event once failed the grouping hook on
    every retry, and every segment after it (logs too) waited behind it; its issue now
    shows U+FFFD where the event had NUL, and the event's payload keeps the NUL."""
    pid, key = project
    event = {
        "event_id": "c" * 32,
        "level": "err\u0000or",
        "exception": {
            "values": [
                {
                    "type": "Bad\u0000Error",
                    "value": "nul \u0000 inside",
                    "stacktrace": {"frames": [{"module": "app\u0000", "function": "f"}]},
                }
            ]
        },
    }
    body = b"\n".join(
        [orjson.dumps({"event_id": "c" * 32}), b'{"type":"event"}', orjson.dumps(event)]
    )
    resp = ingest_client.simulate_post(f"/api/{pid}/envelope/", body=body, headers=sentry_auth(key))
    assert resp.status_code == 200, resp.text
    # A log sent after it, in a later segment, is not held up either.
    state.ingest.writer.drain()
    post(ingest_client, pid, key, "python/0001_a_logs_no_span.envelope")
    state.ingest.writer.drain()
    [issue] = issues(state, pid).values()
    assert (issue.title, issue.culprit, issue.level, issue.event_count) == (
        "Bad\ufffdError: nul \ufffd inside",
        "app\ufffd in f",
        "err\ufffdor",
        1,
    )
    [(title, culprit, level, payload)] = clickhouse.query_rows(
        "SELECT title, culprit, level, payload FROM events WHERE project_id = {p:UInt64}",
        parameters={"p": pid},
    )
    assert (title, culprit, level) == (issue.title, issue.culprit, issue.level)
    assert orjson.loads(payload)["exception"]["values"][0]["type"] == "Bad\u0000Error"
    [(logs,)] = clickhouse.query_rows(
        "SELECT count() FROM logs WHERE project_id = {p:UInt64}", parameters={"p": pid}
    )
    assert logs > 0


def test_transactions_and_spans_are_stored_with_parent_links(
    state, ingest_client, project, clickhouse
):
    pid, key = project
    for name in TRACES:
        post(ingest_client, pid, key, name)
    state.ingest.writer.drain()
    rows = clickhouse.query_rows(
        "SELECT trace_id, span_id, parent_span_id, segment_id, is_segment, op, duration_us "
        "FROM spans WHERE project_id = {p:UInt64}",
        parameters={"p": pid},
    )
    assert len(rows) == 9
    by_trace: dict[str, list] = {}
    for row in rows:
        by_trace.setdefault(row[0], []).append(row)
    assert len(by_trace) == 3
    for spans in by_trace.values():
        [root] = [s for s in spans if s[4]]
        children = [s for s in spans if not s[4]]
        assert root[2] == "" and root[5] == "http.server"
        assert [c[2] for c in children] == [root[1], root[1]]
        assert {c[5] for c in children} == {"db.query", "http.client"}
        assert {s[3] for s in spans} == {root[1]}
        assert all(s[6] > 0 for s in spans)


def test_a_replayed_segment_is_counted_and_stored_once(state, ingest_client, project, clickhouse):
    pid, key = project
    post(ingest_client, pid, key, ERRORS[0])
    writer = state.ingest.writer
    writer.spool.seal()
    path = writer.spool.next_sealed(0)
    # The writer died after inserting but before deleting the segment: it is written again.
    writer.write_segment(path)
    writer.write_segment(path)
    writer.spool.done(path)
    [issue] = issues(state, pid).values()
    assert issue.event_count == 1
    [(count,)] = clickhouse.query_rows(
        "SELECT count() FROM events WHERE project_id = {p:UInt64}", parameters={"p": pid}
    )
    assert count == 1


def test_the_payload_column_holds_the_event_exactly_as_sent(
    state, ingest_client, project, clickhouse
):
    """One-line events go into the insert as raw JSON and are read into the String column
    as their text; a body with newlines (a pretty-printed /store/ event) goes as a JSON
    string. Both must store the bytes the SDK sent."""
    pid, key = project
    one_line = (
        b'{"event_id":"' + b"c" * 32 + b'","message":"caf\xc3\xa9 \\"q\\" \\u00e9 \\n",'
        b' "extra": {"n": 1.50, "big": 123456789012345678901234567890, "x": [ ]}}'
    )
    pretty = b'{\n  "event_id": "' + b"d" * 32 + b'",\n  "message": "pretty\\r\\n"\r\n}'
    envelope = b'{"event_id":"' + b"c" * 32 + b'"}\n{"type":"event"}\n' + one_line
    resp = ingest_client.simulate_post(
        f"/api/{pid}/envelope/", body=envelope, headers=sentry_auth(key)
    )
    assert resp.status_code == 200, resp.text
    resp = ingest_client.simulate_post(f"/api/{pid}/store/", body=pretty, headers=sentry_auth(key))
    assert resp.status_code == 200, resp.text
    state.ingest.writer.drain()
    stored = dict(
        clickhouse.query_rows(
            "SELECT replaceAll(toString(event_id), '-', ''), payload FROM events "
            "WHERE project_id = {p:UInt64}",
            parameters={"p": pid},
        )
    )
    assert stored == {"c" * 32: one_line.decode(), "d" * 32: pretty.decode()}


def _transaction_envelope(event_id):
    now = time.time()
    tx = orjson.dumps(
        {
            "type": "transaction",
            "transaction": "t",
            "start_timestamp": now - 1,
            "timestamp": now,
            "contexts": {"trace": {"trace_id": "a" * 32, "span_id": "b" * 16}},
            "spans": [],
        }
    )
    header = orjson.dumps({} if event_id is None else {"event_id": event_id})
    return header + b"\n" + orjson.dumps({"type": "transaction", "length": len(tx)}) + b"\n" + tx


def _span_count(clickhouse, pid):
    query = "SELECT count() FROM spans WHERE project_id = {p:UInt64}"
    return clickhouse.query_rows(query, parameters={"p": pid})[0][0]


def test_a_transaction_is_answered_with_its_id_held_to_an_events_rule(
    state, ingest_client, project, clickhouse
):
    # The header's event_id was echoed as sent for a transaction ("not-an-id <x>" came
    # back), where an event's is refused or answered as 32 lower-case hex (ingest review).
    pid, key = project
    url = f"/api/{pid}/envelope/"
    for bad in ("not-an-id <x>", 7, "a" * 31):
        resp = ingest_client.simulate_post(
            url, body=_transaction_envelope(bad), headers=sentry_auth(key)
        )
        assert resp.status_code == 400, resp.text
        assert resp.json["error"]["message"] == "event_id must be 32 hexadecimal characters"
    store = ingest_client.simulate_post(
        f"/api/{pid}/store/",
        body=orjson.dumps({"type": "transaction", "event_id": "zzz", "timestamp": time.time()}),
        headers=sentry_auth(key),
    )
    assert store.status_code == 400, store.text
    state.ingest.writer.drain()
    assert _span_count(clickhouse, pid) == 0
    dashed = "AACF9E42-AA11-4D73-ACCF-ED70A6848B69"
    resp = ingest_client.simulate_post(
        url, body=_transaction_envelope(dashed), headers=sentry_auth(key)
    )
    assert resp.status_code == 200 and resp.json == {"id": FIRST_ID}
    none = ingest_client.simulate_post(
        url, body=_transaction_envelope(None), headers=sentry_auth(key)
    )
    assert none.status_code == 200 and none.json == {}
    state.ingest.writer.drain()
    assert _span_count(clickhouse, pid) == 2
