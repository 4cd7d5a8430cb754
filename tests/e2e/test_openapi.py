"""The OpenAPI document: generated from the routes, snapshotted, served only when on."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from functools import partial
from urllib.parse import urlencode

import falcon.testing
import orjson
import pytest

from errortrack.api import openapi
from tests.ingest_support import ingest_auth
from tests.support import ROOT

SNAPSHOT = ROOT / "schemas" / "openapi.json"
# Routes that are not the management API: SDK ingest speaks Sentry's protocol.
NOT_MANAGEMENT = ("/api/{project_id:int}/envelope", "/api/{project_id:int}/store")


@pytest.fixture
def docs_client(openapi_app):
    return falcon.testing.TestClient(openapi_app)


def test_snapshot_is_up_to_date(app):
    assert json.loads(SNAPSHOT.read_text()) == openapi.build(app), (
        "schemas/openapi.json differs from the code: run "
        "`.venv/bin/python -m errortrack.api.openapi > schemas/openapi.json` (make openapi)"
    )


def _routes(app):
    def walk(nodes, parent):
        for node in nodes:
            path = f"{parent}/{node.raw_segment}"
            for method, responder in (node.method_map or {}).items():
                real = responder.func if isinstance(responder, partial) else responder
                if getattr(real, "__self__", None) is not None:  # a resource's own responder
                    yield path, method, real
            yield from walk(node.children or [], path)

    return list(walk(app._router._roots, ""))


def test_every_management_endpoint_is_documented(app):
    document = openapi.build(app)
    missing = []
    for path, method, responder in _routes(app):
        if not path.startswith(("/api/", "/auth/")) or path in NOT_MANAGEMENT:
            continue
        documented = openapi._path(path)[0]
        if method.lower() not in document["paths"].get(documented, {}):
            missing.append(f"{method} {path} ({responder.__qualname__})")
    assert missing == []


def test_document_shape(app):
    document = openapi.build(app)
    assert document["openapi"].startswith("3.")
    assert document["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
    }
    logs = document["paths"]["/api/projects/{project_id}/logs"]["get"]
    names = {p["name"]: p for p in logs["parameters"]}
    assert {
        "project_id",
        "page",
        "per_page",
        "level",
        "trace_id",
        "q",
        "start",
        "end",
        "attr",
    } <= set(names)
    assert names["attr"]["style"] == "deepObject"
    assert names["per_page"]["schema"]["maximum"] == 1000
    assert logs["security"] == [{"bearer": []}, {"session": []}]
    assert logs["responses"]["400"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }
    assert set(document["components"]["schemas"]["ErrorDetail"]["properties"]) == {
        "code",
        "message",
        "field",
    }
    # Logs are read-only.
    assert set(document["paths"]["/api/projects/{project_id}/logs"]) == {"get"}


def test_served_publicly_when_on(docs_client, app):
    resp = docs_client.simulate_get("/api-docs/openapi.json")
    assert resp.status_code == 200
    assert resp.json == json.loads(SNAPSHOT.read_text())
    page = docs_client.simulate_get("/docs")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "/docs/assets/swagger-ui-bundle.js" in page.text and "//cdn" not in page.text
    for asset in (
        "/docs/assets/swagger-ui-bundle.js",
        "/docs/assets/swagger-ui.css",
        "/docs/init.js",
    ):
        got = docs_client.simulate_get(asset)
        assert got.status_code == 200 and len(got.content) > 50, asset
    assert "/api-docs/openapi.json" in docs_client.simulate_get("/docs/init.js").text
    missing = docs_client.simulate_get("/docs/assets/nope.js")
    assert missing.status_code == 404 and missing.json["error"]["code"] == "not_found"


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_the_docs_assets_answer_reads_only(docs_client, method):
    """Falcon's static route served the file to any method (a DELETE was a 200)."""
    resp = docs_client.simulate_request(method, "/docs/assets/swagger-ui.css")
    assert resp.status_code == 405
    assert resp.json["error"]["code"] == "method_not_allowed"
    assert resp.headers["Allow"] == "GET, HEAD, OPTIONS"
    head = docs_client.simulate_head("/docs/assets/swagger-ui.css")
    assert head.status_code == 200 and head.content == b""


def test_a_range_past_the_end_of_a_docs_asset_is_416_with_its_own_code(docs_client):
    """Falcon's static route answers it 416; the error body said code "error" (the
    status was missing from the table of Falcon's own errors)."""
    resp = docs_client.simulate_get(
        "/docs/assets/swagger-ui.css", headers={"Range": "bytes=100000000-"}
    )
    assert resp.status_code == 416
    assert resp.json["error"]["code"] == "range_not_satisfiable"
    assert resp.headers["Content-Range"].startswith("bytes */")


@pytest.mark.parametrize(
    ("status", "code"),
    [(416, "range_not_satisfiable"), (418, "im_a_teapot"), (451, "unavailable_for_legal_reasons")],
)
def test_every_error_falcon_raises_has_a_code_of_its_status(status, code):
    """Any status missing from the table gets a code made of its reason phrase, not the
    generic "error"."""
    from errortrack.api.errors import falcon_code

    assert falcon_code(status) == code


@pytest.mark.parametrize(
    "path", ["/api-docs/openapi.json", "/docs", "/docs/init.js", "/docs/assets/swagger-ui.css"]
)
def test_off_by_default_is_a_standard_404(client, path):
    resp = client.simulate_get(path)
    assert resp.status_code == 404
    assert resp.json == {
        "error": {"code": "not_found", "message": f"no resource at {path}", "field": None}
    }


