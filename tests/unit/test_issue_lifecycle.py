"""An issue's life after its first event: when a new event reopens a resolved issue (a
regression), and which event the title, culprit and level come from.

On the real relational store (SQLite, or PostgreSQL with ERRORTRACK_TEST_DATABASE_URL)
through the real grouping hook, with rows built by the real event handler."""

import datetime as dt

import orjson
import pytest
import sqlalchemy as sa

from errortrack import db
from errortrack.ingest.items import ItemContext
from errortrack.issues import service
from errortrack.issues.events import handle_event
from errortrack.issues.grouping import GroupingHook
from errortrack.issues.store import REGRESSION_MARGIN
from errortrack.models import Issue
from errortrack.projects.service import create_project

SECOND = dt.timedelta(seconds=1)


@pytest.fixture
def sessions(engine):
    return db.make_sessionmaker(engine)


@pytest.fixture
def project_id(sessions):
    with db.unit_of_work(sessions) as session:
        return create_project(session, name="shop").id


@pytest.fixture
def hook(sessions, clock):
    return GroupingHook(sessions, clock=clock)


def now():
    return dt.datetime.now(dt.UTC)


def row(
    project_id,
    at,
    value="boom",
    *,
    module="app",
    function="f",
    level="error",
):
    """One event row as ingest builds it, dated ``at`` and received then. A custom
    fingerprint keeps every event in one issue whatever its value, frame and level."""
    event = {
        "fingerprint": ["checkout"],
        "level": level,
        "exception": {
            "values": [
                {
                    "type": "KeyError",
                    "value": value,
                    "stacktrace": {
                        "frames": [{"module": module, "function": function, "in_app": True}]
                    },
                }
            ]
        },
        "timestamp": at.timestamp(),
    }
    [out] = handle_event(orjson.dumps(event), {}, ItemContext(project_id, at, 30, {})).events
    return out


def the_issue(sessions):
    with db.unit_of_work(sessions) as session:
        [issue] = session.scalars(sa.select(Issue))
        session.expunge(issue)
        return issue


def resolve(sessions, project_id, issue_id, **kw):
    with db.unit_of_work(sessions) as session:
        return service.resolve(session, project_id=project_id, issue_id=issue_id, **kw)


# -- regressions ------------------------------------------------------------------------


def test_an_event_older_than_the_resolution_is_counted_but_does_not_reopen(
    hook, sessions, project_id
):
    """An event dated before the issue was resolved (an SDK's offline buffer, or one in
    flight while someone pressed resolve) is not a regression: the fix was not out yet.
    Older than REGRESSION_MARGIN, that is: within it, the sender's clock may be slow."""
    t0 = now() - dt.timedelta(hours=3)
    [first] = hook([row(project_id, t0)], "b1")
    resolve(sessions, project_id, first["issue_id"])  # now: an hour after t0
    hook([row(project_id, t0 + dt.timedelta(minutes=10))], "b2")
    issue = the_issue(sessions)
    assert (issue.status, issue.event_count) == ("resolved", 2)
    assert issue.last_seen == t0 + dt.timedelta(minutes=10)


def test_an_event_after_the_resolution_reopens_it(hook, sessions, project_id):
    t0 = now() - dt.timedelta(hours=1)
    [first] = hook([row(project_id, t0)], "b1")
    resolve(sessions, project_id, first["issue_id"])
    hook([row(project_id, now() + SECOND)], "b2")
    issue = the_issue(sessions)
    assert (issue.status, issue.event_count, issue.resolved_at) == ("unresolved", 2, None)


def test_a_batch_reopens_when_its_newest_event_is_after_the_resolution(hook, sessions, project_id):
    """The batch's events of one issue are one row of the UPDATE: its newest decides."""
    t0 = now() - dt.timedelta(hours=1)
    [first] = hook([row(project_id, t0)], "b1")
    resolve(sessions, project_id, first["issue_id"])
    hook([row(project_id, now() + SECOND), row(project_id, t0 + SECOND)], "b2")
    assert (the_issue(sessions).status, the_issue(sessions).event_count) == ("unresolved", 3)


def test_the_margin_reopens_on_events_just_before_the_resolution(hook, sessions, project_id):
    """A sender's clock a few minutes slow must not hide a regression: events dated up to
    REGRESSION_MARGIN (ingest's clock-drift threshold) before the resolution still
    reopen; older ones do not."""
    t0 = now() - dt.timedelta(hours=1)
    [first] = hook([row(project_id, t0)], "b1")
    resolved_at = t0 + dt.timedelta(minutes=30)
    resolve(sessions, project_id, first["issue_id"], now=resolved_at)
    assert the_issue(sessions).resolved_at == resolved_at
    hook([row(project_id, resolved_at - REGRESSION_MARGIN - SECOND)], "b2")
    assert the_issue(sessions).status == "resolved"
    hook([row(project_id, resolved_at - REGRESSION_MARGIN + SECOND)], "b3")
    issue = the_issue(sessions)
    assert (issue.status, issue.event_count, issue.resolved_at) == ("unresolved", 3, None)


