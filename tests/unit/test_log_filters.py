"""Parsing the text of a logs query: every mistake names its parameter."""

import datetime as dt

import pytest

from errortrack.errors import ValidationError
from errortrack.logs.filters import (
    AttrFilter,
    LogFilter,
    as_float,
    as_int,
    as_whole,
    attr_filter_name,
    parse_attr_filters,
    parse_levels,
    parse_text,
    parse_time,
    parse_trace_id,
)
from errortrack.logs.query import where_clause


def _field(call, *args):
    with pytest.raises(ValidationError) as err:
        call(*args)
    return err.value.field


def test_levels_repeated_or_comma_separated():
    assert parse_levels(["error", "fatal"]) == ("error", "fatal")
    assert parse_levels(["error,fatal", "ERROR"]) == ("error", "fatal")
    assert parse_levels([" warning "]) == ("warn",)
    assert LogFilter(levels=("fatal", "error")).severity_numbers == [17, 21]


@pytest.mark.parametrize("raw", [["critical"], ["error,"], [""], ["info,verbose"]])
def test_bad_level(raw):
    assert _field(parse_levels, raw) == "level"


def test_trace_id():
    assert parse_trace_id("ABCDEF00" * 4) == "abcdef00" * 4
    assert (
        parse_trace_id("12345678-1234-1234-1234-123456789abc") == "12345678123412341234123456789abc"
    )
    for bad in ["", "abc", "g" * 32, "a" * 33]:
        assert _field(parse_trace_id, bad) == "trace_id"


def test_text():
    assert parse_text("  disk  ") == "disk"
    assert parse_text("   ") is None
    assert _field(parse_text, "x" * 501) == "q"


def test_times():
    assert parse_time("2026-11-01T12:00:00Z", "start") == dt.datetime(
        2026, 11, 1, 12, tzinfo=dt.UTC
    )
    assert parse_time("2026-11-01T14:00:00+02:00", "end") == dt.datetime(
        2026, 11, 1, 12, tzinfo=dt.UTC
    )
    assert parse_time("2026-11-01", "start") == dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    # RFC 3339 allows lower case: both were read by the OpenAPI "date-time", not by us.
    assert parse_time("2026-11-01t12:00:00z", "start") == dt.datetime(
        2026, 11, 1, 12, tzinfo=dt.UTC
    )
    for bad in ["yesterday", "2026-13-01", "", "1700000000"]:
        assert _field(parse_time, bad, "start") == "start"
    # The offset carries these out of datetime's range (an OverflowError, a 500 before).
    assert _field(parse_time, "0001-01-01T00:00:00+01:00", "start") == "start"
    assert _field(parse_time, "9999-12-31T23:59:59-01:00", "end") == "end"


def test_times_finer_than_a_microsecond_round_up_to_the_next():
    # Logs are kept to the microsecond; Python's fromisoformat cut further digits off, so
    # an inclusive start took a log before it and an exclusive end left out one before
    # it (review, twenty-seventh session). Rounded up, both bounds keep their meaning.
    ten = dt.datetime(2026, 11, 1, 12, 0, 10, tzinfo=dt.UTC)
    micro = dt.timedelta(microseconds=1)
    assert parse_time("2026-11-01T12:00:10.0000001Z", "start") == ten + micro
    assert parse_time("2026-11-01T12:00:10.0000000Z", "end") == ten
    assert parse_time("2026-11-01T12:00:10.000001000Z", "end") == ten + micro
    assert parse_time("2026-11-01T12:00:10.9999999+00:00", "end") == ten + 1_000_000 * micro
    assert parse_time("2026-11-01T12:00:10,0000001Z", "start") == ten + micro
    assert _field(parse_time, "9999-12-31T23:59:59.9999999Z", "end") == "end"


@pytest.mark.parametrize(
    ("text", "integer", "double"),
    [
        ("503", 503, 503.0),
        ("-7", -7, -7.0),
        ("+1", 1, 1.0),
        ("1.5e3", None, 1500.0),
        (".5", None, 0.5),
        ("9223372036854775808", None, 9223372036854775808.0),
        # float() and \d took these; none is a number as a filter's text means one.
        ("\u0665", None, None),  # ARABIC-INDIC DIGIT FIVE
        ("\uff15", None, None),  # FULLWIDTH DIGIT FIVE
        ("5\n", None, None),
        (" 15 ", None, None),
        ("1_5", None, None),
        ("nan", None, None),
        ("inf", None, None),
        ("1e400", None, None),
    ],
)
def test_numeric_filter_values_are_ascii_numbers_only(text, integer, double):
    assert (as_int(text), as_float(text)) == (integer, double)


