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
