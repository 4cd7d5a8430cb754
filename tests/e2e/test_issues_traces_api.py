"""Issues and traces over HTTP (in-process app, real SQLite/Postgres and chDB)."""

from __future__ import annotations

import time

import pytest
from clickhouse_connect.driver.exceptions import OperationalError

from errortrack.api.schemas.issues import EventSummaryOut, IssueOut
from errortrack.api.schemas.traces import TraceOut
from tests.access_world import build_world
from tests.issue_data import add_event, add_issue, add_span, insert_rows, plain_span
from tests.logs_data import BASE, insert_logs, log_rows, sdk_log

T = "ab" * 16


@pytest.fixture
def world(state, client):
    return build_world(state, client)


def _get(world, caller, path, query=""):
    return world.client.simulate_get(path, query_string=query, headers=world.headers(caller))


def _post(world, caller, path):
    return world.client.simulate_post(path, headers=world.headers(caller))


def test_issue_list_sorted_filtered_paginated(world):
    p = world.project_id
    old = add_issue(world.state, p, "old", seen=(0, 10), status="resolved", count=3)
    new = add_issue(world.state, p, "new", seen=(5, 50), count=7)
    mid = add_issue(world.state, p, "mid", seen=(1, 20), status="muted")
    add_issue(world.state, world.add_project(), "elsewhere", seen=(0, 99))
    page = _get(world, "viewer", f"/api/projects/{p}/issues").json
    assert [i["id"] for i in page["items"]] == [new, mid, old]
    assert (page["total_count"], page["total_pages"], page["per_page"]) == (3, 1, 50)
    first = page["items"][0]
    assert first == {
        "id": new,
        "project_id": p,
        "title": "new",
        "culprit": "app.py",
        "level": "error",
        "status": "unresolved",
        "count": 7,
        "first_seen": "2026-11-01T12:00:05.000000Z",
        "last_seen": "2026-11-01T12:00:50.000000Z",
        "fingerprint": first["fingerprint"],
        "user_count": 0,  # no event stored
    }
    assert IssueOut().validate(first) == {}
    only = _get(world, "viewer", f"/api/projects/{p}/issues", "status=resolved,muted").json
    assert [i["id"] for i in only["items"]] == [mid, old]
    two = _get(world, "viewer", f"/api/projects/{p}/issues", "per_page=2&page=2").json
    assert [i["id"] for i in two["items"]] == [old] and two["total_pages"] == 2
    by_count = _get(world, "viewer", f"/api/projects/{p}/issues", "sort=-count").json
    assert by_count["items"][0]["id"] == new
    bad = _get(world, "viewer", f"/api/projects/{p}/issues", "status=open")
    assert bad.status_code == 400 and bad.json["error"]["field"] == "status"
    assert _get(world, "outsider", f"/api/projects/{p}/issues").status_code == 404


def test_one_issue_and_its_events_newest_first(world):
    p = world.project_id
    issue = add_issue(world.state, p, "boom")
    sent = [add_event(world.state, p, issue, at=i, message=f"boom {i}") for i in range(3)]
    assert _get(world, "viewer", f"/api/projects/{p}/issues/{issue}").json["title"] == "boom"
    page = _get(world, "viewer", f"/api/projects/{p}/issues/{issue}/events").json
    assert page["total_count"] == 3
    assert [e["event_id"] for e in page["items"]] == [e["event_id"] for e in reversed(sent)]
    newest = page["items"][0]
    assert newest["payload"] == sent[2]
    assert newest["timestamp"] == "2026-11-01T12:00:02.000000Z"
    assert EventSummaryOut().validate({k: v for k, v in newest.items() if k != "payload"}) == {}
    one = _get(
        world, "viewer", f"/api/projects/{p}/issues/{issue}/events", "per_page=1&page=3"
    ).json
    assert [e["event_id"] for e in one["items"]] == [sent[0]["event_id"]]
    other = add_issue(world.state, world.add_project(), "not here")
    assert _get(world, "viewer", f"/api/projects/{p}/issues/{other}").status_code == 404
    assert _get(world, "viewer", f"/api/projects/{p}/issues/{other}/events").status_code == 404
    assert _get(world, "viewer", f"/api/projects/{p}/issues/999999").status_code == 404