def test_on_needs_the_extra_too(settings):
    from errortrack.api import docs

    on = dataclasses.replace(settings, openapi=True)
    assert docs.enabled(on) is True
    assert docs.enabled(on, installed=lambda: False) is False
    assert docs.enabled(settings) is False


# -- what client generators make of the document --------------------------------------

TRACE_ID = "a" * 32


def _envelopes(now: float) -> list[bytes]:
    """Two issues (one with two events), two logs and a transaction with a child span."""
    out = []
    for n, message in enumerate(["first failure", "first failure", "second failure"]):
        event = {"event_id": f"{n + 1:032x}", "message": message, "timestamp": now - n}
        out.append(b"{}\n" + orjson.dumps({"type": "event"}) + b"\n" + orjson.dumps(event))
    logs = {"items": [{"timestamp": now, "level": "info", "body": f"log {n}"} for n in range(2)]}
    out.append(b"{}\n" + orjson.dumps({"type": "log"}) + b"\n" + orjson.dumps(logs))
    root = {"trace_id": TRACE_ID, "span_id": "b" * 16, "op": "http.server"}
    child = {**root, "span_id": "c" * 16, "parent_span_id": "b" * 16, "op": "db"}
    transaction = {
        "type": "transaction",
        "transaction": "GET /",
        "start_timestamp": now - 1,
        "timestamp": now,
        "contexts": {"trace": root},
        "spans": [{**child, "start_timestamp": now - 1, "timestamp": now}],
    }
    out.append(b"{}\n" + orjson.dumps({"type": "transaction"}) + b"\n" + orjson.dumps(transaction))
    return out


def test_a_generated_client_can_walk_every_cursor_list(app, ingest_world):
    """Generators (openapi-python-client) send every query parameter's default on each
    call. The document gave page and sort defaults, so a client passing next_cursor sent
    page=1 (or a sort other than the cursor's) beside it, a 400 on every cursor list."""
    world = ingest_world
    pid = world.project_id
    for body in _envelopes(time.time()):
        sent = world.client.simulate_post(
            f"/api/{pid}/envelope/", body=body, headers=ingest_auth(world.factory, pid)
        )
        assert sent.status_code == 200, sent.text
    world.state.ingest.writer.drain()
    issues = world.call("viewer", "GET", f"/api/projects/{pid}/issues").json["items"]
    (twice,) = [i["id"] for i in issues if i["count"] == 2]
    filled = {"project_id": pid, "issue_id": twice, "trace_id": TRACE_ID}
    walked = []
    for path, operations in openapi.build(app)["paths"].items():
        op = operations.get("get", {})
        params = op.get("parameters", [])
        if not any(p["name"] == "cursor" for p in params):
            continue
        query = {
            p["name"]: p["schema"]["default"]
            for p in params
            if p["in"] == "query" and "default" in p.get("schema", {})
        }
        url = path.format(**filled)
        first = world.call("viewer", "GET", f"{url}?{urlencode({**query, 'per_page': 1})}")
        assert first.status_code == 200, (path, first.text)
        cursor = first.json["next_cursor"]
        assert cursor, path
        second = world.call(
            "viewer", "GET", f"{url}?{urlencode({**query, 'per_page': 1, 'cursor': cursor})}"
        )
        assert second.status_code == 200, (path, second.text)
        walked.append(op["operationId"])
    assert sorted(walked) == [
        "listIssueEvents",
        "listIssues",
        "listLogs",
        "listProjectEvents",
        "listTraceSpans",
        "tailLogs",
    ]


def test_operation_ids_and_enum_names_read_as_code(app):
    document = openapi.build(app)
    ids = [op["operationId"] for ops in document["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids)) == len(openapi.OPERATION_IDS)
    assert all(re.fullmatch(r"[a-z][A-Za-z]+", i) for i in ids), ids
    issues = document["paths"]["/api/projects/{project_id}/issues"]["get"]
    (sort,) = [p["schema"] for p in issues["parameters"] if p["name"] == "sort"]
    names = dict(zip(sort["enum"], sort["x-enum-varnames"], strict=True))
    assert (names["-last_seen"], names["id"]) == ("LAST_SEEN_DESC", "ID_ASC")


def test_cookie_writes_name_the_csrf_header_and_plain_refusals_are_declared(app):
    document = openapi.build(app)
    resolve = document["paths"]["/api/projects/{project_id}/issues/{issue_id}/resolve"]["post"]
    assert resolve["security"] == [{"bearer": []}, {"session": [], "csrf": []}]
    scheme = document["components"]["securitySchemes"]["csrf"]
    assert (scheme["in"], scheme["name"]) == ("header", "X-CSRF-Token")
    assert document["servers"] == [{"url": "/"}]
    for ops in document["paths"].values():
        for op in ops.values():
            assert set(op["responses"]["414"]["content"]) == {"text/plain"}
            assert set(op["responses"]["431"]["content"]) == {"text/plain"}


def test_fields_always_sent_are_required(app):
    """Nullable fields the server always sends were optional, so generated types had an
    "absent" case that never happens (ProjectOut.dsn, TokenOut.last_used_at, ...)."""
    schemas = openapi.build(app)["components"]["schemas"]
    for name in ("ProjectOut", "TokenOut", "NewTokenOut", "MeOut", "KeyOut", "CleanupOut"):
        schema = schemas[name]
        assert set(schema["required"]) == set(schema["properties"]), name


def test_every_operation_declares_its_400(app):
    """Every documented operation refuses an unknown query parameter with a 400, and a
    path parameter it reads itself (the trace view's trace_id) too; only those with a
    query or request schema declared it (review, twenty-seventh session)."""
    document = openapi.build(app)
    without = [
        f"{method.upper()} {path}"
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        if "400" not in operation["responses"]
    ]
    assert without == []
