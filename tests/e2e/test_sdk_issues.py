"""The real sentry-sdk against a real `errortrack serve`: errors grouped into issues,
regressions, custom fingerprints, transactions stored as linked spans, logs in the trace."""

from __future__ import annotations

import pytest

from errortrack import db
from errortrack.issues import service
from tests.e2e.sdk_issues_support import Served, run_python_sdk
from tests.support import Server, scratch_database, server_env

pytestmark = pytest.mark.e2e


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


def test_same_exception_twice_is_one_issue_and_another_is_a_second(served):
    pid, project_dsn = served.new_project("py-errors")
    run_python_sdk(project_dsn, "errors")
    found = served.wait_for_issues(pid, lambda f: sum(counts(f).values()) >= 3)
    assert counts(found) == {"ValueError: order 12 has no items": 2, "KeyError: 'missing'": 1}
    issue = found["ValueError: order 12 has no items"]
    assert (issue.status, issue.level, issue.culprit) == (
        "unresolved",
        "error",
        "__main__ in divide",
    )


def test_capture_message_groups_by_normalised_message(served):
    pid, project_dsn = served.new_project("py-messages")
    run_python_sdk(project_dsn, "messages")
    found = served.wait_for_issues(pid, lambda f: sum(counts(f).values()) >= 2)
    assert counts(found) == {"payment 12 declined by bank 0x7f3a9c21": 2}
    assert found["payment 12 declined by bank 0x7f3a9c21"].level == "info"


def test_custom_fingerprint_wins_over_the_exception(served):
    pid, project_dsn = served.new_project("py-fingerprint")
    run_python_sdk(project_dsn, "fingerprint")
    found = served.wait_for_issues(pid, lambda f: sum(counts(f).values()) >= 2)
    assert list(counts(found).values()) == [2]


def test_resolved_issue_reopens_on_a_new_event(served):
    pid, project_dsn = served.new_project("py-regression")
    run_python_sdk(project_dsn, "again")
    [issue] = served.wait_for_issues(pid, lambda f: len(f) == 1).values()
    with db.unit_of_work(served.sessions) as session:
        service.resolve(session, project_id=pid, issue_id=issue.id)
    assert served.issues(pid)[issue.title].status == "resolved"
    run_python_sdk(project_dsn, "again")
    found = served.wait_for_issues(pid, lambda f: f[issue.title].event_count >= 2)
    assert (found[issue.title].status, found[issue.title].event_count) == ("unresolved", 2)
    assert found[issue.title].id == issue.id


# Last in this module: it stops the shared server to read the server's chDB.
def test_transaction_spans_and_logs_share_the_trace(served):
    pid, project_dsn = served.new_project("py-trace")
    trace_id = run_python_sdk(project_dsn, "trace")
    assert len(trace_id) == 32
    # Stopping flushes the spool into ClickHouse and releases chDB for the query below.
    served.server.stop()
    spans = served.clickhouse_rows(
        "SELECT span_id, parent_span_id, is_segment, op, segment_name, trace_id "
        f"FROM spans WHERE project_id = {pid}"
    )
    assert len(spans) == 3
    [root] = [s for s in spans if s[2]]
    assert (root[1], root[3], root[4]) == ("", "http.server", "GET /e2e/py-checkout")
    children = [s for s in spans if not s[2]]
    assert sorted(c[3] for c in children) == ["db.query", "http.client"]
    assert all(c[1] == root[0] for c in children)
    assert {s[5] for s in spans} == {trace_id}
    logs = served.clickhouse_rows(
        f"SELECT body, trace_id, span_id FROM logs WHERE project_id = {pid} ORDER BY timestamp"
    )
    assert [row[0] for row in logs] == ["checkout started for bob", "cart loaded"]
    assert {row[1] for row in logs} == {trace_id}
    assert logs[0][2] == root[0]