@pytest.mark.parametrize(
    ("action", "status"), [("resolve", "resolved"), ("mute", "muted"), ("unresolve", "unresolved")]
)
def test_status_changes_need_editor(world, action, status):
    p = world.project_id
    start = "muted" if action == "unresolve" else "unresolved"
    issue = add_issue(world.state, p, "boom", status=start)
    path = f"/api/projects/{p}/issues/{issue}/{action}"
    refused = _post(world, "viewer", path)
    assert refused.status_code == 403 and refused.json["error"]["code"] == "forbidden"
    assert _get(world, "viewer", f"/api/projects/{p}/issues/{issue}").json["status"] == start
    done = _post(world, "editor", path)
    assert done.status_code == 200 and done.json["status"] == status
    assert _get(world, "viewer", f"/api/projects/{p}/issues/{issue}").json["status"] == status
    assert _post(world, "outsider", path).status_code == 404
    assert _post(world, "editor", f"/api/projects/{p}/issues/999999/{action}").status_code == 404


def test_delete_removes_issue_and_events(world):
    p = world.project_id
    issue = add_issue(world.state, p, "boom")
    keep = add_issue(world.state, p, "other")
    for i in range(2):
        add_event(world.state, p, issue, at=i)
    add_event(world.state, p, keep, at=5)
    path = f"/api/projects/{p}/issues/{issue}"
    assert world.client.simulate_delete(path, headers=world.headers("viewer")).status_code == 403
    assert _get(world, "viewer", f"{path}/events").json["total_count"] == 2
    gone = world.client.simulate_delete(path, headers=world.headers("editor"))
    assert gone.status_code == 204 and not gone.content
    assert _get(world, "viewer", path).status_code == 404
    # The API only schedules the events' delete (lightweight_deletes_sync = 0): they go
    # within the mutation's time, and only the deleted issue's.
    deadline = time.monotonic() + 20
    while True:
        left = world.state.clickhouse.query_rows(
            "SELECT issue_id, count() FROM events GROUP BY issue_id ORDER BY issue_id"
        )
        if left == [(keep, 1)] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert left == [(keep, 1)]


