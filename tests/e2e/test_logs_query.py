"""The logs query service against a real chDB store, rows built by ingest's row builder."""

import datetime as dt
import uuid

import orjson
import pytest

from errortrack import paging
from errortrack.analytics import migrate
from errortrack.errors import ValidationError
from errortrack.logs import attributes, cursor, query
from errortrack.logs.filters import AttrFilter, LogFilter
from errortrack.logs.query import list_logs, trace_logs
from errortrack.paging import PageRequest
from tests.logs_data import BASE, insert_logs, sdk_log

T1, T2 = "1" * 32, "2" * 32


def _bodies(store, f=None, page=None, project_id=7):
    result = list_logs(store, project_id, f or LogFilter(), page or PageRequest())
    return [item["body"] for item in result["items"]]


@pytest.fixture
def logs(clickhouse):
    insert_logs(
        clickhouse,
        7,
        [
            sdk_log("boot", level="trace", at=1),
            sdk_log("Cache MISS for key", level="debug", at=2, **{"cache.hit": False}),
            sdk_log(
                "request served",
                level="info",
                at=3,
                trace_id=T1,
                span_id="a" * 16,
                **{"http.status_code": 200, "user.id": "u-1"},
            ),
            sdk_log(
                "slow upstream",
                level="warn",
                at=4,
                trace_id=T1,
                span_id="a" * 16,
                **{"http.status_code": 503, "latency": 1.5},
            ),
            sdk_log(
                "Payment FAILED: 100% off_code",
                level="error",
                at=5,
                trace_id=T2,
                span_id="b" * 16,
                **{"http.status_code": {"value": "503", "type": "string"}},
            ),
            sdk_log("disk gone", level="fatal", at=6, **{"user.id": "u-2"}),
            sdk_log("custom level", level="notice", at=7),
        ],
    )
    insert_logs(clickhouse, 8, [sdk_log("other project", level="error", at=8, trace_id=T1)])
    return clickhouse


def test_newest_first_with_every_field(clickhouse):
    rows = insert_logs(
        clickhouse,
        7,
        [
            sdk_log("first", level="info", at=1.25),
            sdk_log(
                "second",
                level="warn",
                at=2.5,
                trace_id=T1,
                span_id="c" * 16,
                count={"value": "7", "type": "integer"},
                ok=True,
                ratio=0.5,
                name="x",
            ),
        ],
        received=BASE + dt.timedelta(seconds=3),
    )
    # As a client reads it: the attributes are the stored bytes (query.stored_json).
    page = orjson.loads(orjson.dumps(list_logs(clickhouse, 7, LogFilter(), PageRequest())))
    assert page["total_count"] == 2
    assert page["items"][0] == {
        "id": rows[1]["id"],
        "level": "warn",
        "severity_number": 13,
        "body": "second",
        "trace_id": T1,
        "span_id": "c" * 16,
        "attributes": {
            "count": {"value": "7", "type": "integer"},
            "ok": {"value": True, "type": "boolean"},
            "ratio": {"value": 0.5, "type": "double"},
            "name": {"value": "x", "type": "string"},
        },
        "timestamp": "2026-11-01T12:00:02.500000Z",
        "ingested_at": "2026-11-01T12:00:03.000000Z",
    }
    # Outside a span the SDK's propagation trace id is not kept.
    assert page["items"][1]["trace_id"] is None
    assert page["items"][1]["span_id"] is None
    assert page["items"][1]["attributes"] == {}


def test_no_filter_lists_one_project_only(logs):
    assert _bodies(logs)[0] == "custom level"
    assert len(_bodies(logs)) == 7
    assert _bodies(logs, project_id=8) == ["other project"]
    assert _bodies(logs, project_id=9) == []


@pytest.mark.parametrize(
    ("levels", "expected"),
    [
        (("error",), ["Payment FAILED: 100% off_code"]),
        (("error", "fatal"), ["disk gone", "Payment FAILED: 100% off_code"]),
        (("trace", "warn"), ["slow upstream", "boot"]),
    ],
)
def test_level_filter_uses_severity(logs, levels, expected):
    assert _bodies(logs, LogFilter(levels=levels)) == expected


def test_unknown_levels_are_listed_but_never_match_a_level_filter(logs):
    page = list_logs(logs, 7, LogFilter(), PageRequest())
    custom = page["items"][0]
    assert (custom["level"], custom["severity_number"]) == ("notice", None)
    all_six = ("trace", "debug", "info", "warn", "error", "fatal")
    assert "custom level" not in _bodies(logs, LogFilter(levels=all_six))


