"""The real sentry-sdk and @sentry/node against a real `errortrack serve`: errors grouped
into issues, regressions, custom fingerprints, transactions stored as linked spans, logs
in the trace. Each test uses a project of its own on one shared server."""

from __future__ import annotations

import pytest

from errortrack import db
from errortrack.issues import service
from tests.e2e.sdk_issues_support import Served, run_sdk
from tests.support import Server, scratch_database, server_env

pytestmark = pytest.mark.e2e
SDKS = ["python", "node"]
# What each SDK's client app (tests/e2e/sdk/py_client.py, tests/e2e/node/issues_client.js)
# raises in its "errors" scenario, and where.
ERRORS = {
    "python": {
        "same": "ValueError: order 12 has no items",
        "other": "KeyError: 'missing'",
        "culprit": "__main__ in divide",
    },
    "node": {
        "same": "TypeError: order 12 has no items",
        "other": "TypeError: Cannot read properties of undefined (reading 'name')",
        "culprit": "divide(issues_client)",
    },
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sdk-issues")
    with scratch_database(tmp) as url:
        server = Server(server_env(tmp / "data", url)).start()
        instance = Served(server, url, tmp / "data")
        try:
            yield instance
        finally:
            server.stop()
            instance.engine.dispose()


def counts(found):
    return {title: issue.event_count for title, issue in found.items()}


def total(n):
    return lambda found: sum(counts(found).values()) >= n


@pytest.mark.parametrize("sdk", SDKS)
def test_same_exception_twice_is_one_issue_and_another_is_a_second(served, sdk):
    pid, project_dsn = served.new_project(f"{sdk}-errors")
    run_sdk(sdk, project_dsn, "errors")
    found = served.wait_for_issues(pid, total(3))
    expected = ERRORS[sdk]
    # Named after its newest event; Node may send both within the same millisecond.
    [same] = [title for title in found if title != expected["other"]]
    assert same in {expected["same"], expected["same"].replace("12", "977")}
    assert counts(found) == {same: 2, expected["other"]: 1}
    issue = found[same]
    assert (issue.status, issue.level, issue.culprit) == (
        "unresolved",
        "error",
        expected["culprit"],
    )


@pytest.mark.parametrize("sdk", SDKS)
def test_capture_message_groups_by_normalised_message(served, sdk):
    pid, project_dsn = served.new_project(f"{sdk}-messages")
    run_sdk(sdk, project_dsn, "messages")
    found = served.wait_for_issues(pid, total(2))
    # Titled after its newest event, the second message; Node may date both within the
    # same millisecond, and then the one to arrive last names it.
    newest, first = (
        "payment 977 declined by bank 0x11aa22bb",
        "payment 12 declined by bank 0x7f3a9c21",
    )
    [(title, count)] = counts(found).items()
    assert title in ({newest, first} if sdk == "node" else {newest}) and count == 2
    assert found[title].level == "info"


@pytest.mark.parametrize("sdk", SDKS)
def test_custom_fingerprint_wins_over_the_exception(served, sdk):
    pid, project_dsn = served.new_project(f"{sdk}-fingerprint")
    run_sdk(sdk, project_dsn, "fingerprint")
    found = served.wait_for_issues(pid, total(2))
    assert list(counts(found).values()) == [2]


@pytest.mark.parametrize("sdk", SDKS)
def test_resolved_issue_reopens_on_a_new_event(served, sdk):
    pid, project_dsn = served.new_project(f"{sdk}-regression")
    run_sdk(sdk, project_dsn, "again")
    [issue] = served.wait_for_issues(pid, lambda f: len(f) == 1).values()
    with db.unit_of_work(served.sessions) as session:
        service.resolve(session, project_id=pid, issue_id=issue.id)
    assert served.issues(pid)[issue.title].status == "resolved"
    run_sdk(sdk, project_dsn, "again")
    found = served.wait_for_issues(pid, lambda f: f[issue.title].event_count >= 2)
    assert (found[issue.title].status, found[issue.title].event_count) == ("unresolved", 2)
    assert found[issue.title].id == issue.id


# Last in this module: it stops the shared server to read the server's chDB.
def test_transaction_spans_and_logs_share_the_trace(served):
    runs = {}
    for sdk, scenario in [("python", "trace"), ("node", "trace"), ("node", "trace_static")]:
        pid, project_dsn = served.new_project(f"{sdk}-{scenario}")
        runs[(sdk, scenario)] = pid, run_sdk(sdk, project_dsn, scenario)
    # Stopping flushes the spool into ClickHouse and releases chDB for the queries below.
    served.server.stop()
    for (sdk, scenario), (pid, trace_id) in runs.items():
        assert len(trace_id) == 32, (sdk, scenario)
        _check_spans(
            served, pid, trace_id, f"GET /e2e/{'py' if sdk == 'python' else 'node'}-checkout"
        )
        _check_logs(served, pid, trace_id)


def _check_spans(served, pid, trace_id, name):
    spans = served.clickhouse_rows(
        "SELECT span_id, parent_span_id, is_segment, op, segment_name, trace_id, segment_id "
        f"FROM spans WHERE project_id = {pid}"
    )
    assert len(spans) == 3
    [root] = [s for s in spans if s[2]]
    assert (root[1], root[3], root[4]) == ("", "http.server", name)
    children = [s for s in spans if not s[2]]
    assert sorted(c[3] for c in children) == ["db.query", "http.client"]
    assert all(c[1] == root[0] and c[4] == name for c in children)
    assert {s[5] for s in spans} == {trace_id}
    assert {s[6] for s in spans} == {root[0]}


def _check_logs(served, pid, trace_id):
    logs = served.clickhouse_rows(
        f"SELECT body, trace_id, span_id FROM logs WHERE project_id = {pid} ORDER BY timestamp"
    )
    assert [row[0] for row in logs] == ["checkout started for bob", "cart loaded"]
    assert {row[1] for row in logs} == {trace_id}
