"""The OpenAPI document: generated from the routes, snapshotted, served only when on."""

from __future__ import annotations

import dataclasses
import json
from functools import partial

import falcon.testing
import pytest

from errortrack.api import openapi
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
