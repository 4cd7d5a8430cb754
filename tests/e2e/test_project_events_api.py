"""A project's events of every issue (by trace, environment, release; paged) and one
event by id without its issue (in-process app as served; events sent as SDK envelopes
through real ingest, the writer and its grouping hook into chDB and SQLite/Postgres)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from errortrack import db
from errortrack.projects.service import create_project
from tests.ingest_support import send_events

T1, T2 = "a1" * 16, "b2" * 16


# Event times a little before the test's start: ingest moves a time far from the arrival.
START = time.time() - 1000


def _event(value: str, at: int, *, trace: str | None = None, **extra: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "event_id": uuid.uuid4().hex,
        "timestamp": START + at,
        "platform": "python",
        "level": "error",
        "exception": {"values": [{"type": "KeyError", "value": value}]},
        **extra,
    }
    if trace:
        event["contexts"] = {"trace": {"trace_id": trace, "span_id": "c" * 16}}
    return event


def _get(world: Any, path: str, query: str = "", caller: str = "viewer") -> Any:
    return world.client.simulate_get(path, query_string=query, headers=world.headers(caller))


def _values(resp: Any) -> list[str]:
    assert resp.status_code == 200, resp.text
    return [item["payload"]["exception"]["values"][0]["value"] for item in resp.json["items"]]


def test_a_trace_s_events_of_every_issue_page_newest_first(ingest_world):
    w = ingest_world
    with db.unit_of_work(w.state.sessions) as s:
        other = create_project(s, name="other").id
    # 120 events in one trace, over three issues (past the trace view's cap of 100).
    in_trace = [_event(f"k{i % 3}", i, trace=T1) for i in range(120)]
    send_events(w, w.project_id, in_trace)
    send_events(w, w.project_id, [_event("k0", 500, trace=T2), _event("k1", 501)])
    send_events(w, other, [_event("k0", 502, trace=T1)])
    path = f"/api/projects/{w.project_id}/events"

    first = _get(w, path, f"trace_id={T1}&per_page=50")
    assert first.json["total_count"] == 120
    assert len({item["issue_id"] for item in first.json["items"]}) == 3
    seen = [item["event_id"] for item in first.json["items"]]
    for page in (2, 3):
        resp = _get(w, path, f"trace_id={T1}&per_page=50&page={page}")
        assert resp.status_code == 200
        seen += [item["event_id"] for item in resp.json["items"]]
    # Every event of the trace once, newest first, none of the other trace or project.
    assert seen == [e["event_id"] for e in reversed(in_trace)]
    assert all(item["trace_id"] == T1 for item in first.json["items"])
    # A UUID with dashes, in capitals, names the same trace.
    dashed = str(uuid.UUID(T1)).upper()
    assert _get(w, path, f"trace_id={dashed}&per_page=1").json["total_count"] == 120
    # Without a trace: the project's every event.
    assert _get(w, path, "per_page=1").json["total_count"] == 122
    # The trace view says it shows only the first 100; this list has the rest.
    story = _get(w, f"/api/projects/{w.project_id}/traces/{T1}")
    assert len(story.json["events"]) == 100 and story.json["truncated"]["events"] is True


def test_environment_and_release_narrow_the_list(ingest_world):
    w = ingest_world
    send_events(
        w,
        w.project_id,
        [
            _event("p", 1, trace=T1, environment="production", release="1.0"),
            _event("s", 2, trace=T1, environment="staging", release="1.0"),
            _event("q", 3, environment="production", release="2.0"),
        ],
    )
    path = f"/api/projects/{w.project_id}/events"
    assert _values(_get(w, path, "environment=production")) == ["q", "p"]
    assert _values(_get(w, path, f"environment=production&trace_id={T1}")) == ["p"]
    assert _values(_get(w, path, "release=1.0,2.0&environment=staging")) == ["s"]


def test_bad_filters_are_400s_naming_the_field(ingest_world):
    w = ingest_world
    path = f"/api/projects/{w.project_id}/events"
    for query, field in (
        ("trace_id=xyz", "trace_id"),
        ("trace_id=" + "a" * 33, "trace_id"),
        ("environment=", "environment"),
        ("per_page=0", "per_page"),
        ("issue=1", "issue"),
    ):
        resp = _get(w, path, query)
        assert resp.status_code == 400, (query, resp.text)
        assert resp.json["error"]["field"] == field, (query, resp.json)


def test_one_event_by_id_without_its_issue(ingest_world):
    w = ingest_world
    with db.unit_of_work(w.state.sessions) as s:
        other = create_project(s, name="other").id
    mine, theirs = _event("mine", 1, trace=T1), _event("theirs", 2)
    send_events(w, w.project_id, [mine, _event("else", 3)])
    send_events(w, other, [theirs])
    path = f"/api/projects/{w.project_id}/events"

    resp = _get(w, f"{path}/{mine['event_id']}")
    assert resp.status_code == 200, resp.text
    assert resp.json["event_id"] == mine["event_id"]
    assert resp.json["payload"]["exception"]["values"][0]["value"] == "mine"
    issue = _get(w, f"/api/projects/{w.project_id}/issues/{resp.json['issue_id']}")
    assert issue.status_code == 200 and issue.json["title"] == "KeyError: mine"
    # The UUID form names it too; another project's event is not found here.
    assert _get(w, f"{path}/{uuid.UUID(mine['event_id'])}").status_code == 200
    assert _get(w, f"{path}/{theirs['event_id']}").status_code == 404
    assert _get(w, f"{path}/{uuid.uuid4().hex}").status_code == 404
    bad = _get(w, f"{path}/not-an-id")
    assert bad.status_code == 400 and bad.json["error"]["field"] == "event_id"
    # Once its issue is deleted, its events are gone as far as the API says, even while
    # ClickHouse's delete of them has not run yet (the API only schedules it).
    issue_path = f"/api/projects/{w.project_id}/issues/{resp.json['issue_id']}"
    assert w.client.simulate_delete(issue_path, headers=w.headers("editor")).status_code == 204
    gone = _get(w, f"{path}/{mine['event_id']}")
    assert gone.status_code == 404 and gone.json["error"]["message"] == "event not found"


def test_payload_lists_take_at_most_100_per_page(ingest_world):
    """Each item carries its event's whole payload (up to 1 MiB): a page of 1000 was a
    910 MiB answer that cost the worker 2.5 GB, and a few at once got it killed (review,
    twenty-fourth session). The logs, issues and spans lists keep 1000."""
    w = ingest_world
    send_events(w, w.project_id, [_event("only", 1)])
    (issue,) = _get(w, f"/api/projects/{w.project_id}/issues", "").json["items"]
    for path in (
        f"/api/projects/{w.project_id}/events",
        f"/api/projects/{w.project_id}/issues/{issue['id']}/events",
    ):
        assert _get(w, path, "per_page=100").status_code == 200
        resp = _get(w, path, "per_page=101")
        assert resp.status_code == 400, resp.text
        assert resp.json["error"]["field"] == "per_page"
    assert _get(w, f"/api/projects/{w.project_id}/logs", "per_page=1000").status_code == 200


def test_pages_of_events_stop_at_their_byte_budget(ingest_world, monkeypatch):
    """100 payloads of up to 1 MiB are still 100 MiB: a page ends once its payloads pass
    the byte budget (32 MiB; two or so events' worth here) and goes on by its cursor."""
    from errortrack import paging

    w = ingest_world
    sent = [_event("same bug", i, extra={"x": "y" * 300}) for i in range(8)]
    send_events(w, w.project_id, sent)
    monkeypatch.setattr(paging, "PAGE_BYTES", 1000)
    (issue,) = _get(w, f"/api/projects/{w.project_id}/issues", "").json["items"]
    for path in (
        f"/api/projects/{w.project_id}/events",
        f"/api/projects/{w.project_id}/issues/{issue['id']}/events",
    ):
        body = _get(w, path, "per_page=100").json
        assert 1 <= len(body["items"]) < 8 and body["next_cursor"], body
        seen = [item["event_id"] for item in body["items"]]
        while body["next_cursor"]:
            body = _get(w, path, f"per_page=100&cursor={body['next_cursor']}").json
            assert body["items"]
            seen += [item["event_id"] for item in body["items"]]
        assert seen == [e["event_id"] for e in reversed(sent)]


def test_an_unknown_query_parameter_on_one_event_is_400_for_every_caller(ingest_world):
    # As on every endpoint without query parameters (docs/API.md): the 400 comes before
    # credentials and ids; these two checked the project and the issue first (review).
    from errortrack.models import Issue

    w = ingest_world
    with db.unit_of_work(w.state.sessions) as s:
        issue = Issue(
            project_id=w.project_id,
            fingerprint="f" * 32,
            title="t",
            culprit="",
            level="error",
            status="unresolved",
            first_seen=w.state.clock(),
            last_seen=w.state.clock(),
            event_count=0,
        )
        s.add(issue)
        s.flush()
        issue_id = issue.id
    p = w.project_id
    for path in (
        f"/api/projects/{p}/events/{'0' * 32}",
        f"/api/projects/{p}/issues/{issue_id}/events/{'0' * 32}",
        f"/api/projects/{p + 1000}/events/{'0' * 32}",
    ):
        for caller in ("anonymous", "outsider", "viewer"):
            resp = _get(w, path, "x=1", caller)
            assert resp.status_code == 400, (path, caller, resp.text)
            assert resp.json["error"]["field"] == "x"
