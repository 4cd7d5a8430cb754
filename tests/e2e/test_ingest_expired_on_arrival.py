"""Items already past their project's retention when they arrive are dropped at ingest
(counted as ``<type>:too_old``), as Relay drops events too old for their retention.

Until the nineteenth session such an event was accepted and grouped (an issue created,
or counted, moved back in first_seen and reopened) and then expired by ClickHouse's TTL
within a second of its insert: an issue with no event to show. Real HTTP ingest, spool,
writer and grouping hook, on chDB and the relational store under test.
"""

from __future__ import annotations

import orjson
import pytest
import sqlalchemy as sa

from errortrack.ingest import items
from errortrack.issues import service as issues_service
from errortrack.models import Issue
from tests.ingest_support import make_project, sentry_auth

DAY = 86400.0


def _event(message: str, at: float, event_id: str) -> list[dict]:
    return [{"type": "event"}, {"event_id": event_id, "timestamp": at, "message": message}]


def _transaction(at: float, event_id: str) -> list[dict]:
    return [
        {"type": "transaction"},
        {
            "type": "transaction",
            "event_id": event_id,
            "transaction": "GET /old",
            "start_timestamp": at - 2,
            "timestamp": at,
            "contexts": {"trace": {"trace_id": "a" * 32, "span_id": "b" * 16, "op": "http"}},
            "spans": [
                {
                    "trace_id": "a" * 32,
                    "span_id": "c" * 16,
                    "parent_span_id": "b" * 16,
                    "op": "db",
                    "start_timestamp": at - 1.5,
                    "timestamp": at - 1,
                }
            ],
        },
    ]


def _logs(*stamped: tuple[str, float]) -> list[dict]:
    logs = [{"level": "info", "body": body, "timestamp": at} for body, at in stamped]
    return [{"type": "log", "item_count": len(logs)}, {"version": 2, "items": logs}]


def _post(client, pid, key, *items_, event_id=None):
    header = {"event_id": event_id} if event_id else {}
    lines = [header] + [line for item in items_ for line in item]
    body = b"\n".join(orjson.dumps(line) for line in lines)
    resp = client.simulate_post(f"/api/{pid}/envelope/", body=body, headers=sentry_auth(key))
    assert resp.status_code == 200, resp.text
    return resp.json


def _issues(state, pid):
    with state.sessions() as s:
        found = s.scalars(sa.select(Issue).where(Issue.project_id == pid)).all()
        return {i.title: (i.status, i.event_count, i.first_seen.timestamp()) for i in found}


def _count(clickhouse, table, pid):
    sql = f"SELECT count() FROM {table} WHERE project_id = {{p:UInt64}}"
    return clickhouse.query_rows(sql, parameters={"p": pid})[0][0]


def _dropped_since(before: dict[str, int]) -> dict[str, int]:
    now = items.DROPPED.snapshot()
    return {k: n - before.get(k, 0) for k, n in now.items() if n != before.get(k, 0)}


@pytest.fixture
def short(state):
    """A project keeping its data 7 days."""
    with state.sessions() as s:
        return make_project(s, "short", retention_days=7)


def test_an_event_past_its_retention_is_dropped_and_makes_no_issue(
    state, ingest_client, short, clickhouse
):
    pid, key = short
    now = state.clock().timestamp()
    before = items.DROPPED.snapshot()
    answer = _post(
        ingest_client, pid, key, _event("ten days old boom", now - 10 * DAY, "a" * 32),
        event_id="a" * 32,
    )  # fmt: skip
    # As for a rate-limited event: the id is only given back for an event that is kept.
    assert answer == {}
    kept = _post(
        ingest_client, pid, key, _event("an hour old boom", now - 3600, "b" * 32),
        event_id="b" * 32,
    )  # fmt: skip
    assert kept == {"id": "b" * 32}
    state.ingest.writer.drain()
    assert set(_issues(state, pid)) == {"an hour old boom"}
    assert _count(clickhouse, "events", pid) == 1
    assert _dropped_since(before) == {"event:too_old": 1}


def test_an_expired_event_neither_counts_nor_reopens_nor_moves_first_seen(
    state, ingest_client, short, clickhouse
):
    pid, key = short
    now = state.clock().timestamp()
    _post(ingest_client, pid, key, _event("boom", now - 3600, "c" * 32))
    state.ingest.writer.drain()
    with state.sessions() as s:
        issue_id = s.scalar(sa.select(Issue.id).where(Issue.project_id == pid))
        issues_service.resolve(s, project_id=pid, issue_id=issue_id)
        s.commit()
    before = _issues(state, pid)
    assert before["boom"][:2] == ("resolved", 1)
    _post(ingest_client, pid, key, _event("boom", now - 10 * DAY, "d" * 32))
    state.ingest.writer.drain()
    assert _issues(state, pid) == before
    assert _count(clickhouse, "events", pid) == 1