@pytest.mark.parametrize(
    ("text", "whole"),
    [
        ("1000", 1000),
        ("1000.0", 1000),
        ("1e3", 1000),
        ("-0.0", 0),
        ("1000.5", None),
        ("9223372036854775807", 2**63 - 1),
        ("9.3e18", None),  # beyond Int64
        ("abc", None),
        ("\uff15", None),
        # Wholeness is the text's, not its double's: these round to a whole double (or
        # to 0.0) and found the integers 1 and 0; past 2**53 the double is another
        # integer, and "9007199254740993.0" missed the integer it names.
        ("0.99999999999999999", None),
        ("1.0000000000000001", None),
        ("1e-400", None),
        ("9007199254740993.0", 9007199254740993),
        ("9223372036854775807.000", 2**63 - 1),
        ("9223372036854775808.0", None),
        ("1e99999", None),
        # Exponents Decimal cannot compare (InvalidOperation): a 500 on the logs list.
        ("1e99999999999999999999999", None),
        ("1e-99999999999999999999999", None),
        ("0e-99999999999999999999999", None),  # not even Decimal reads it
        ("0e99999", 0),
        ("12.5e1", 125),
    ],
)
def test_an_integer_attribute_is_found_by_a_whole_doubles_text(text, whole):
    assert as_whole(text) == whole


def test_attribute_params():
    assert attr_filter_name("level") is None
    assert attr_filter_name("attr[http.status_code]") == "http.status_code"
    # Names may hold brackets (no filter on "items[0]" could be written before).
    assert attr_filter_name("attr[items[0]]") == "items[0]"
    assert attr_filter_name("attr[headers[x-id]]") == "headers[x-id]"
    for bad in ["attr[]", "attr", "attr[x", "attr[a]b", "attr[" + "n" * 201 + "]"]:
        assert _field(attr_filter_name, bad) == bad
    params = [("attr[a]", ["1", "2", "1"]), ("page", ["2"]), ("attr[b]", ["x"])]
    assert parse_attr_filters(params) == (AttrFilter("a", ("1", "2")), AttrFilter("b", ("x",)))
    assert _field(parse_attr_filters, [("attr[a]", ["v" * 1001])]) == "attr[a]"
    too_many = [(f"attr[a{i}]", ["1"]) for i in range(21)]
    assert _field(parse_attr_filters, too_many) == "attr"


def test_sort_is_checked():
    assert _field(LogFilter, (), None, None, None, None, (), "body") == "sort"


def test_values_are_bound_not_formatted():
    evil = "x' OR 1=1 --"
    f = LogFilter(text=evil, attributes=(AttrFilter(evil, (evil, "7", "true")),), trace_id="a" * 32)
    sql, params = where_clause(7, f)
    assert evil not in sql
    assert params["text"] == "%x' or 1=1 --%"
    assert params["a0_attr_int"] == [7] and params["a0_attr_bool"] == [True]
    assert "a0_attr_float" in params and params["a0_name"] == evil
    # Maps known not to hold the name are left out; none left matches nothing.
    absent = frozenset({(evil, "attr_string"), (evil, "attr_float")})
    sql, params = where_clause(7, f, absent=absent)
    assert "attr_string" not in sql and "attr_float" not in sql and "attr_int" in sql
    only = LogFilter(attributes=(AttrFilter("n", ("7",)),))
    sql, _ = where_clause(
        7, only, absent=frozenset((("n", "attr_string"), ("n", "attr_int"), ("n", "attr_float")))
    )
    assert sql.endswith(" AND 0")


def test_a_number_filter_value_is_read_in_linear_time():
    # "[0-9]+\.?[0-9]*" tried every split of a run of digits before a character that is
    # no number: 1,000 digits and an "x", 22 ms a value and four reads a value, eight
    # values 0.7 s of one request (API review, twenty-ninth session).
    import time

    started = time.process_time()
    for _ in range(8):
        assert (as_whole("1" * 999 + "x"), as_float("1" * 999 + "x")) == (None, None)
        assert as_float("1" * 100_000 + "e") is None
    assert time.process_time() - started < 0.5
    assert as_float("1" * 300) == float("1" * 300)