def test_trace_filter(logs):
    assert _bodies(logs, LogFilter(trace_id=T1)) == ["slow upstream", "request served"]
    assert _bodies(logs, LogFilter(trace_id="f" * 32)) == []
    assert [i["body"] for i in trace_logs(logs, 7, T1, 10)[0]] == [
        "request served",
        "slow upstream",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("failed", ["Payment FAILED: 100% off_code"]),
        ("cache miss", ["Cache MISS for key"]),
        ("100%", ["Payment FAILED: 100% off_code"]),
        ("% off", ["Payment FAILED: 100% off_code"]),
        ("off_", ["Payment FAILED: 100% off_code"]),
        # % and _ are literal characters, not wildcards.
        ("o%e", []),
        ("d_sk", []),
        ("nothing like it", []),
    ],
)
def test_text_search(logs, text, expected):
    assert _bodies(logs, LogFilter(text=text)) == expected


def test_time_range_start_inclusive_end_exclusive(logs):
    start, end = BASE + dt.timedelta(seconds=3), BASE + dt.timedelta(seconds=5)
    assert _bodies(logs, LogFilter(start=start, end=end)) == ["slow upstream", "request served"]
    assert _bodies(logs, LogFilter(start=BASE + dt.timedelta(seconds=6.5))) == ["custom level"]
    assert _bodies(logs, LogFilter(end=BASE + dt.timedelta(seconds=2))) == ["boot"]
    with pytest.raises(ValidationError) as err:
        LogFilter(start=end, end=start)
    assert err.value.field == "end"


@pytest.mark.parametrize(
    ("name", "values", "expected"),
    [
        # 503 sent as an integer and "503" sent as a string both equal the text 503.
        ("http.status_code", ("503",), ["Payment FAILED: 100% off_code", "slow upstream"]),
        ("http.status_code", ("200",), ["request served"]),
        (
            "http.status_code",
            ("200", "503"),
            ["Payment FAILED: 100% off_code", "slow upstream", "request served"],
        ),
        ("http.status_code", ("abc",), []),
        # A whole double's text finds the integer too (it found only doubles), not the
        # string "503".
        ("http.status_code", ("503.0",), ["slow upstream"]),
        ("http.status_code", ("5.03e2",), ["slow upstream"]),
        ("http.status_code", ("503.5",), []),
        ("user.id", ("u-2",), ["disk gone"]),
        ("latency", ("1.5",), ["slow upstream"]),
        ("cache.hit", ("false",), ["Cache MISS for key"]),
        # A missing attribute is not "empty" or 0.
        ("user.id", ("",), []),
        ("nope", ("0",), []),
    ],
)
def test_attribute_filter_matches_in_the_attributes_type(logs, name, values, expected):
    assert _bodies(logs, LogFilter(attributes=(AttrFilter(name, values),))) == expected


def test_attribute_filters_combine_with_and(logs):
    f = LogFilter(
        attributes=(AttrFilter("http.status_code", ("503",)),), trace_id=T1, levels=("warn",)
    )
    assert _bodies(logs, f) == ["slow upstream"]
    f = LogFilter(
        attributes=(AttrFilter("http.status_code", ("503",)), AttrFilter("user.id", ("u-1",)))
    )
    assert _bodies(logs, f) == []


def test_sort_by_severity(logs):
    bodies = _bodies(logs, LogFilter(sort="-severity"))
    assert bodies[:3] == ["disk gone", "Payment FAILED: 100% off_code", "slow upstream"]
    assert bodies[-1] == "custom level"  # no severity: last either way
    assert _bodies(logs, LogFilter(sort="severity"))[0] == "boot"
    assert _bodies(logs, LogFilter(sort="timestamp"))[0] == "boot"


def test_pagination_edges(clickhouse):
    insert_logs(clickhouse, 7, [sdk_log(f"log {i}", at=i) for i in range(1, 8)])
    last = list_logs(clickhouse, 7, LogFilter(), PageRequest(page=3, per_page=3))
    assert last["items"][0]["body"] == "log 1"
    assert (last["total_count"], last["total_pages"], len(last["items"])) == (7, 3, 1)
    past = list_logs(clickhouse, 7, LogFilter(), PageRequest(page=4, per_page=3))
    assert (past["items"], past["total_count"], past["page"]) == ([], 7, 4)
    one = list_logs(clickhouse, 7, LogFilter(), PageRequest(page=2, per_page=1))
    assert [i["body"] for i in one["items"]] == ["log 6"]
    assert one["total_pages"] == 7
    big = list_logs(clickhouse, 7, LogFilter(), PageRequest(per_page=1000))
    assert len(big["items"]) == 7 and big["total_pages"] == 1
    # Walking every page of one visits every log once.
    walked = [_bodies(clickhouse, page=PageRequest(page=p, per_page=2)) for p in range(1, 5)]
    assert [b for page in walked for b in page] == [f"log {i}" for i in range(7, 0, -1)]


