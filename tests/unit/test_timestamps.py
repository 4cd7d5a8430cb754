"""SDK timestamps: ISO strings (Python) and float seconds (Node), and the plausibility window."""

import datetime as dt

import pytest

from errortrack import timestamps

T = dt.datetime(2026, 11, 22, 2, 8, 3, 921902, tzinfo=dt.UTC).timestamp()


@pytest.mark.parametrize(
    "value",
    [
        "2026-11-22T02:08:03.921902Z",
        "2026-11-22T02:08:03.921902+00:00",
        "2026-11-22T03:08:03.921902+01:00",
        "2026-11-22T02:08:03.921902",  # naive means UTC, never the server's zone
        T,
        str(T),
    ],
)
def test_parse_accepts_what_sdks_send(value):
    assert timestamps.parse(value) == pytest.approx(T, abs=1e-6)


@pytest.mark.parametrize("value", [None, "", "yesterday", True, {"t": 1}])
def test_parse_refuses_what_is_not_a_time(value):
    assert timestamps.parse(value) is None


def test_clamped_keeps_plausible_times_and_replaces_the_rest():
    assert timestamps.clamped(T - 3600, T) == T - 3600
    assert timestamps.clamped(T + 30, T) == T + 30
    assert timestamps.clamped(T + 3600, T) == T
    assert timestamps.clamped(T - 40 * 86400, T) == T
    assert timestamps.clamped("garbage", T) == T


def test_clamped_moves_by_the_drift_before_judging_the_time():
    day = 86400.0
    # A clock a day behind: its times, a day later, are plausible again.
    assert timestamps.clamped(T - day - 5, T, drift=day) == T - 5
    assert timestamps.clamped(T + day, T, drift=-day) == T
    # Still implausible after the correction: the arrival time.
    assert timestamps.clamped(T - 40 * day, T, drift=day) == T


@pytest.mark.parametrize(
    ("sent_at", "expected"),
    [
        # Relay's rule: 55 minutes or more apart, either way, is the sender's clock.
        (T - 55 * 60, 55 * 60.0),
        (T + 55 * 60, -55 * 60.0),
        (T - 86400, 86400.0),
        (T + 3 * 3600, -3 * 3600.0),
        # Less is network delay, a queued retry or small drift: nothing is moved.
        (T - 55 * 60 + 1, 0.0),
        (T + 55 * 60 - 1, 0.0),
        (T - 20, 0.0),
    ],
)
def test_drift_is_the_difference_from_sent_at_when_it_is_large(sent_at, expected):
    iso = dt.datetime.fromtimestamp(sent_at, dt.UTC).isoformat().replace("+00:00", "Z")
    assert timestamps.drift(iso, T) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("sent_at", [None, "", "not a time", T - 86400, {"t": 1}])
def test_drift_needs_a_readable_sent_at_string(sent_at):
    # SDKs send sent_at as an ISO string; anything else corrects nothing.
    assert timestamps.drift(sent_at, T) == 0.0
