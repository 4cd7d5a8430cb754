"""A lone UTF-16 surrogate in an SDK's JSON (a file name decoded with surrogateescape,
@sentry/node cutting an emoji in half) is stored as U+FFFD: the item, and the rest of
its batch, are no longer refused (a 400 lost every log of the batch before)."""

from __future__ import annotations

import time
import uuid

from sentry_sdk.envelope import Envelope, Item, PayloadRef

from tests.ingest_support import sentry_auth

NAME = b"report-\xe9.csv".decode("utf-8", "surrogateescape")  # holds "\udce9"


def _send(client, project, envelope: Envelope):
    project_id, key = project
    return client.simulate_post(
        f"/api/{project_id}/envelope/", body=envelope.serialize(), headers=sentry_auth(key)
    )


def test_logs_events_and_transactions_with_lone_surrogates_are_stored(
    ingest_client, project, state
):
    now = time.time()
    event_id, trace_id = uuid.uuid4().hex, uuid.uuid4().hex
    logs = [
        {"timestamp": now, "level": "info", "body": f"row {i} ok", "trace_id": trace_id}
        for i in range(50)
    ]
    logs.append(
        {
            "timestamp": now,
            "level": "warn",
            "body": f"cannot open {NAME}",
            "trace_id": trace_id,
            "attributes": {"file": {"value": NAME, "type": "string"}},
        }
    )
    # Serialised by the SDK's own envelope code (json.dumps), as it sends them.
    envelope = Envelope(headers={"event_id": event_id})
    envelope.add_item(Item(payload=PayloadRef(json={"items": logs}), type="log"))
    envelope.add_item(
        Item(
            payload=PayloadRef(
                json={
                    "event_id": event_id,
                    "timestamp": now,
                    "platform": "python",
                    "message": f"cannot open {NAME}",
                    "level": "error",
                }
            ),
            type="event",
        )
    )
    assert b"\\udce9" in envelope.serialize()
    resp = _send(ingest_client, project, envelope)
    assert resp.status_code == 200, resp.text
    assert resp.json == {"id": event_id}
    # The transaction in an envelope of its own, as SDKs send one.
    envelope = Envelope(headers={})
    envelope.add_item(
        Item(
            payload=PayloadRef(
                json={
                    "type": "transaction",
                    "transaction": f"GET /{NAME}",
                    "start_timestamp": now - 1,
                    "timestamp": now,
                    "contexts": {
                        "trace": {"trace_id": trace_id, "span_id": "a" * 16, "op": "http"}
                    },
                    "spans": [],
                }
            ),
            type="transaction",
        )
    )
    assert b"\\udce9" in envelope.serialize()
    assert _send(ingest_client, project, envelope).status_code == 200
    state.ingest.writer.drain()
    bodies = {
        row[0]
        for row in state.clickhouse.query_rows(
            "SELECT body FROM logs WHERE project_id = {p:UInt64}", {"p": project[0]}
        )
    }
    assert bodies == {f"row {i} ok" for i in range(50)} | {"cannot open report-\ufffd.csv"}
    (attrs,) = state.clickhouse.query_rows(
        "SELECT attributes FROM logs WHERE body LIKE 'cannot open%'"
    )[0]
    assert "\\ufffd" in attrs or "\ufffd" in attrs
    (payload,) = state.clickhouse.query_rows(
        "SELECT payload FROM events WHERE event_id = {e:UUID}", {"e": event_id}
    )[0]
    assert "\\udce9" not in payload
    (name,) = state.clickhouse.query_rows(
        "SELECT description FROM spans WHERE trace_id = {t:String} AND is_segment",
        {"t": trace_id},
    )[0]
    assert "\ufffd" in name