def test_ties_in_time_page_without_overlap(clickhouse):
    insert_logs(clickhouse, 7, [sdk_log(f"same {i}", at=1) for i in range(5)])
    walked = [_bodies(clickhouse, page=PageRequest(page=p, per_page=2)) for p in range(1, 4)]
    assert sorted(b for page in walked for b in page) == [f"same {i}" for i in range(5)]


def test_empty_project_page(clickhouse):
    assert list_logs(clickhouse, 7, LogFilter(), PageRequest()) == {
        "items": [],
        "total_count": 0,
        "total_count_exact": True,
        "page": 1,
        "per_page": 50,
        "total_pages": 0,
        "next_cursor": None,
    }


def test_short_first_page_is_its_own_exact_total(clickhouse):
    insert_logs(clickhouse, 7, [sdk_log(f"order {i}", at=i) for i in range(1, 8)])
    found = list_logs(clickhouse, 7, LogFilter(text="order"), PageRequest(per_page=10), count_cap=3)
    assert (len(found["items"]), found["total_count"], found["total_count_exact"]) == (7, 7, True)


def test_filtered_counts_stop_at_the_cap_and_say_so(clickhouse):
    insert_logs(clickhouse, 7, [sdk_log(f"order {i}", at=i) for i in range(1, 21)])
    insert_logs(clickhouse, 7, [sdk_log("other", at=30)])
    f = LogFilter(text="order")
    first = list_logs(clickhouse, 7, f, PageRequest(per_page=2), count_cap=5)
    assert [i["body"] for i in first["items"]] == ["order 20", "order 19"]
    assert (first["total_count"], first["total_count_exact"], first["total_pages"]) == (5, False, 3)
    # A page beyond the cap still reads (the count reaches the end of that page) ...
    deep = list_logs(clickhouse, 7, f, PageRequest(page=4, per_page=2), count_cap=5)
    assert [i["body"] for i in deep["items"]] == ["order 14", "order 13"]
    assert (deep["total_count"], deep["total_count_exact"]) == (8, False)
    # ... the last page and the page past the end count exactly.
    last = list_logs(clickhouse, 7, f, PageRequest(page=7, per_page=3), count_cap=5)
    assert [i["body"] for i in last["items"]] == ["order 2", "order 1"]
    assert (last["total_count"], last["total_count_exact"], last["total_pages"]) == (20, True, 7)
    past = list_logs(clickhouse, 7, f, PageRequest(page=8, per_page=3), count_cap=5)
    assert (past["items"], past["total_count"], past["total_count_exact"]) == ([], 20, True)
    # Under the cap the count is exact; the unfiltered list always counts exactly.
    exact = list_logs(clickhouse, 7, f, PageRequest(per_page=2), count_cap=50)
    assert (exact["total_count"], exact["total_count_exact"]) == (20, True)
    whole = list_logs(clickhouse, 7, LogFilter(), PageRequest(per_page=2), count_cap=5)
    assert (whole["total_count"], whole["total_count_exact"]) == (21, True)


def test_capped_attribute_and_trace_filters(clickhouse):
    insert_logs(
        clickhouse,
        7,
        [sdk_log(f"r{i}", at=i, trace_id=T1, span_id="a" * 16, code=503) for i in range(1, 9)],
    )
    for f in (LogFilter(trace_id=T1), LogFilter(attributes=(AttrFilter("code", ("503",)),))):
        page = list_logs(clickhouse, 7, f, PageRequest(per_page=2), count_cap=4)
        assert (page["total_count"], page["total_count_exact"]) == (4, False), f
        page = list_logs(clickhouse, 7, f, PageRequest(per_page=2), count_cap=8)
        assert (page["total_count"], page["total_count_exact"]) == (8, True), f


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"page": 0}, "page"), ({"per_page": 0}, "per_page"), ({"per_page": 1001}, "per_page")],
)
def test_page_request_limits(kwargs, field):
    with pytest.raises(ValidationError) as err:
        PageRequest(**kwargs)
    assert err.value.field == field


def test_numeric_filter_on_a_name_never_sent_as_string(clickhouse):
    # The string map is then left out of the query; the answer must not change.
    insert_logs(
        clickhouse,
        9,
        [
            sdk_log("a", at=1, code=503),
            sdk_log("b", at=2, code=200),
            sdk_log("c", at=3, other="503"),
        ],
    )
    f = LogFilter(attributes=(AttrFilter("code", ("503", "x")),))
    assert _bodies(clickhouse, f, project_id=9) == ["a"]
    f = LogFilter(attributes=(AttrFilter("other", ("503",)),))
    assert _bodies(clickhouse, f, project_id=9) == ["c"]
    f = LogFilter(attributes=(AttrFilter("absent", ("1",)),))
    assert _bodies(clickhouse, f, project_id=9) == []


