"""Schemathesis against the served OpenAPI document: no 5xx, every response as documented.

The app runs in-process (WSGI) on the test's real stores with the openapi feature on;
the document is fetched from ``/api-docs/openapi.json`` like any client would. Every
operation is exercised with generated (schema-valid) requests as a global admin, with a
fresh bearer token per request so that operations deleting tokens or logging out cannot
lock the run out. One default check, "schema-valid data is accepted", runs only on the
operations in ``POSITIVE``, whose request schemas state every rule their services check
(lengths after trimming, ranges, an email's shape; a review in the nineteenth session found them missing). The
others check more than a JSON schema can say (``start`` before ``end``, an issue status's
transitions, a member's last-admin rule) and answer those with the documented 400. Bounded: a fixed number of examples per operation, derandomised, so CI
time stays flat (about 10 s).
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import positive_data_acceptance

from errortrack import db
from errortrack.auth.tokens import create_token
from tests.access_world import build_world
from tests.issue_data import add_event, add_issue, add_span
from tests.logs_data import insert_logs, sdk_log

EXAMPLES = 12
# Operations whose schema-valid requests the server must take (2xx, or 404/409 for
# an id or a name it does not have or already has); see the module's docstring.
POSITIVE = {
    ("POST", "/api/projects"),
    ("PATCH", "/api/projects/{project_id}"),
    ("POST", "/api/projects/{project_id}/keys"),
    ("PATCH", "/api/projects/{project_id}/keys/{key_id}"),
    ("POST", "/api/tokens"),
    ("POST", "/api/invitations"),
    ("POST", "/auth/invitations/{token}/accept"),
}


@pytest.fixture
def served(state, client, openapi_app):
    world = build_world(state, client)
    # Some data in project 1 so that generated ids sometimes hit real rows.
    p = world.project_id
    issue = add_issue(state, p, "boom")
    add_event(state, p, issue, at=1, trace_id="ab" * 16, span_id="a" * 16)
    add_span(state, p, "ab" * 16, "a" * 16, is_segment=True)
    insert_logs(
        state.clickhouse,
        p,
        [sdk_log("hello", level="error", trace_id="ab" * 16, span_id="a" * 16, code=503)],
    )
    return world, openapi_app


def test_every_operation_conforms(served):
    world, app = served
    schema = schemathesis.openapi.from_wsgi("/api-docs/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 30

    def fresh_token() -> dict[str, str]:
        with db.unit_of_work(world.factory) as s:
            new = create_token(
                s, user_id=world.users["primary"], description="st", now=world.state.clock()
            )
        return {"Authorization": f"Bearer {new.secret}"}

    failures = []
    assert {(op.method.upper(), op.path) for op in operations} >= POSITIVE
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case: schemathesis.Case) -> None:
            positive = (case.operation.method.upper(), case.operation.path) in POSITIVE
            excluded = [] if positive else [positive_data_acceptance]
            case.call_and_validate(headers=fresh_token(), excluded_checks=excluded)

        try:
            run()
        except (Exception, BaseExceptionGroup) as exc:  # report every operation's failures
            details = [str(e) for e in getattr(exc, "exceptions", [exc])]
            failures.append(f"{operation.method.upper()} {operation.path}: " + "\n".join(details))
    assert not failures, "\n\n".join(failures)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/projects", {"name": "a\x00b"}, "name"),
        ("/api/tokens", {"description": "ci\x00"}, "description"),
    ],
)
def test_found_by_schemathesis_nul_in_text_is_400(served, path, body, field):
    """Postgres text cannot hold NUL: these were 500s on Postgres before."""
    world, _ = served
    resp = world.call("primary", "POST", path, body)
    assert resp.status_code == 400, resp.text
    assert resp.json["error"]["field"] == field
