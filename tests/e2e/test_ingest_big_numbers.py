"""Integers beyond a double or 64 bits anywhere in an event or a /store/ transaction:
the event is stored (payload exactly as sent) and grouped, never a 400 or a 500."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.ingest_support import sentry_auth

HUGE = "1" + "0" * 400  # beyond a double: orjson refuses it
WIDE = str(2**70)  # beyond 64 bits: orjson reads it as a double

PLACES = {
    "extra": '"extra": {"n": %s}',
    "tags": '"tags": {"n": %s}',
    "tag_pairs": '"tags": [["n", %s]]',
    "user_id": '"user": {"id": %s}',
    "fingerprint": '"fingerprint": [%s]',
    "exception_value": '"exception": {"values": [{"type": "E", "value": %s}]}',
    "message": '"message": %s',
    "logentry_params": '"logentry": {"message": "n=%%s", "params": [%s]}',
    "level": '"level": %s',
    "release": '"release": %s',
    "environment": '"environment": %s',
    "timestamp": '"timestamp": %s',
    "trace_id": '"contexts": {"trace": {"trace_id": %s, "span_id": %s}}',
}


def _event(place: str, number: str) -> tuple[str, bytes]:
    event_id = uuid.uuid4().hex
    field = PLACES[place].replace("%s", number).replace("%%", "%")
    body = (
        f'{{"event_id": "{event_id}", "platform": "python", "timestamp": {time.time()}, '
        f'"exception": {{"values": [{{"type": "Boom", "value": "x"}}]}}, {field}}}'
    )
    # A later key wins in every JSON reader used here, so the field may override a default.
    return event_id, body.encode()


@pytest.mark.parametrize("number", [HUGE, WIDE], ids=["beyond_double", "beyond_64_bits"])
@pytest.mark.parametrize("place", sorted(PLACES))
@pytest.mark.parametrize("route", ["envelope", "store"])
def test_an_event_with_a_huge_integer_is_stored(
    ingest_client, project, state, place, number, route
):
    event_id, payload = _event(place, number)
    project_id, key = project
    headers = sentry_auth(key)
    if route == "store":
        resp = ingest_client.simulate_post(
            f"/api/{project_id}/store/", body=payload, headers=headers
        )
    else:
        item = b'{"type": "event", "length": %d}' % len(payload)
        body = b"\n".join([b'{"event_id": "%s"}' % event_id.encode(), item, payload])
        resp = ingest_client.simulate_post(
            f"/api/{project_id}/envelope/", body=body, headers=headers
        )
    assert resp.status_code == 200, resp.text
    state.ingest.writer.drain()
    rows = state.clickhouse.query_rows(
        "SELECT payload, issue_id FROM events WHERE event_id = {id:UUID}", {"id": event_id}
    )
    assert len(rows) == 1
    stored, issue_id = rows[0]
    assert number in stored and issue_id > 0


def test_a_store_transaction_keeps_integers_beyond_64_bits(ingest_client, project, state):
    trace_id = uuid.uuid4().hex
    now = time.time()
    payload = (
        f'{{"type": "transaction", "transaction": "GET /", "start_timestamp": {now - 1}, '
        f'"timestamp": {now}, "contexts": {{"trace": {{"trace_id": "{trace_id}", '
        f'"span_id": "{"a" * 16}", "op": "http"}}}}, "tags": {{"wide": {WIDE}}}, '
        f'"spans": [{{"span_id": "{"b" * 16}", "parent_span_id": "{"a" * 16}", '
        f'"trace_id": "{trace_id}", "start_timestamp": {now - 1}, "timestamp": {now}, '
        f'"data": {{"wide": {WIDE}}}}}]}}'
    ).encode()
    project_id, key = project
    resp = ingest_client.simulate_post(
        f"/api/{project_id}/store/", body=payload, headers=sentry_auth(key)
    )
    assert resp.status_code == 200, resp.text
    state.ingest.writer.drain()
    rows = state.clickhouse.query_rows(
        "SELECT attributes FROM spans WHERE trace_id = {t:String} ORDER BY is_segment",
        {"t": trace_id},
    )
    assert len(rows) == 2
    # Its digits, not 1.1805916207174113e21.
    assert all(WIDE in attributes for (attributes,) in rows), rows