def test_attribute_probe_answers_per_project_and_map(clickhouse):
    insert_logs(clickhouse, 9, [sdk_log("a", code=503, flag=True)])
    insert_logs(clickhouse, 10, [sdk_log("b", code={"value": "503", "type": "string"})])
    f = LogFilter(attributes=(AttrFilter("code", ("503",)), AttrFilter("flag", ("true",))))
    assert attributes.absent_maps(clickhouse, 9, f) == {
        ("code", "attr_string"),
        ("code", "attr_float"),
        ("flag", "attr_string"),
    }
    assert attributes.absent_maps(clickhouse, 10, f) == {
        ("code", "attr_int"),
        ("code", "attr_float"),
        ("flag", "attr_bool"),
        ("flag", "attr_string"),
    }
    assert _bodies(clickhouse, f, project_id=9) == ["a"]
    assert _bodies(clickhouse, LogFilter(attributes=f.attributes[:1]), project_id=10) == ["b"]


def test_attribute_probe_reads_the_attr_names_projection(clickhouse):
    # Written differently from the projection's aggregates, the probe would silently read
    # every typed map of the project instead (correct, but a scan).
    insert_logs(clickhouse, 9, [sdk_log("a", code=503)])
    sql, params = attributes.probe_query(9, [("code", "attr_int"), ("code", "attr_string")])
    assert clickhouse.query_rows(sql, params, settings={"force_optimize_projection": 1}) == [
        (True, False)
    ]
    plan = "\n".join(row[0] for row in clickhouse.query_rows(f"EXPLAIN {sql}", params))
    assert "ReadFromMergeTree (attr_names)" in plan


def test_string_attribute_filters_are_exact_whatever_keys_and_values_hold(clickhouse):
    """String filters go through key=value tokens (attributes.STRING_PAIRS); the length
    prefix must keep a key holding "=" or ":" apart from a value holding them."""
    insert_logs(
        clickhouse,
        11,
        [
            sdk_log("a", at=1, **{"a=b": "c"}),
            sdk_log("b", at=2, **{"a": "b=c"}),
            sdk_log("c", at=3, **{"1:a": "x", "é k": "ü:v=w"}),
            sdk_log("d", at=4, **{"a": ""}),
            sdk_log("e", at=5, **{"A": "B=C", "a": {"value": 7, "type": "integer"}}),
        ],
    )

    def bodies(name, *values):
        return sorted(
            _bodies(clickhouse, LogFilter(attributes=(AttrFilter(name, values),)), project_id=11)
        )

    assert bodies("a=b", "c") == ["a"]
    assert bodies("a", "b=c") == ["b"]
    assert bodies("a", "b") == []
    assert bodies("a", "b=c", "") == ["b", "d"]
    assert bodies("1:a", "x") == ["c"]
    assert bodies("é k", "ü:v=w") == ["c"]
    assert bodies("A", "b=c") == []  # case-sensitive, as sent
    assert bodies("a", "7") == ["e"]  # the integer branch still applies


def test_string_attribute_filters_read_the_pairs_index(clickhouse):
    # Written differently from the index expression, filters would silently read the map
    # of every granule instead (correct, but a scan).
    migration = next(m for m in migrate.load() if m.name == "0009_logs_attr_string_pairs")
    assert f"idx_attr_string_pairs {attributes.STRING_PAIRS} TYPE text" in migration.sql
    insert_logs(clickhouse, 12, [sdk_log("a", **{"user.id": "u-1"})])
    params: dict = {}
    clause = attributes.clause(AttrFilter("user.id", ("u-1",)), "a0", params, frozenset())
    sql = f"SELECT count() FROM logs WHERE project_id = 12 AND {clause}"
    assert clickhouse.query_rows(sql, params) == [(1,)]
    plan = "\n".join(row[0] for row in clickhouse.query_rows(f"EXPLAIN indexes = 1 {sql}", params))
    assert "Name: idx_attr_string_pairs" in plan and "__text_index_" in plan