def test_an_issue_whose_events_cannot_be_deleted_a_second_time_is_still_deleted(
    world, monkeypatch, caplog
):
    """The API deletes an issue's events, commits the issue's delete, then deletes the
    events once more (for a batch inserted in between). A ClickHouse that refused that
    last DELETE made the answer a 503 for an issue already gone: the retry the 503 asks
    for was a 404."""
    p = world.project_id
    issue = add_issue(world.state, p, "boom")
    add_event(world.state, p, issue, at=0)
    store = world.state.api_clickhouse
    command = store.command
    deletes: list[str] = []

    def second_delete_refused(sql, *args, **kwargs):
        if sql.startswith("DELETE FROM events"):
            deletes.append(sql)
            if len(deletes) == 2:
                raise OperationalError("connection reset by peer")
        return command(sql, *args, **kwargs)

    monkeypatch.setattr(store, "command", second_delete_refused)
    path = f"/api/projects/{p}/issues/{issue}"
    gone = world.client.simulate_delete(path, headers=world.headers("editor"))
    assert gone.status_code == 204, gone.text
    assert len(deletes) == 2
    assert f"events of deleted issue {issue}" in caplog.text
    assert _get(world, "viewer", path).status_code == 404
    # The first DELETE took the events the issue had.
    deadline = time.monotonic() + 20
    while _get(world, "viewer", f"/api/projects/{p}/events").json["total_count"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_trace_story(world):
    p = world.project_id
    add_span(world.state, p, T, "a" * 16, at=0, seconds=3, is_segment=True)
    add_span(world.state, p, T, "b" * 16, "a" * 16, at=1, op="db")
    add_span(world.state, p, T, "c" * 16, "b" * 16, at=1.5, op="db.query")
    add_span(world.state, p, T, "d" * 16, "e" * 16, at=2)  # its parent never arrived
    add_span(world.state, p, "cd" * 16, "f" * 16, at=0)  # another trace
    insert_logs(
        world.state.clickhouse,
        p,
        [
            sdk_log("in span", at=1.2, trace_id=T, span_id="b" * 16),
            sdk_log("outside", at=1.3, trace_id=T),
        ],
    )
    issue = add_issue(world.state, p, "boom")
    event = add_event(world.state, p, issue, at=1.6, trace_id=T, span_id="c" * 16)
    resp = _get(world, "viewer", f"/api/projects/{p}/traces/{T}")
    assert resp.status_code == 200, resp.text
    story = resp.json
    assert TraceOut().validate(story) == {}
    assert [s["span_id"] for s in story["spans"]] == ["a" * 16, "d" * 16]
    root = story["spans"][0]
    assert (root["is_segment"], root["segment_name"], root["duration_ms"]) == (
        True,
        "GET /checkout",
        3000.0,
    )
    assert root["end_timestamp"] == "2026-11-01T12:00:03.000000Z"
    child = root["children"][0]
    assert (child["span_id"], child["op"]) == ("b" * 16, "db")
    assert [g["span_id"] for g in child["children"]] == ["c" * 16]
    assert story["span_count"] == 4
    assert story["truncated"] == {"spans": False, "logs": False, "events": False}
    assert [log["body"] for log in story["logs"]] == ["in span"]
    assert [(e["event_id"], e["issue_id"], e["span_id"]) for e in story["events"]] == [
        (event["event_id"], issue, "c" * 16)
    ]
    upper = _get(world, "viewer", f"/api/projects/{p}/traces/{T.upper()}")
    assert upper.status_code == 200
    missing = _get(world, "viewer", f"/api/projects/{p}/traces/{'0' * 32}")
    assert missing.status_code == 404 and missing.json["error"]["code"] == "not_found"
    bad = _get(world, "viewer", f"/api/projects/{p}/traces/xyz")
    assert bad.status_code == 400 and bad.json["error"]["field"] == "trace_id"
    assert _get(world, "outsider", f"/api/projects/{p}/traces/{T}").status_code == 404
    assert (
        _get(world, "viewer", f"/api/projects/{world.add_project()}/traces/{T}").status_code == 404
    )


def test_span_cycles_do_not_hang_or_lose_spans():
    from errortrack.traces.story import span_tree

    nodes = [
        {"span_id": s, "parent_span_id": parent, "children": []}
        for s, parent in [("a", "b"), ("b", "a"), ("c", "c"), ("d", "a")]
    ]
    roots = span_tree(nodes)
    seen = []

    def walk(node):
        seen.append(node["span_id"])
        for child in node["children"]:
            walk(child)

    for root in roots:
        walk(root)
    assert sorted(seen) == ["a", "b", "c", "d"]


def _quadratic_span_tree(nodes):
    """The tree by its definition, walking up from each parent (the code's first form):
    the reference the fast one must match. The first node of an id stands for it."""
    nodes = [
        n for i, n in enumerate(nodes) if n["span_id"] not in {m["span_id"] for m in nodes[:i]}
    ]
    by_id = {node["span_id"]: node for node in nodes}
    attached = {}
    roots = []
    for node in nodes:
        parent = by_id.get(node["parent_span_id"] or "")
        current, seen, closes = parent and parent["span_id"], set(), False
        while current is not None and current not in seen:
            if current == node["span_id"]:
                closes = True
                break
            seen.add(current)
            current = attached.get(current)
        if parent is None or closes:
            roots.append(node)
            continue
        parent["children"].append(node)
        attached[node["span_id"]] = parent["span_id"]
    return roots


def _shape(roots):
    return [(node["span_id"], _shape(node["children"])) for node in roots]


@pytest.mark.parametrize("seed", range(40))
def test_the_span_tree_is_the_one_its_definition_gives(seed):
    # Random forests with cycles, self-parents and missing parents, in random order.
    import random

    from errortrack.traces.story import span_tree

    rng = random.Random(seed)
    ids = [f"{i:04x}" for i in range(rng.randint(1, 60))]
    pairs = [(s, rng.choice([*ids, "gone", None, s])) for s in ids]
    # An id twice (the query keeps one per id; a caller that does not must not hang).
    pairs += [(s, rng.choice([*ids, None, s])) for s in rng.sample(ids, min(len(ids), 3))]
    rng.shuffle(pairs)

    def nodes():
        return [{"span_id": s, "parent_span_id": p, "children": []} for s, p in pairs]

    assert _shape(span_tree(nodes())) == _shape(_quadratic_span_tree(nodes()))


def test_a_deep_chain_of_spans_is_placed_in_steps_linear_in_its_length():
    # Each span's cycle check walked up the whole chain above it: 10,000 spans in one
    # parent chain (recursion, nested middleware) cost 4.5 s of one API thread per view.
    # Counted in interpreted lines, not seconds, so the test does not depend on the machine.
    import sys

    from errortrack.traces.story import span_tree

    n = 2000
    nodes = [
        {
            "span_id": f"{i:016x}",
            "parent_span_id": f"{i - 1:016x}" if i else None,
            "start_timestamp": f"{i:08d}",
            "children": [],
        }
        for i in range(n)
    ]
    lines = 0

    def trace(frame, event, arg):
        nonlocal lines
        if event == "line":
            lines += 1
        return trace

    sys.settrace(trace)
    try:
        roots = span_tree(nodes)
    finally:
        sys.settrace(None)
    assert len(roots) == 1
    assert lines < 50 * n, lines


def _send_items(world, items, header=None):
    """An envelope of ``items`` ([(type, payload dict or bytes)]) through real ingest."""
    import orjson

    from errortrack.projects.service import active_key
    from tests.ingest_support import sentry_auth

    with world.state.sessions() as s:
        key = active_key(s, world.project_id).public_key
    lines = [orjson.dumps(header or {})]
    for kind, payload in items:
        raw = payload if isinstance(payload, bytes) else orjson.dumps(payload)
        lines += [orjson.dumps({"type": kind, "length": len(raw)}), raw]
    resp = world.client.simulate_post(
        f"/api/{world.project_id}/envelope/", body=b"\n".join(lines), headers=sentry_auth(key)
    )
    assert resp.status_code == 200, resp.text
    world.state.ingest.writer.drain()


def test_a_trace_nested_deeper_than_the_tree_shows_is_listed_flat_below_it(ingest_world):
    # A recursive function traced 127 levels deep made its trace a 500 with an empty body:
    # two levels of JSON per span level, and orjson stops at 255.
    from errortrack.traces.story import MAX_DEPTH

    world, p = ingest_world, ingest_world.project_id
    now = world.state.clock().timestamp()
    spans = [
        {
            "trace_id": T,
            "span_id": f"{i + 1:016x}",
            "parent_span_id": f"{i:016x}" if i else None,
            "name": f"level {i}",
            "start_timestamp": now - 10 + i * 0.001,
            "end_timestamp": now - 1,
            "is_segment": i == 0,
            "attributes": {},
        }
        for i in range(2 * MAX_DEPTH)
    ]
    _send_items(world, [("span", {"version": 2, "items": spans})])
    resp = _get(world, "viewer", f"/api/projects/{p}/traces/{T}")
    assert resp.status_code == 200, resp.text
    story = resp.json
    assert story["span_count"] == 2 * MAX_DEPTH
    node, depth = story["spans"][0], 1
    while node["children"] and len(node["children"]) == 1:
        node, depth = node["children"][0], depth + 1
    assert depth == MAX_DEPTH and node["span_id"] == f"{MAX_DEPTH:016x}"
    below = node["children"]
    assert [s["span_id"] for s in below] == [
        f"{i:016x}" for i in range(MAX_DEPTH + 1, 2 * MAX_DEPTH + 1)
    ]
    assert all(s["children"] == [] for s in below)
    assert [s["parent_span_id"] for s in below[:2]] == [
        f"{MAX_DEPTH:016x}",
        f"{MAX_DEPTH + 1:016x}",
    ]


def test_span_attributes_come_back_exactly_as_sent(ingest_world):
    # Parsed again with orjson, an integer beyond a double was a 500 for the whole trace,
    # and an array nested ~250 deep made the answer unencodable (a 500, empty body).
    import json

    world, p = ingest_world, ingest_world.project_id
    now = world.state.clock().timestamp()
    big = b"1" + b"0" * 400
    deep = b"[" * 300 + b"1" + b"]" * 300
    payload = (
        b'{"version":2,"items":[{"trace_id":"' + T.encode() + b'","span_id":"aaaaaaaaaaaaaaaa",'
        b'"name":"x","start_timestamp":'
        + str(now - 2).encode()
        + b',"end_timestamp":'
        + str(now - 1).encode()
        + b',"is_segment":true,"attributes":{"big":{"value":'
        + big
        + b',"type":"integer"},"deep":{"value":'
        + deep
        + b',"type":"array"}}}]}'
    )
    _send_items(world, [("span", payload)])
    resp = _get(world, "viewer", f"/api/projects/{p}/traces/{T}")
    assert resp.status_code == 200, resp.text
    attributes = json.loads(resp.text)["spans"][0]["attributes"]
    assert attributes["big"] == {"value": 10**400, "type": "integer"}
    value, depth = attributes["deep"]["value"], 0
    while isinstance(value, list):
        value, depth = value[0], depth + 1
    assert (value, depth) == (1, 300)


@pytest.mark.parametrize(
    ("start", "end"),
    [(".2972028", ".322908"), (".9999998", ".0000002"), (".1234562", ".1234568")],
)
def test_a_span_s_start_and_end_come_back_to_the_nearest_microsecond(ingest_world, start, end):
    # ClickHouse cut the start to its microsecond while the duration was rounded, so the
    # end read back (start + duration) could be 1 us before the end sent.
    import datetime as dt

    world, p = ingest_world, ingest_world.project_id
    second = int(world.state.clock().timestamp()) - 10
    first = f"{second}{start}"
    last = f"{second + (1 if end < start else 0)}{end}"
    payload = (
        f'{{"version":2,"items":[{{"trace_id":"{T}","span_id":"aaaaaaaaaaaaaaaa","name":"x",'
        f'"start_timestamp":{first},"end_timestamp":{last},"is_segment":true}}]}}'
    ).encode()
    _send_items(world, [("span", payload)])
    resp = _get(world, "viewer", f"/api/projects/{p}/traces/{T}")
    assert resp.status_code == 200, resp.text
    [span] = resp.json["spans"]

    def micro(text):
        return round(float(text) * 1e6)

    def read(iso):
        moment = dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
        return round(moment.timestamp() * 1e6)

    assert read(span["start_timestamp"]) == micro(first)
    assert read(span["end_timestamp"]) == micro(last)


def test_a_transaction_sent_twice_shows_each_span_once(ingest_world):
    # An SDK that saw no answer sends the envelope again: its spans were stored twice and
    # the trace showed two roots and a doubled span count.
    world, p = ingest_world, ingest_world.project_id
    now = world.state.clock().timestamp()
    event_id = "e" * 32
    transaction = {
        "type": "transaction",
        "event_id": event_id,
        "transaction": "GET /x",
        "start_timestamp": now - 3,
        "timestamp": now - 1,
        "contexts": {"trace": {"trace_id": T, "span_id": "1" * 16, "op": "http.server"}},
        "spans": [
            {
                "span_id": "2" * 16,
                "parent_span_id": "1" * 16,
                "trace_id": T,
                "op": "db",
                "start_timestamp": now - 2.5,
                "timestamp": now - 2,
            }
        ],
    }
    for _ in range(2):
        _send_items(world, [("transaction", transaction)], header={"event_id": event_id})
    story = _get(world, "viewer", f"/api/projects/{p}/traces/{T}").json
    assert story["span_count"] == 2
    assert [s["span_id"] for s in story["spans"]] == ["1" * 16]
    assert [s["span_id"] for s in story["spans"][0]["children"]] == ["2" * 16]


def test_an_answer_that_cannot_be_encoded_is_the_json_500_and_changes_nothing(state):
    # Rendered by Falcon after the error handlers, it was a 500 with an empty body, and
    # the request's change stayed committed.
    import falcon.testing
    import sqlalchemy as sa

    from errortrack.api.middleware import session
    from errortrack.app import create_app
    from errortrack.models import Project

    class Unencodable:
        def on_post(self, req, resp):
            session(req).add(Project(name="half done"))
            session(req).flush()
            nested: list = []
            for _ in range(300):
                nested = [nested]
            resp.media = {"deep": nested}

    app = create_app(state=state)
    app.add_route("/test/unencodable", Unencodable())
    resp = falcon.testing.TestClient(app).simulate_post("/test/unencodable")
    assert resp.status_code == 500
    assert resp.json == {
        "error": {"code": "internal_error", "message": "internal server error", "field": None}
    }
    with state.sessions() as s:
        assert s.scalar(sa.select(Project.id).where(Project.name == "half done")) is None


def test_a_trace_past_its_caps_says_which_lists_were_cut(world, monkeypatch):
    # A trace of 100,000 spans came back as 10,000 with nothing saying so. The caps are
    # lowered here; the queries and the stores are the real ones.
    from errortrack.traces import story as story_module

    monkeypatch.setattr(story_module, "MAX_SPANS", 2)
    monkeypatch.setattr(story_module, "MAX_LOGS", 1)
    monkeypatch.setattr(story_module, "MAX_EVENTS", 2)
    p = world.project_id
    for i, span_id in enumerate(("a", "b", "c")):
        add_span(world.state, p, T, span_id * 16, at=i, is_segment=i == 0)
    insert_logs(
        world.state.clickhouse,
        p,
        [sdk_log(f"log {i}", at=i, trace_id=T, span_id="a" * 16) for i in range(2)],
    )
    issue = add_issue(world.state, p, "boom")
    for i in range(2):
        add_event(world.state, p, issue, at=i, trace_id=T)
    story = _get(world, "viewer", f"/api/projects/{p}/traces/{T}").json
    assert TraceOut().validate(story) == {}
    assert story["truncated"] == {"spans": True, "logs": True, "events": False}
    assert (story["span_count"], len(story["logs"]), len(story["events"])) == (2, 1, 2)
    assert [log["body"] for log in story["logs"]] == ["log 0"]


def test_a_trace_s_spans_page_on_past_the_view_s_cap(world):
    """The trace view shows the first 10,000 spans; the spans list pages through all of
    them, in the tree's order, each span id once (a transaction sent twice is stored twice)."""
    from errortrack.api.schemas.traces import SpanPageOut

    p = world.project_id
    ids = [f"{i:016x}" for i in range(25)]
    for i, span_id in enumerate(ids):
        add_span(world.state, p, T, span_id, ids[0] if i else "", at=i, is_segment=i == 0)
    add_span(world.state, p, T, ids[3], ids[0], at=3)  # sent again
    add_span(world.state, p, "cd" * 16, "f" * 16, at=1, is_segment=True)  # another trace
    path = f"/api/projects/{p}/traces/{T}/spans"
    seen = []
    for page in (1, 2, 3):
        body = _get(world, "viewer", path, f"per_page=10&page={page}").json
        assert SpanPageOut().validate(body) == {}
        assert body["total_count"] == 25
        seen += [span["span_id"] for span in body["items"]]
    assert seen == ids
    first = _get(world, "viewer", path, "per_page=1").json["items"][0]
    assert first["is_segment"] is True and "children" not in first
    assert first["parent_span_id"] is None and first["op"] == "http.server"
    # The dashed UUID form names the trace too; an unknown trace is an empty list.
    dashed = f"{T[:8]}-{T[8:12]}-{T[12:16]}-{T[16:20]}-{T[20:]}"
    assert (
        _get(world, "viewer", f"/api/projects/{p}/traces/{dashed}/spans").json["total_count"] == 25
    )
    empty = _get(world, "viewer", f"/api/projects/{p}/traces/{'9' * 32}/spans")
    assert empty.status_code == 200 and empty.json["items"] == []
    for query, field in (("per_page=0", "per_page"), ("sort=x", "sort")):
        resp = _get(world, "viewer", path, query)
        assert resp.status_code == 400 and resp.json["error"]["field"] == field
    assert _get(world, "viewer", f"/api/projects/{p}/traces/xyz/spans").status_code == 400


def test_a_trace_s_spans_walk_by_cursor_while_spans_arrive(world):
    """Numbered pages of a trace still arriving listed spans twice and others never: the
    other services' spans come later with earlier starts (review, twenty-first session).
    A cursor walk lists every span stored before it began exactly once."""
    p = world.project_id
    ids = [f"{i:016x}" for i in range(30)]
    for i, span_id in enumerate(ids):
        add_span(world.state, p, T, span_id, ids[0] if i else "", at=10 + i, is_segment=i == 0)
    for i in range(5):  # two spans starting at the same microsecond, ordered by id
        add_span(world.state, p, T, f"{i:014x}ee", ids[0], at=10 + 2 * i)
    before = {f"{i:014x}ee" for i in range(5)} | set(ids)
    path = f"/api/projects/{p}/traces/{T}/spans"
    seen: list[str] = []
    body = _get(world, "viewer", path, "per_page=7").json
    arrived = 0
    while True:
        assert body["total_count"] >= 35
        seen += [span["span_id"] for span in body["items"]]
        # Another service's spans arrive meanwhile, starting earlier than any shown.
        add_span(world.state, p, T, f"{arrived:014x}aa", ids[0], at=arrived / 10)
        arrived += 1
        if body["next_cursor"] is None:
            break
        body = _get(world, "viewer", path, f"per_page=7&cursor={body['next_cursor']}").json
        assert body["page"] is None
    assert len(seen) == len(set(seen)) and before <= set(seen)
    # The cursor is refused on a numbered page, with a page, or made up.
    first = _get(world, "viewer", path, "per_page=7").json["next_cursor"]
    for query in (f"cursor={first}&page=2", "cursor=abc", "cursor=" + "A" * 5000):
        resp = _get(world, "viewer", path, query)
        assert resp.status_code == 400 and resp.json["error"]["field"] == "cursor", query


def test_pages_of_spans_and_logs_stop_at_their_byte_budget(world, monkeypatch):
    """A page of logs or spans ends once its bodies, descriptions and attributes pass a
    byte budget (32 MiB; a few spans' worth here), and goes on by its cursor: a page of
    1000 logs of 1 MB cost the worker +2.7 GB. The trace view says it was cut."""
    from errortrack import paging

    monkeypatch.setattr(paging, "PAGE_BYTES", 200)  # each span here holds ~67 bytes
    p = world.project_id
    ids = [f"{i:016x}" for i in range(10)]
    for i, span_id in enumerate(ids):
        add_span(world.state, p, T, span_id, ids[0] if i else "", at=i, is_segment=i == 0)
    insert_logs(
        world.state.clickhouse,
        p,
        [sdk_log("x" * 150, at=i, trace_id=T, span_id=ids[0]) for i in range(4)],
    )
    path = f"/api/projects/{p}/traces/{T}/spans"
    body = _get(world, "viewer", path, "per_page=100").json
    assert body["total_count"] == 10 and 1 <= len(body["items"]) < 10
    seen = [span["span_id"] for span in body["items"]]
    while body["next_cursor"]:
        body = _get(world, "viewer", path, f"per_page=100&cursor={body['next_cursor']}").json
        assert body["items"]
        seen += [span["span_id"] for span in body["items"]]
    assert seen == ids
    story = _get(world, "viewer", f"/api/projects/{p}/traces/{T}").json
    assert story["truncated"] == {"spans": True, "logs": True, "events": False}
    assert 1 <= story["span_count"] < 10 and len(story["logs"]) == 1
    logs = _get(world, "viewer", f"/api/projects/{p}/logs", "per_page=100").json
    assert len(logs["items"]) == 1 and logs["total_count"] == 4 and logs["next_cursor"]


def test_long_short_columns_stored_before_their_bound_count_against_the_budget(world, monkeypatch):
    """Rows stored before ingest bounded a log's ids and a span's parent id (thirty-first
    session) still come in pages within the byte budget: 1 MB span ids made a 954 MiB
    page of logs that took the worker to 3.8 GB (API review)."""
    from errortrack import paging

    monkeypatch.setattr(paging, "PAGE_BYTES", 200)
    p, long_id = world.project_id, "ab" * 75  # 150 characters each, over 64
    logs = [sdk_log("x", at=i, trace_id=T, span_id="1" * 16) for i in range(4)]
    # As a sender could store them then.
    rows = [{**row, "span_id": long_id} for row in log_rows(p, logs)]
    insert_rows(world.state.clickhouse, "logs", rows)
    page = _get(world, "viewer", f"/api/projects/{p}/logs", "per_page=100").json
    assert page["total_count"] == 4 and len(page["items"]) == 1 and page["next_cursor"]
    assert page["items"][0]["span_id"] == long_id
    spans = [
        {**plain_span(p, T, i, start=BASE.timestamp() + i), "parent_span_id": long_id}
        for i in range(4)
    ]
    insert_rows(world.state.clickhouse, "spans", spans)
    body = _get(world, "viewer", f"/api/projects/{p}/traces/{T}/spans", "per_page=100").json
    assert body["total_count"] == 4 and 1 <= len(body["items"]) < 4 and body["next_cursor"]


def test_a_span_id_stored_twice_is_walked_once(world):
    """Each span id once (its earliest copy), on numbered pages and in a cursor walk: the
    walk dropped duplicates within each page only, so a copy with a later start came
    again after the cursor had passed the first (review, twenty-seventh session)."""
    p = world.project_id
    add_span(world.state, p, T, "a" * 16, at=0)
    add_span(world.state, p, T, "b" * 16, at=1)
    add_span(world.state, p, T, "a" * 16, at=2)  # the same span id again, later
    path = f"/api/projects/{p}/traces/{T}/spans"
    body = _get(world, "viewer", path, "per_page=1").json
    walked = [s["span_id"] for s in body["items"]]
    while body["next_cursor"]:
        body = _get(world, "viewer", path, f"per_page=1&cursor={body['next_cursor']}").json
        walked += [s["span_id"] for s in body["items"]]
    assert walked == ["a" * 16, "b" * 16]
    numbered = _get(world, "viewer", path, "per_page=5").json
    assert [s["span_id"] for s in numbered["items"]] == walked
    assert numbered["total_count"] == 2


def test_the_copy_of_a_span_read_is_the_copy_the_budget_counted(world, monkeypatch):
    """Copies of a span id with the same start but other sizes: the pick counted one and
    the fetch read another, so pages went far past their byte budget (diff review,
    thirty-first session). Fetched in chunks, with a span deleted between the two reads
    left out instead of a 500."""
    from errortrack import paging
    from errortrack.analytics.store import ClickHouse
    from errortrack.traces import story

    monkeypatch.setattr(paging, "PAGE_BYTES", 1000)
    monkeypatch.setattr(story, "_FETCH_CHUNK", 3)
    p = world.project_id

    for description in ("x" * 500, "y"):  # the large copies first, in parts of their own
        spans = [
            plain_span(p, T, i, start=BASE.timestamp() + i, description=description)
            for i in range(20)
        ]
        insert_rows(world.state.clickhouse, "spans", spans)
    path = f"/api/projects/{p}/traces/{T}/spans"
    body = _get(world, "viewer", path, "per_page=100").json
    assert [item["description"] for item in body["items"]] == ["y"] * 20
    story_spans = _get(world, "viewer", f"/api/projects/{p}/traces/{T}").json["spans"]
    assert {span["description"] for span in story_spans} == {"y"}
    # A span deleted between the pick and the fetch is left out.
    real = ClickHouse.query_rows

    def deleting(self, sql, parameters=None, settings=None):
        if sql.startswith(f"SELECT {story.SPAN_COLUMNS}, "):
            world.state.clickhouse.command(
                f"DELETE FROM spans WHERE project_id = {p} AND span_id = '0000000000000001'"
            )
        return real(self, sql, parameters, settings)

    monkeypatch.setattr(ClickHouse, "query_rows", deleting)
    body = _get(world, "viewer", path, "per_page=100").json
    assert len(body["items"]) == 19
    assert "0000000000000001" not in {item["span_id"] for item in body["items"]}
