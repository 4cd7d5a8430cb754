"""Every access endpoint, driven by every kind of caller, against ONE table.

The table is ``tests/access_matrix.py`` ROWS; ``docs/permissions.md`` is generated from it.
"""

from __future__ import annotations

import re

import pytest

from tests.access_matrix import DOC, ROWS, Row, render_markdown
from tests.access_world import CALLERS, build_world


@pytest.fixture
def world(state, client):
    return build_world(state, client)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.endpoint} {r.case}".strip())
def test_endpoint_answers_each_caller_as_the_table_says(world, row: Row):
    expected = row.statuses()
    got = {}
    for caller in CALLERS:
        method, path, body = row.prepare(world, caller)
        resp = world.call(caller, method, path, body)
        got[caller] = resp.status_code
        if resp.status_code >= 400:
            # Every refusal carries the one JSON error body.
            assert set(resp.json["error"]) == {"code", "message", "field"}, resp.text
    assert got == expected


def test_docs_permissions_md_is_generated_from_the_table():
    assert DOC.read_text() == render_markdown(), (
        "docs/permissions.md is stale: run `make permissions`"
    )


# Every management route: /auth/* and /api/* except SDK ingest (Sentry's protocol,
# authenticated by project keys, covered by the ingest tests).
IN_SCOPE = re.compile(r"^/(auth|api)/(?!\{project_id\}/(envelope|store)$)")


def test_every_access_route_is_in_the_table(app):
    """A new access route (or method) without a row in the table fails here."""
    from errortrack.api.schemas import operations

    covered = {row.endpoint for row in ROWS}
    routes = set()
    for path, method, _ in operations(app):
        path = path.replace(":int", "")
        if IN_SCOPE.match(path):
            routes.add(f"{method} {path}")
    assert len(routes) >= 24
    assert routes - covered == set()


def test_every_access_responder_declares_its_schemas(app):
    """The OpenAPI generator only sees responders decorated with @api_doc."""
    import falcon.inspect

    from errortrack.api.schemas import operations

    documented = {(path, method) for path, method, _ in operations(app)}
    for route in falcon.inspect.inspect_routes(app):
        if not IN_SCOPE.match(route.path.replace(":int", "")):
            continue
        for method in route.methods:
            if not method.internal:
                assert (route.path, method.method) in documented, (route.path, method.method)