def test_lone_surrogates_in_envelope_and_item_headers(ingest_client, project, state):
    # sentry-sdk copies a transaction's name into the envelope header's trace context,
    # and an attachment's file name into its item header: each refused the envelope.
    now = time.time()
    event_id = uuid.uuid4().hex
    envelope = Envelope(
        headers={
            "event_id": event_id,
            "trace": {"trace_id": uuid.uuid4().hex, "transaction": f"process {NAME}"},
        }
    )
    envelope.add_item(
        Item(
            payload=PayloadRef(
                json={"event_id": event_id, "timestamp": now, "message": "boom", "level": "error"}
            ),
            type="event",
        )
    )
    envelope.add_item(Item(payload=PayloadRef(bytes=b"data"), type="attachment", filename=NAME))
    sent = envelope.serialize()
    assert sent.split(b"\n")[0].count(b"\\udce9") == 1  # in the envelope header
    resp = _send(ingest_client, project, envelope)
    assert resp.status_code == 200, resp.text
    assert resp.json == {"id": event_id}
    state.ingest.writer.drain()
    assert (
        state.clickhouse.query_rows(
            "SELECT count() FROM events WHERE event_id = {e:UUID}", {"e": event_id}
        )[0][0]
        == 1
    )


def test_the_store_endpoint_repairs_too(ingest_client, project, state):
    event_id = uuid.uuid4().hex
    event = f'"event_id": "{event_id}", "timestamp": {time.time()}, "message": "x \\ud800 y"'
    body = ("{" + event + "}").encode()
    project_id, key = project
    resp = ingest_client.simulate_post(
        f"/api/{project_id}/store/", body=body, headers=sentry_auth(key)
    )
    assert resp.status_code == 200, resp.text
    state.ingest.writer.drain()
    (payload,) = state.clickhouse.query_rows(
        "SELECT payload FROM events WHERE event_id = {e:UUID}", {"e": event_id}
    )[0]
    assert "\\ufffd" in payload


def test_invalid_json_is_still_a_400(ingest_client, project):
    envelope = b'{}\n{"type": "log"}\n{"items": [{"body": "\\ud800", }]}\n'
    project_id, key = project
    resp = ingest_client.simulate_post(
        f"/api/{project_id}/envelope/", body=envelope, headers=sentry_auth(key)
    )
    assert resp.status_code == 400
    assert set(resp.json) == {"error"}


def test_a_request_repairs_at_most_max_repair_bytes_in_all(ingest_client, project, state):
    # MAX_REPAIR held each payload alone: eight item headers of 2 MiB of lone halves
    # (24 KiB gzipped, no key needed: a header is read before the envelope's dsn) took
    # 1.3 s of the event loop, as the one 20 MB payload the cap was made for (DoS
    # review, thirtieth session). The request as a whole now gets MAX_REPAIR.
    from errortrack.ingest.surrogates import MAX_REPAIR

    project_id, key = project

    def log_item(size: int) -> bytes:
        head = b'{"items":[{"level":"info","body":"'
        tail = b'","timestamp":' + str(time.time()).encode() + b"}]}"
        filler = b"\\ud800" * ((size - len(head) - len(tail)) // 6)
        payload = head + filler + tail
        return b'{"type":"log","length":%d}\n' % len(payload) + payload + b"\n"

    half = MAX_REPAIR // 2 - 100
    post = lambda body: ingest_client.simulate_post(  # noqa: E731
        f"/api/{project_id}/envelope/", body=body, headers=sentry_auth(key)
    )
    # Two items of just under half the budget each: both repaired and stored.
    assert post(b"{}\n" + log_item(half) + log_item(half)).status_code == 200
    # Three: the third is past the request's budget and refused as sent (a 400).
    resp = post(b"{}\n" + log_item(half) * 3)
    assert resp.status_code == 400, resp.text
    assert resp.json["error"]["message"].startswith("item 3 (log): ")
    # The next request has its budget again.
    assert post(b"{}\n" + log_item(half)).status_code == 200
    state.ingest.writer.drain()
    assert state.clickhouse.query_rows("SELECT count() FROM logs")[0][0] == 3
