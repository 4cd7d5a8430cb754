"""The server's wall clock stepped while errortrack runs (twenty-fourth session's review:
an NTP correction, a VM resumed, a container started with a wrong clock then fixed).
The clock is injected, so each step is exact; the stores are the real ones."""

from __future__ import annotations

import datetime as dt
import logging

import pytest

from errortrack import db
from errortrack.auth import sessions as login_sessions
from errortrack.auth.throttle import MAX_DELAY, LoginThrottle
from errortrack.auth.tokens import authenticate_token, create_token
from errortrack.errors import Gone, RateLimited
from errortrack.issues import service as issues
from errortrack.models import ApiToken
from errortrack.storage import retention
from errortrack.team.invitations import create_invitation, find_usable
from tests import storage_rows as rows
from tests.access_world import add_user
from tests.ingest_support import send_events
from tests.support import FrozenClock

D = dt.timedelta(days=1)


def test_a_retention_pass_does_not_follow_the_clock_far_ahead(state, clickhouse, caplog):
    """With the clock stepped 100 days ahead, the next pass dropped every partition,
    today's included, for good."""
    today = dt.datetime.now(dt.UTC).replace(microsecond=0)
    rows.add_all(clickhouse, 1, [today], retention=90)
    state.clock.now = today
    job = retention.build_job(state)
    job._run_once()
    state.clock.advance(days=100)
    with caplog.at_level(logging.ERROR, logger="errortrack.storage.retention"):
        job._run_once()
    assert rows.counts(clickhouse) == {"logs": 1, "events": 1, "spans": 1}
    assert "is the host's clock right?" in caplog.text


def test_the_steady_clock_follows_the_wall_clock_within_what_has_passed(caplog):
    wall = FrozenClock()
    steady = [0.0]
    clock = retention.SteadyClock(wall, lambda: steady[0])
    start = clock()
    assert start == wall.now  # the first pass trusts the clock it finds
    wall.advance(hours=1)
    steady[0] += 3600
    assert clock() == wall.now  # an hour that passed is an hour
    wall.advance(days=100)
    steady[0] += 2
    with caplog.at_level(logging.WARNING, logger="errortrack.storage.retention"):
        bounded = clock()
        assert bounded == start + dt.timedelta(hours=1, seconds=2) + retention.CLOCK_SLACK
        steady[0] += 3600
        # Still ahead: catching up CLOCK_SLACK a pass, told once at ERROR.
        assert clock() == bounded + dt.timedelta(hours=1) + retention.CLOCK_SLACK
    assert [r.levelname for r in caplog.records] == ["ERROR", "WARNING"]
    wall.advance(days=-100, minutes=-10)
    assert clock() == wall.now  # behind: followed (it only keeps data longer)


@pytest.mark.parametrize(
    ("resolved_ahead", "next_event_back", "status"),
    [
        # Resolved with the clock 3 h ahead, then the clock put right: a new event was
        # counted and left the issue resolved for 2 h (3 h less the 55-minute margin).
        (dt.timedelta(hours=3), dt.timedelta(0), "unresolved"),
        # On a right clock nothing changes: an event older than the resolution less the
        # margin is counted and leaves it resolved.
        (dt.timedelta(0), dt.timedelta(hours=2), "resolved"),
    ],
)
def test_a_resolution_is_compared_as_if_made_no_later_than_now(
    ingest_world, resolved_ahead, next_event_back, status
):
    world = ingest_world
    pid = world.project_id
    now = world.state.clock()
    event = {"message": "stock sync failed", "timestamp": now.timestamp() - 60}
    send_events(world, pid, [{**event, "event_id": "a" * 32}])
    (issue,) = world.call("viewer", "GET", f"/api/projects/{pid}/issues").json["items"]
    with db.unit_of_work(world.state.sessions) as s:
        issues.resolve(s, project_id=pid, issue_id=issue["id"], now=now + resolved_ahead)
    later = {**event, "event_id": "b" * 32, "timestamp": (now - next_event_back).timestamp()}
    send_events(world, pid, [later])
    after = world.call("viewer", "GET", f"/api/projects/{pid}/issues/{issue['id']}").json
    assert (after["status"], after["count"]) == (status, 2)


def test_a_lockout_does_not_grow_with_a_backward_step():
    """Stepped back 2 h, a 1-minute lockout answered Retry-After: 7260, and the right
    password was refused for 2 h."""
    clock = FrozenClock()
    throttle = LoginThrottle(clock)
    for _ in range(5):
        throttle.check("a@example.com", "10.0.0.1")
        throttle.failed("a@example.com", "10.0.0.1")
    clock.advance(hours=-2)
    with pytest.raises(RateLimited) as caught:
        throttle.check("a@example.com", "10.0.0.1")
    assert caught.value.retry_after <= MAX_DELAY.total_seconds()
    clock.advance(seconds=caught.value.retry_after)
    throttle.check("a@example.com", "10.0.0.1")  # free again


def test_credentials_made_while_the_clock_was_ahead_do_not_outlive_their_lifetime(
    sessions_factory,
):
    now = dt.datetime.now(dt.UTC)
    ahead = now + dt.timedelta(days=365)
    with db.unit_of_work(sessions_factory) as s:
        user = add_user(s, "clock@example.com", "admin")
        login = login_sessions.start_session(s, user_id=user.id, now=ahead)
        invitation = create_invitation(
            s, email="new@example.com", role="member", created_by=user.id, now=ahead
        )
        token = create_token(s, user_id=user.id, description="t", now=ahead)
        assert authenticate_token(s, token.secret, now=ahead) is not None
    with db.unit_of_work(sessions_factory) as s:
        # A 14-day login made a year ahead lived a year once the clock was put right.
        assert login_sessions.resolve_session(s, login.secret, now=now) is None
        with pytest.raises(Gone):
            find_usable(s, invitation.token, now=now)
        # last_used_at stayed a year ahead: "at most once a minute" saw a negative gap.
        assert authenticate_token(s, token.secret, now=now) is not None
    with db.unit_of_work(sessions_factory) as s:
        stored = s.get(ApiToken, token.token.id)
        assert stored is not None and stored.last_used_at == now
        # An NTP step of a second back must not log out a login just made.
        fresh = login_sessions.start_session(s, user_id=user.id, now=now)
        invited = create_invitation(
            s, email="newer@example.com", role="member", created_by=user.id, now=now
        )
        back = now - dt.timedelta(seconds=1)
        assert login_sessions.resolve_session(s, fresh.secret, now=back) is not None
        assert find_usable(s, invited.token, now=back).id == invited.id


@pytest.fixture
def sessions_factory(engine):
    return db.make_sessionmaker(engine)