@pytest.mark.parametrize("sort", ["-severity", "severity"])
def test_severity_sorts_page_through_tied_rows_without_skipping_or_repeating(clickhouse, sort):
    # Three envelopes sent without log times: each envelope's logs share its arrival
    # time. Without id as the last key ClickHouse's partial sort ordered the ties
    # differently for each OFFSET: about a tenth were never listed, others twice.
    for envelope in range(3):
        logs = [sdk_log(f"e{envelope}-{i}", level="error") for i in range(100)]
        for log in logs:
            log["timestamp"] = None
        insert_logs(clickhouse, 7, logs, received=BASE + dt.timedelta(seconds=envelope))
    walked = [
        body
        for p in range(1, 16)
        for body in _bodies(clickhouse, LogFilter(sort=sort), PageRequest(page=p, per_page=20))
    ]
    assert len(walked) == 300 and len(set(walked)) == 300


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        # Before 1000 strftime wrote a year ClickHouse could not read (a 500).
        (dt.datetime(1, 1, 1, tzinfo=dt.UTC), None, 7),
        (dt.datetime(999, 1, 1, tzinfo=dt.UTC), BASE + dt.timedelta(seconds=4), 3),
        (None, dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC), 7),
        (None, dt.datetime(1, 1, 2, tzinfo=dt.UTC), 0),
        (dt.datetime(2400, 1, 1, tzinfo=dt.UTC), dt.datetime(2500, 1, 1, tzinfo=dt.UTC), 0),
    ],
)
def test_times_beyond_what_a_log_can_hold_select_as_the_bounds_do(logs, start, end, expected):
    assert len(_bodies(logs, LogFilter(start=start, end=end))) == expected


def test_a_double_stored_as_minus_zero_is_found_by_zero(clickhouse):
    insert_logs(
        clickhouse,
        7,
        [
            sdk_log("plus", at=1, x={"value": 0.0, "type": "double"}),
            sdk_log("minus", at=2, x={"value": -0.0, "type": "double"}),
            sdk_log("one", at=3, x={"value": 1.0, "type": "double"}),
        ],
    )
    for value in ("0", "-0", "0.0", "-0.0"):
        found = _bodies(clickhouse, LogFilter(attributes=(AttrFilter("x", (value,)),)))
        assert sorted(found) == ["minus", "plus"], value


def test_trace_and_span_ids_are_stored_as_the_filters_compare_them(clickhouse):
    dashed = "ABCDEF01-2345-6789-ABCD-EF0123456789"
    insert_logs(clickhouse, 7, [sdk_log("dashed", trace_id=dashed, span_id="ABCDEF0123456789")])
    [item] = list_logs(clickhouse, 7, LogFilter(), PageRequest())["items"]
    assert (item["trace_id"], item["span_id"]) == (
        "abcdef0123456789abcdef0123456789",
        "abcdef0123456789",
    )
    assert _bodies(clickhouse, LogFilter(trace_id=item["trace_id"])) == ["dashed"]
    assert [log["body"] for log in trace_logs(clickhouse, 7, item["trace_id"], 10)[0]] == ["dashed"]


def _tied_logs(clickhouse, *, parts: int = 3, per_part: int = 100) -> None:
    """Logs sharing few timestamps, in several parts: an envelope's logs sent without a
    time share its arrival time; every third one has a level outside the six."""
    for part in range(parts):
        logs = [
            sdk_log(f"p{part}-{i}", level="notice" if i % 3 == 0 else "error")
            for i in range(per_part)
        ]
        for log in logs:
            log["timestamp"] = None
        insert_logs(clickhouse, 7, logs, received=BASE + dt.timedelta(seconds=part % 2))


def _reference(clickhouse, sort: str) -> list[str]:
    order = {
        "-timestamp": "timestamp DESC, id DESC",
        "timestamp": "timestamp ASC, id ASC",
        "-severity": "severity_number DESC NULLS LAST, timestamp DESC, id DESC",
        "severity": "severity_number ASC NULLS LAST, timestamp DESC, id DESC",
    }[sort]
    rows = clickhouse.query_rows(f"SELECT body FROM logs WHERE project_id = 7 ORDER BY {order}")
    return [row[0] for row in rows]


def _merge(clickhouse) -> None:
    clickhouse.command("OPTIMIZE TABLE logs FINAL")


SORTS = ["-timestamp", "timestamp", "-severity", "severity"]


@pytest.mark.parametrize("sort", SORTS)
def test_numbered_pages_keep_tied_rows_in_id_order_across_merges(clickhouse, sort):
    # The time sorts read ties in storage order: a merge between two pages moved tied
    # rows, so a walk skipped some logs and listed others twice (a reviewer measured
    # 100 of 4,200). Now every sort ends with id, whatever the parts look like.
    _tied_logs(clickhouse)
    walked = []
    for p in range(1, 17):
        walked += _bodies(clickhouse, LogFilter(sort=sort), PageRequest(page=p, per_page=19))
        if p % 4 == 0:
            _merge(clickhouse)
    assert walked == _reference(clickhouse, sort)


