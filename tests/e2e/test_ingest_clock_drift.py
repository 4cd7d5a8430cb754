"""Relay's clock drift correction: an envelope whose ``sent_at`` is 55 minutes or more from
its arrival comes from a sender whose clock is off by that much, and every time in it
(events, logs, transactions and their spans) is moved by the difference."""

from __future__ import annotations

import datetime as dt

import orjson
import pytest

from tests.ingest_support import sentry_auth

DAY = 86400.0


def _envelopes(sent_at: float, t: float) -> list[bytes]:
    """An event and a log item, then a transaction (an envelope holds one event or
    transaction), from a sender whose clock reads ``t`` when the server's reads their
    arrival time."""
    iso = dt.datetime.fromtimestamp(sent_at, dt.UTC).isoformat().replace("+00:00", "Z")
    event = {"event_id": "e" * 32, "timestamp": t - 10, "message": "drift"}
    logs = {"version": 2, "items": [{"level": "info", "body": "drifted", "timestamp": t - 5}]}
    transaction = {
        "type": "transaction",
        "event_id": "f" * 32,
        "transaction": "GET /drift",
        "start_timestamp": t - 3,
        "timestamp": t - 1,
        "contexts": {"trace": {"trace_id": "a" * 32, "span_id": "b" * 16, "op": "http"}},
        "spans": [
            {
                "trace_id": "a" * 32,
                "span_id": "c" * 16,
                "parent_span_id": "b" * 16,
                "op": "db",
                "start_timestamp": t - 2.5,
                "timestamp": t - 2,
            }
        ],
    }
    first = [
        {"event_id": "e" * 32, "sent_at": iso},
        {"type": "event"},
        event,
        {"type": "log", "item_count": 1},
        logs,
    ]
    second = [{"event_id": "f" * 32, "sent_at": iso}, {"type": "transaction"}, transaction]
    return [b"\n".join(orjson.dumps(line) for line in lines) for lines in (first, second)]


def _times(clickhouse, pid):
    def one(sql):
        return [row[0].timestamp() for row in clickhouse.query_rows(sql, parameters={"p": pid})]

    return {
        "event": one("SELECT timestamp FROM events WHERE project_id = {p:UInt64}"),
        "log": one("SELECT timestamp FROM logs WHERE project_id = {p:UInt64}"),
        "spans": one(
            "SELECT start_timestamp FROM spans WHERE project_id = {p:UInt64} "
            "ORDER BY start_timestamp"
        ),
    }


@pytest.mark.parametrize(
    ("clock_off_by", "moved"),
    [
        (-DAY, True),  # a day behind: every time a day later
        (3 * 3600.0, True),  # three hours ahead (a time zone mistaken for UTC)
        (-10 * 60.0, False),  # ten minutes: network delay or small drift, left alone
    ],
)
def test_times_are_moved_by_the_senders_clock_drift(
    state, ingest_client, project, clickhouse, clock_off_by, moved
):
    pid, key = project
    now = state.clock().timestamp()
    sender_now = now + clock_off_by
    for body in _envelopes(sender_now, sender_now):
        resp = ingest_client.simulate_post(
            f"/api/{pid}/envelope/", body=body, headers=sentry_auth(key)
        )
        assert resp.status_code == 200, resp.text
    state.ingest.writer.drain()
    base = now if moved else sender_now
    got = _times(clickhouse, pid)
    assert got["event"] == [pytest.approx(base - 10, abs=1e-3)]
    assert got["log"] == [pytest.approx(base - 5, abs=1e-3)]
    # The spans keep their places relative to each other.
    assert got["spans"] == [
        pytest.approx(base - 3, abs=1e-3),
        pytest.approx(base - 2.5, abs=1e-3),
    ]


def test_an_envelope_without_sent_at_is_not_corrected(state, ingest_client, project, clickhouse):
    pid, key = project
    now = state.clock().timestamp()
    body = b"\n".join(
        [
            b"{}",
            b'{"type":"log"}',
            orjson.dumps({"version": 2, "items": [{"body": "x", "timestamp": now - 7200}]}),
        ]
    )
    resp = ingest_client.simulate_post(f"/api/{pid}/envelope/", body=body, headers=sentry_auth(key))
    assert resp.status_code == 200, resp.text
    state.ingest.writer.drain()
    assert _times(clickhouse, pid)["log"] == [pytest.approx(now - 7200, abs=1e-3)]