def test_an_event_within_its_retention_is_kept_however_old(
    state, ingest_client, project, clickhouse
):
    """The default retention (90 days) keeps everything the 30-day clock window lets in."""
    pid, key = project
    now = state.clock().timestamp()
    answer = _post(ingest_client, pid, key, _event("old but kept", now - 29 * DAY, "e" * 32))
    assert answer == {"id": "e" * 32}
    state.ingest.writer.drain()
    assert _issues(state, pid)["old but kept"][1] == 1
    assert _count(clickhouse, "events", pid) == 1


def test_transactions_and_logs_past_retention_are_dropped_too(
    state, ingest_client, short, clickhouse
):
    pid, key = short
    now = state.clock().timestamp()
    before = items.DROPPED.snapshot()
    answer = _post(
        ingest_client, pid, key,
        _transaction(now - 10 * DAY, "f" * 32),
        _logs(("expired", now - 10 * DAY), ("fresh", now - 5), ("also expired", now - 8 * DAY)),
        event_id="f" * 32,
    )  # fmt: skip
    assert answer == {}  # the transaction was dropped: no id to give back
    state.ingest.writer.drain()
    assert _count(clickhouse, "spans", pid) == 0
    assert [r[0] for r in clickhouse.query_rows("SELECT body FROM logs")] == ["fresh"]
    assert _dropped_since(before) == {"transaction:too_old": 1, "log:too_old": 1}
    # A log within its retention (6 days back of 7) stays, as does a fresh transaction.
    _post(ingest_client, pid, key, _logs(("six days", now - 6 * DAY)), _transaction(now, "1" * 32))
    state.ingest.writer.drain()
    assert _count(clickhouse, "logs", pid) == 2
    assert _count(clickhouse, "spans", pid) == 2


def test_an_envelope_of_only_expired_items_is_a_200_and_stores_nothing(
    state, ingest_client, short, clickhouse
):
    pid, key = short
    now = state.clock().timestamp()
    before = items.DROPPED.snapshot()
    answer = _post(ingest_client, pid, key, _logs(("expired", now - 10 * DAY)))
    assert answer == {}
    assert _dropped_since(before) == {"log:too_old": 1}
    state.ingest.writer.drain()
    assert _count(clickhouse, "logs", pid) == 0


def test_a_store_body_past_its_retention_is_dropped(state, ingest_client, short, clickhouse):
    pid, key = short
    now = state.clock().timestamp()
    body = orjson.dumps({"event_id": "9" * 32, "timestamp": now - 10 * DAY, "message": "old"})
    resp = ingest_client.simulate_post(f"/api/{pid}/store/", body=body, headers=sentry_auth(key))
    assert resp.status_code == 200, resp.text
    assert resp.json == {}
    state.ingest.writer.drain()
    assert _issues(state, pid) == {}


def test_a_transaction_whose_root_is_past_retention_goes_whole(
    state, ingest_client, short, clickhouse
):
    # Judged span by span, the root (started just before the limit) went and its child
    # (started after it) was stored: a span whose parent and segment never exist.
    pid, key = short
    limit = int(state.clock().timestamp()) - 7 * DAY + 1
    straddling = _transaction(limit + 3, "f" * 32)
    straddling[1]["start_timestamp"] = limit - 2
    straddling[1]["spans"][0]["start_timestamp"] = limit + 1
    before = items.DROPPED.snapshot()
    assert _post(ingest_client, pid, key, straddling, event_id="f" * 32) == {}
    state.ingest.writer.drain()
    assert _count(clickhouse, "spans", pid) == 0
    assert _dropped_since(before) == {"transaction:too_old": 1}


def test_an_expired_error_beside_rate_limited_logs_is_a_200_naming_the_limit(
    state, short, clickhouse
):
    # Nothing left to store after the limit, but the envelope was processed: a 429 here
    # made the SDK file the (expired) error as rate-limited, and the drop went uncounted.
    import dataclasses

    import falcon.testing

    from errortrack.server import create_server_app
    from errortrack.state import AppState

    limited = dataclasses.replace(state.settings, rate_limit_per_second=3)
    st = AppState.build(limited, engine=state.engine, clickhouse=clickhouse, clock=state.clock)
    client = falcon.testing.TestClient(create_server_app(state=st))
    pid, key = short
    now = state.clock().timestamp()
    _post(client, pid, key, _logs(*[(f"fill {i}", now) for i in range(30)]))
    before = items.DROPPED.snapshot()
    resp = client.simulate_post(
        f"/api/{pid}/envelope/",
        body=b"\n".join(
            orjson.dumps(line)
            for line in [{}, *_event("old", now - 10 * DAY, "a" * 32), *_logs(("late", now))]
        ),
        headers=sentry_auth(key),
    )
    assert resp.status_code == 200, resp.text
    assert resp.json == {}
    assert resp.headers["X-Sentry-Rate-Limits"].endswith(":log_item:project:rate_limited")
    assert _dropped_since(before) == {"event:too_old": 1, "log:rate_limited": 1}
    st.ingest.writer.drain()
    st.ingest.writer.spool.close()