@pytest.mark.parametrize("sort", SORTS)
def test_a_text_searchs_pages_picked_by_their_keys_are_the_same_pages(
    clickhouse, sort, monkeypatch
):
    """Past PICK_FROM rows a text search's page is picked by its keys, then read whole
    (``query._picked``); its pages, ties across parts included, are those of one read."""
    from errortrack.logs import query

    _tied_logs(clickhouse)
    insert_logs(clickhouse, 7, [sdk_log(f"spread {i}", at=i) for i in range(-5, 5)])
    f = LogFilter(sort=sort, text="-")  # the tied logs, and the spread ones before BASE
    expected = [body for body in _reference(clickhouse, sort) if "-" in body]
    for pick_from in (10**9, 0):
        monkeypatch.setattr(query, "PICK_FROM", pick_from)
        walked = []
        for p in range(1, 18):
            walked += _bodies(clickhouse, f, PageRequest(page=p, per_page=19))
        assert walked == expected, pick_from


@pytest.mark.parametrize("sort", SORTS)
def test_a_cursor_walk_lists_every_log_once_in_order_across_merges(clickhouse, sort):
    _tied_logs(clickhouse)
    insert_logs(clickhouse, 7, [sdk_log(f"spread {i}", at=i) for i in range(-5, 5)])
    f = LogFilter(sort=sort)
    page = list_logs(clickhouse, 7, f, PageRequest(per_page=23))
    walked = [item["body"] for item in page["items"]]
    while page["next_cursor"]:
        _merge(clickhouse)
        page = list_logs(
            clickhouse, 7, f, PageRequest(per_page=23), cursor=cursor.decode(page["next_cursor"])
        )
        assert page["page"] is None and page["total_count"] == 310
        walked += [item["body"] for item in page["items"]]
    assert walked == _reference(clickhouse, sort)


def test_a_cursor_walk_is_not_pushed_down_by_new_logs(clickhouse):
    insert_logs(clickhouse, 7, [sdk_log(f"old {i}", at=i) for i in range(10)])
    first = list_logs(clickhouse, 7, LogFilter(), PageRequest(per_page=4))
    # Newer logs arrive mid-walk: page 2 by number would repeat "old 6" and "old 7".
    insert_logs(clickhouse, 7, [sdk_log(f"new {i}", at=100 + i) for i in range(2)])
    after = cursor.decode(first["next_cursor"])
    second = list_logs(clickhouse, 7, LogFilter(), PageRequest(per_page=4), cursor=after)
    assert [i["body"] for i in second["items"]] == ["old 5", "old 4", "old 3", "old 2"]
    assert second["total_count"] == 12


def test_a_numbered_page_hands_on_to_a_cursor(clickhouse):
    _tied_logs(clickhouse, parts=2, per_part=30)
    f = LogFilter()
    third = list_logs(clickhouse, 7, f, PageRequest(page=3, per_page=7))
    rest = list_logs(
        clickhouse, 7, f, PageRequest(per_page=100), cursor=cursor.decode(third["next_cursor"])
    )
    assert [i["body"] for i in rest["items"]] == _reference(clickhouse, "-timestamp")[21:]
    assert rest["next_cursor"] is None


def test_a_cursor_keeps_to_its_filter_and_sort(clickhouse):
    _tied_logs(clickhouse, parts=1, per_part=30)
    f = LogFilter(levels=("error",))
    first = list_logs(clickhouse, 7, f, PageRequest(per_page=5))
    rest = list_logs(
        clickhouse, 7, f, PageRequest(per_page=100), cursor=cursor.decode(first["next_cursor"])
    )
    assert len(first["items"]) + len(rest["items"]) == first["total_count"] == 20
    with pytest.raises(ValidationError, match="continues sort=-timestamp") as caught:
        list_logs(
            clickhouse,
            7,
            LogFilter(sort="timestamp"),
            PageRequest(),
            cursor=cursor.decode(first["next_cursor"]),
        )
    assert caught.value.field == "cursor"


def test_a_full_last_page_has_no_cursor(clickhouse):
    # Whether more follows is read (one row past the page), not guessed from the page
    # being full: no cursor to an empty page.
    insert_logs(clickhouse, 7, [sdk_log(f"log {i}", at=i) for i in range(4)])
    for sort in SORTS:
        full = list_logs(clickhouse, 7, LogFilter(sort=sort), PageRequest(per_page=4))
        assert (len(full["items"]), full["next_cursor"]) == (4, None)
        first = list_logs(clickhouse, 7, LogFilter(sort=sort), PageRequest(per_page=2))
        assert first["next_cursor"] is not None