def test_a_sender_two_minutes_slow_still_reopens_it(hook, sessions, project_id):
    """The bug comes back right after the resolve on a browser whose clock is two
    minutes slow (sent_at as slow, so ingest moves nothing): with a 5 s margin it stayed
    resolved, the regression hidden."""
    t0 = now() - dt.timedelta(hours=1)
    [first] = hook([row(project_id, t0)], "b1")
    resolved = resolve(sessions, project_id, first["issue_id"])
    assert resolved["status"] == "resolved"
    hook([row(project_id, now() - dt.timedelta(minutes=2))], "b2")
    assert the_issue(sessions).status == "unresolved"


def test_resolved_at_is_kept_while_resolved_and_cleared_otherwise(hook, sessions, project_id):
    t0 = now() - dt.timedelta(hours=1)
    [first] = hook([row(project_id, t0)], "b1")
    issue_id = first["issue_id"]
    resolve(sessions, project_id, issue_id, now=t0 + SECOND)
    # Resolving again changes nothing: the issue has been resolved since then.
    resolve(sessions, project_id, issue_id, now=t0 + 9 * SECOND)
    assert the_issue(sessions).resolved_at == t0 + SECOND
    for change in (service.mute, service.unresolve):
        resolve(sessions, project_id, issue_id, now=t0 + SECOND)
        with db.unit_of_work(sessions) as session:
            change(session, project_id=project_id, issue_id=issue_id)
        assert the_issue(sessions).resolved_at is None
    with db.unit_of_work(sessions) as session:
        out = service.set_status(
            session, project_id=project_id, issue_id=issue_id, status="resolved", now=t0
        )
    assert out["status"] == "resolved" and the_issue(sessions).resolved_at == t0


def test_a_resolved_issue_without_a_resolution_time_reopens_on_any_event(
    hook, sessions, project_id
):
    """resolved_at NULL on a resolved issue (written outside the services) is taken as
    "resolved before anything was seen"."""
    t0 = now() - dt.timedelta(hours=1)
    [first] = hook([row(project_id, t0 + SECOND)], "b1")
    with db.unit_of_work(sessions) as session:
        session.execute(
            sa.update(Issue)
            .where(Issue.id == first["issue_id"])
            .values(status="resolved", resolved_at=None)
        )
    hook([row(project_id, t0)], "b2")
    assert the_issue(sessions).status == "unresolved"


# -- title, culprit and level -----------------------------------------------------------


def test_title_culprit_and_level_follow_the_newest_event(hook, sessions, project_id):
    t0 = now() - dt.timedelta(hours=1)
    hook([row(project_id, t0 + SECOND, "first")], "b1")
    # The batch's newest event is not its last: the newest names the issue.
    newest = row(project_id, t0 + 5 * SECOND, "second", module="shop.views", level="fatal")
    older = row(project_id, t0 + 3 * SECOND, "middle", function="g", level="warning")
    hook([newest, older], "b2")
    issue = the_issue(sessions)
    assert (issue.title, issue.culprit, issue.level) == (
        "KeyError: second",
        "shop.views in f",
        "fatal",
    )
    # A late event, older than the issue's last seen, is counted and changes none of them.
    hook([row(project_id, t0 + 2 * SECOND, "late", function="h", level="info")], "b3")
    issue = the_issue(sessions)
    assert (issue.title, issue.culprit, issue.level, issue.event_count) == (
        "KeyError: second",
        "shop.views in f",
        "fatal",
        4,
    )
    # One as new as the last seen does (it arrived later).
    hook([row(project_id, t0 + 5 * SECOND, "again", level="error")], "b4")
    issue = the_issue(sessions)
    assert (issue.title, issue.culprit, issue.level) == ("KeyError: again", "app in f", "error")


def test_a_new_issue_is_named_after_the_newest_event_of_its_batch(hook, sessions, project_id):
    t0 = now() - dt.timedelta(hours=1)
    hook([row(project_id, t0 + 5 * SECOND, "later"), row(project_id, t0 + SECOND, "earlier")], "b1")
    issue = the_issue(sessions)
    assert (issue.title, issue.first_seen, issue.last_seen) == (
        "KeyError: later",
        t0 + SECOND,
        t0 + 5 * SECOND,
    )


def test_a_resolved_issue_takes_a_late_events_name_only_if_it_is_the_newest(
    hook, sessions, project_id
):
    """Both fixes in one UPDATE: a late event leaves the issue resolved, and names it only
    when it is still the newest the issue has seen."""
    t0 = now() - dt.timedelta(hours=1)
    [first] = hook([row(project_id, t0 + 2 * SECOND, "first")], "b1")
    resolve(sessions, project_id, first["issue_id"])
    hook([row(project_id, t0 + SECOND, "older")], "b2")
    hook([row(project_id, t0 + 3 * SECOND, "newer")], "b3")
    issue = the_issue(sessions)
    assert (issue.status, issue.title, issue.event_count) == ("resolved", "KeyError: newer", 3)