def test_rows_deleted_between_a_pages_queries_do_not_end_the_walk(clickhouse, monkeypatch):
    # A tie across the page's edge takes a second query; rows deleted before it (a
    # retention drop, a cleanup) came back as a short page, read as the end of the list:
    # the walk stopped with older logs never shown.
    insert_logs(clickhouse, 7, [sdk_log(f"r{i}", at=i // 2) for i in range(40)])
    first = list_logs(clickhouse, 7, LogFilter(), PageRequest(per_page=5))
    after = cursor.decode(first["next_cursor"])
    planned = list_logs(clickhouse, 7, LogFilter(), PageRequest(per_page=4), cursor=after)
    doomed = [item["body"] for item in planned["items"][1:3]]
    real = clickhouse.query_rows

    def deleting(sql, *args, **kwargs):
        if "timestamp IN" in sql:  # the page's second query: delete just before it
            monkeypatch.setattr(clickhouse, "query_rows", real)
            clickhouse.command(f"DELETE FROM logs WHERE body IN {tuple(doomed)}")
        return real(sql, *args, **kwargs)

    monkeypatch.setattr(clickhouse, "query_rows", deleting)
    second = list_logs(clickhouse, 7, LogFilter(), PageRequest(per_page=4), cursor=after)
    assert clickhouse.query_rows is real  # the second query ran, after the delete
    assert len(second["items"]) < 4 and second["next_cursor"] is not None
    rest = list_logs(
        clickhouse,
        7,
        LogFilter(),
        PageRequest(per_page=100),
        cursor=cursor.decode(second["next_cursor"]),
    )
    walked = [i["body"] for page in (first, second, rest) for i in page["items"]]
    assert sorted(walked) == sorted({f"r{i}" for i in range(40)} - set(doomed))


def test_the_page_orders_ids_as_clickhouse_does(clickhouse):
    # Pages settle ties among their own rows in Python; cursors compare ids in
    # ClickHouse, which orders a UUID by its second half first. The two must agree.
    ids = [uuid.uuid4() for _ in range(500)] + [uuid.UUID(int=1), uuid.UUID(int=1 << 64)]
    rows = clickhouse.query_rows(
        "SELECT u FROM (SELECT arrayJoin({ids:Array(UUID)}) AS u) ORDER BY u", {"ids": ids}
    )
    at = dt.datetime(2026, 1, 1)
    ours = sorted(ids, key=lambda i: query._time_and_id((i, *[None] * 6, at)))
    assert [uuid.UUID(str(row[0])) for row in rows] == ours


@pytest.mark.parametrize("sort", ["-timestamp", "timestamp"])
@pytest.mark.parametrize("per_page", [1, 2, 3, 4, 7])
def test_pages_over_pairs_of_tied_logs_match_the_full_sort(clickhouse, sort, per_page):
    # Pairs share a time: a page edge falls inside a pair (the tied path) or between
    # pairs (one read, ties settled in the page), depending on per_page and the page.
    logs = [sdk_log(f"t{i}-{k}", at=i) for i in range(12) for k in range(2)]
    insert_logs(clickhouse, 7, logs[::2])
    insert_logs(clickhouse, 7, logs[1::2])
    f = LogFilter(sort=sort)
    walked = [
        body for p in range(1, 26) for body in _bodies(clickhouse, f, PageRequest(p, per_page))
    ]
    assert walked == _reference(clickhouse, sort)
    page = list_logs(clickhouse, 7, f, PageRequest(per_page=per_page))
    by_cursor = [item["body"] for item in page["items"]]
    while page["next_cursor"]:
        after = cursor.decode(page["next_cursor"])
        page = list_logs(clickhouse, 7, f, PageRequest(per_page=per_page), cursor=after)
        by_cursor += [item["body"] for item in page["items"]]
    assert by_cursor == walked


def test_bare_attribute_values_are_found_and_come_back_as_sent(clickhouse):
    log = sdk_log("bare", at=1)
    log["attributes"] = {"k": 5, "w": "x", "n": None}
    insert_logs(clickhouse, 7, [log, sdk_log("typed", at=2, k=6)])
    assert _bodies(clickhouse, LogFilter(attributes=(AttrFilter("k", ("5",)),))) == ["bare"]
    assert _bodies(clickhouse, LogFilter(attributes=(AttrFilter("w", ("x",)),))) == ["bare"]
    (item,) = list_logs(clickhouse, 7, LogFilter(text="bare"), PageRequest())["items"]
    assert orjson.loads(orjson.dumps(item["attributes"])) == {"k": 5, "w": "x", "n": None}


def _size(item) -> int:
    return len(item["body"]) + len(orjson.dumps(item["attributes"]))


@pytest.mark.parametrize("sort", SORTS)
def test_a_page_over_its_byte_budget_ends_early_and_its_cursor_goes_on(
    clickhouse, sort, monkeypatch
):
    # A page of 1000 logs of 1 MB was 954 MiB and cost the worker +2.7 GB; any DSN can
    # send such logs. Pages now end once their bodies and attributes pass a budget.
    _tied_logs(clickhouse, parts=3, per_part=40)
    monkeypatch.setattr(paging, "PAGE_BYTES", 60)
    f = LogFilter(sort=sort)
    page = list_logs(clickhouse, 7, f, PageRequest(per_page=50))
    walked, sizes = [], []
    while True:
        items = page["items"]
        assert items, "a page holds at least one log"
        walked += [item["body"] for item in items]
        sizes.append(sum(_size(item) for item in items))
        if not page["next_cursor"]:
            break
        assert len(items) < 50  # cut by the budget, not by per_page
        page = list_logs(
            clickhouse,
            7,
            f,
            PageRequest(per_page=50),
            cursor=cursor.decode(page["next_cursor"]),
        )
    assert walked == _reference(clickhouse, sort)
    assert max(sizes) <= 60 and len(sizes) >= sum(sizes) // 60 > 10


def test_a_log_larger_than_the_budget_comes_alone(clickhouse, monkeypatch):
    insert_logs(clickhouse, 7, [sdk_log("x" * 5000, at=1), sdk_log("small", at=0)])
    monkeypatch.setattr(paging, "PAGE_BYTES", 1000)
    first = list_logs(clickhouse, 7, LogFilter(), PageRequest(per_page=10))
    assert [len(i["body"]) for i in first["items"]] == [5000]
    assert first["total_count"] == 2 and first["next_cursor"]
    rest = list_logs(
        clickhouse,
        7,
        LogFilter(),
        PageRequest(per_page=10),
        cursor=cursor.decode(first["next_cursor"]),
    )
    assert [i["body"] for i in rest["items"]] == ["small"] and rest["next_cursor"] is None
    # A later numbered page is cut the same way (its next_cursor goes on from its end).
    monkeypatch.setattr(paging, "PAGE_BYTES", 10)
    second = list_logs(clickhouse, 7, LogFilter(), PageRequest(page=2, per_page=1))
    assert [i["body"] for i in second["items"]] == ["small"]


@pytest.mark.parametrize("sort", ["-timestamp", "timestamp"])
def test_a_numbered_page_s_budget_counts_its_own_logs_only(clickhouse, sort, monkeypatch):
    # The row read before a numbered page (to see whether the page's edge is tied)
    # counted toward the page's budget: page 2 was cut at 10 bytes of its own, and the
    # log it left out was shown on no numbered page.
    in_order = ["a" * 5, "b" * 95, "c" * 5, "d" * 5, "e" * 5]
    sent = in_order[::-1] if sort == "-timestamp" else in_order
    insert_logs(clickhouse, 7, [sdk_log(body, at=i) for i, body in enumerate(sent)])
    monkeypatch.setattr(paging, "PAGE_BYTES", 100)

    def page(n):
        found = list_logs(clickhouse, 7, LogFilter(sort=sort), PageRequest(page=n, per_page=2))
        return [item["body"] for item in found["items"]]

    assert page(1) == ["a" * 5]  # with "b" it passes 100 bytes
    assert page(2) == ["c" * 5, "d" * 5]
    assert page(3) == ["e" * 5]


def test_the_trace_view_says_when_the_budget_left_logs_out(clickhouse, monkeypatch):
    insert_logs(
        clickhouse, 7, [sdk_log("y" * 400, at=i, trace_id=T1, span_id="a" * 16) for i in range(5)]
    )
    monkeypatch.setattr(paging, "PAGE_BYTES", 1000)
    logs, cut = trace_logs(clickhouse, 7, T1, 10)
    assert len(logs) == 2 and cut is True
    monkeypatch.undo()
    assert trace_logs(clickhouse, 7, T1, 10)[1] is False


def test_on_a_cluster_the_pick_is_a_global_in_which_reads_the_same(clickhouse, monkeypatch):
    """On a cluster ``logs`` is a Distributed table, where a plain IN subquery is refused
    (distributed_product_mode) or picks per shard (diff review): the pick is a GLOBAL IN
    there, and it reads the same rows (here, on one node)."""
    from errortrack.logs import query

    assert "GLOBAL IN" in query._picked("x", "timestamp", True, cluster=True)
    assert "GLOBAL IN" not in query._picked("x", "timestamp", True)
    _tied_logs(clickhouse)
    monkeypatch.setattr(query, "PICK_FROM", 0)
    f = LogFilter(sort="-severity", text="-")
    expected = [body for body in _reference(clickhouse, "-severity") if "-" in body]
    monkeypatch.setattr(clickhouse, "cluster", "any")  # what _page reads of it
    walked = []
    for p in range(1, 18):
        walked += _bodies(clickhouse, f, PageRequest(page=p, per_page=19))
    assert walked == expected
