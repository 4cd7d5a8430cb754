"""Following a project's logs (errortrack.logs.tail) against a real chDB store."""

from __future__ import annotations

import base64
import json
import os
import random
from pathlib import Path

import pytest

from errortrack import paging
from errortrack.analytics import ClickHouse
from errortrack.errors import NotSupported, ValidationError
from errortrack.logs import cursor as list_cursor
from errortrack.logs import tail
from errortrack.logs.filters import LogFilter
from errortrack.logs.query import list_logs
from errortrack.logs.tail import TailCursor, tail_logs
from errortrack.paging import PageRequest
from tests.logs_data import insert_logs, sdk_log


def _follow(store, cursor, *, f=None, per_page=7, project_id=7):
    """Poll until ``more`` is false: the bodies given, and the cursor to poll next."""
    bodies = []
    while True:
        page = tail_logs(store, project_id, f or LogFilter(), per_page, cursor=cursor)
        bodies += [item["body"] for item in page["items"]]
        cursor = tail.decode(page["next_cursor"])
        if not page["more"]:
            return bodies, cursor


def _stored_order(store, project_id=7):
    rows = store.query_rows(
        "SELECT body FROM logs WHERE project_id = {p:UInt64} ORDER BY _block_number, _block_offset",
        {"p": project_id},
    )
    return [row[0] for row in rows]


def test_a_follower_sees_every_log_once_in_the_order_stored_whatever_its_time(clickhouse):
    rng = random.Random(5)
    start = tail_logs(clickhouse, 7, LogFilter(), 10)
    assert start["items"] == [] and start["more"] is False
    cursor, seen, sent = tail.decode(start["next_cursor"]), [], []
    for batch in range(12):
        # Late logs too: times from an hour back to now, so time order is not the order
        # they become readable; another project's logs in the same inserts.
        logs = [
            sdk_log(f"b{batch}-{i}", at=rng.uniform(-3600, 0)) for i in range(rng.randint(0, 9))
        ]
        insert_logs(clickhouse, 7, logs)
        insert_logs(clickhouse, 8, [sdk_log(f"other {batch}")])
        sent.append({log["body"] for log in logs})
        if batch % 3 == 2:
            clickhouse.command("OPTIMIZE TABLE logs FINAL")  # merges keep the numbers
        got, cursor = _follow(clickhouse, cursor, per_page=rng.randint(1, 5))
        seen += got
        assert set(got) == sent[-1] or (not got and not sent[-1])
    assert seen == _stored_order(clickhouse) and len(seen) == len(set(seen))
    # Insert by insert: each batch's logs come after the previous batch's.
    assert [body.split("-")[0] for body in seen] == sorted(
        (body.split("-")[0] for body in seen), key=lambda b: int(b[1:])
    )


def test_concurrent_inserts_are_followed_without_a_miss(clickhouse):
    # Several writers at once (server mode runs one per worker): the engine numbers each
    # insert under the lock that makes it readable, so a number seen never has a smaller,
    # still-invisible one behind it. A follower polling meanwhile misses nothing.
    import concurrent.futures

    cursor = tail.decode(tail_logs(clickhouse, 7, LogFilter(), 1)["next_cursor"])

    def write(writer: int) -> None:
        for n in range(30):
            insert_logs(clickhouse, 7, [sdk_log(f"w{writer}-{n}-{i}", at=-i) for i in range(5)])

    seen: list[str] = []
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        writing = [pool.submit(write, w) for w in range(4)]
        while not all(f.done() for f in writing):
            got, cursor = _follow(clickhouse, cursor, per_page=9)
            seen += got
        for f in writing:
            f.result()
    seen += _follow(clickhouse, cursor)[0]
    assert len(seen) == len(set(seen)) == 4 * 30 * 5
    assert seen == _stored_order(clickhouse)


def test_without_a_cursor_the_logs_stored_last_then_only_what_follows(clickhouse):
    insert_logs(clickhouse, 7, [sdk_log(f"first {i}", at=i) for i in range(4)])
    insert_logs(clickhouse, 7, [sdk_log(f"second {i}", at=-100 + i) for i in range(3)])
    page = tail_logs(clickhouse, 7, LogFilter(), 5)
    assert [i["body"] for i in page["items"]] == ["first 2", "first 3"] + [
        f"second {i}" for i in range(3)
    ]
    assert page["more"] is False
    after = tail.decode(page["next_cursor"])
    assert _follow(clickhouse, after)[0] == []
    insert_logs(clickhouse, 7, [sdk_log("third", at=-5000)])
    assert _follow(clickhouse, after)[0] == ["third"]


def test_the_first_page_looks_past_the_recent_inserts_when_they_hold_too_few(clickhouse):
    # The first page reads the last 64 inserts first; a quiet project's logs are older.
    insert_logs(clickhouse, 7, [sdk_log(f"quiet {i}", at=i) for i in range(3)])
    for i in range(70):
        insert_logs(clickhouse, 8, [sdk_log(f"busy {i}")])
    page = tail_logs(clickhouse, 7, LogFilter(), 2)
    assert [i["body"] for i in page["items"]] == ["quiet 1", "quiet 2"]
    busy = tail_logs(clickhouse, 8, LogFilter(), 3)
    assert [i["body"] for i in busy["items"]] == ["busy 67", "busy 68", "busy 69"]


def test_a_full_page_says_more_and_the_rest_follows(clickhouse):
    cursor = tail.decode(tail_logs(clickhouse, 7, LogFilter(), 1)["next_cursor"])
    insert_logs(clickhouse, 7, [sdk_log(f"log {i}", at=i) for i in range(10)])
    first = tail_logs(clickhouse, 7, LogFilter(), 4, cursor=cursor)
    assert [i["body"] for i in first["items"]] == [f"log {i}" for i in range(4)]
    assert first["more"] is True
    rest = tail_logs(clickhouse, 7, LogFilter(), 100, cursor=tail.decode(first["next_cursor"]))
    assert [i["body"] for i in rest["items"]] == [f"log {i}" for i in range(4, 10)]
    assert rest["more"] is False
    # Exactly a page left: more is read (one row past the page), not guessed.
    insert_logs(clickhouse, 7, [sdk_log("a"), sdk_log("b")])
    exact = tail_logs(clickhouse, 7, LogFilter(), 2, cursor=tail.decode(rest["next_cursor"]))
    assert len(exact["items"]) == 2 and exact["more"] is False


def test_filters_apply_and_a_poll_that_finds_nothing_still_moves_on(clickhouse):
    cursor = tail.decode(tail_logs(clickhouse, 7, LogFilter(), 1)["next_cursor"])
    errors = LogFilter(levels=("error", "fatal"))
    insert_logs(
        clickhouse,
        7,
        [
            sdk_log("fine", level="info"),
            sdk_log("broke", level="error", **{"user.id": "u-1"}),
            sdk_log("broke too", level="error", **{"user.id": "u-2"}),
        ],
    )
    got, cursor = _follow(clickhouse, cursor, f=errors)
    assert got == ["broke", "broke too"]
    insert_logs(clickhouse, 7, [sdk_log("still fine", level="info")])
    before = cursor
    got, cursor = _follow(clickhouse, cursor, f=errors)
    # Nothing matched, but the cursor is past those inserts: the next poll opens
    # only what comes after them.
    assert got == [] and cursor.block > before.block
    with_text = LogFilter(text="TOO")
    insert_logs(clickhouse, 7, [sdk_log("too late"), sdk_log("on time")])
    assert _follow(clickhouse, cursor, f=with_text)[0] == ["too late"]


def test_a_log_stored_between_a_polls_two_reads_comes_with_the_next_poll(clickhouse, monkeypatch):
    # A poll first reads the highest committed insert, then the rows up to it. A row
    # stored in between must not be shown under a number the cursor then passes over,
    # nor shown twice: it waits for the next poll.
    cursor = tail.decode(tail_logs(clickhouse, 7, LogFilter(), 1)["next_cursor"])
    insert_logs(clickhouse, 7, [sdk_log("before")])
    real = clickhouse.query_rows

    def storing(sql, *args, **kwargs):
        if "_block_offset FROM logs" in sql:  # the page's read, after the bound's
            monkeypatch.setattr(clickhouse, "query_rows", real)
            insert_logs(clickhouse, 7, [sdk_log("between")])
            # Merged with the earlier rows: its part's range now starts below the bound.
            clickhouse.command("OPTIMIZE TABLE logs FINAL")
        return real(sql, *args, **kwargs)

    monkeypatch.setattr(clickhouse, "query_rows", storing)
    first = tail_logs(clickhouse, 7, LogFilter(), 10, cursor=cursor)
    assert clickhouse.query_rows is real  # the row was stored between the two reads
    assert [i["body"] for i in first["items"]] == ["before"]
    second = tail_logs(clickhouse, 7, LogFilter(), 10, cursor=tail.decode(first["next_cursor"]))
    assert [i["body"] for i in second["items"]] == ["between"]
    assert _follow(clickhouse, tail.decode(second["next_cursor"]))[0] == []


def test_deleted_logs_are_not_shown_and_the_walk_goes_on(clickhouse):
    cursor = tail.decode(tail_logs(clickhouse, 7, LogFilter(), 1)["next_cursor"])
    insert_logs(clickhouse, 7, [sdk_log(f"log {i}") for i in range(6)])
    clickhouse.command("DELETE FROM logs WHERE body IN ('log 1', 'log 4')")
    got, cursor = _follow(clickhouse, cursor, per_page=2)
    assert got == ["log 0", "log 2", "log 3", "log 5"]
    insert_logs(clickhouse, 7, [sdk_log("after")])
    assert _follow(clickhouse, cursor)[0] == ["after"]


_RESTART = """
import datetime as dt, json, sys
from pathlib import Path
from errortrack.analytics import ClickHouse, migrate
from errortrack.logs import tail
from errortrack.logs.filters import LogFilter
from errortrack.storage.cleanup import delete_older
from tests.logs_data import BASE, insert_logs, sdk_log
data = Path(sys.argv[1])
store = ClickHouse(f"chdb://{data}", database="t")
migrate.apply(store)
saved = data / "cursor.json"
if sys.argv[2] == "before":
    insert_logs(store, 7, [sdk_log("today")])
    insert_logs(store, 7, [sdk_log("late", at=-10 * 86400)])  # the newest insert
    page = tail.tail_logs(store, 7, LogFilter(), 50)
    delete_older(store, BASE - dt.timedelta(days=5), None)  # drops the late log's day
    if sys.argv[3] == "polls":
        page = tail.tail_logs(store, 7, LogFilter(), 50, cursor=tail.decode(page["next_cursor"]))
        assert page["items"] == []
    saved.write_text(json.dumps(page["next_cursor"]))
else:
    insert_logs(store, 7, [sdk_log("first after restart")])
    insert_logs(store, 7, [sdk_log("second after restart")])
    cursor = tail.decode(json.loads(saved.read_text()))
    print(json.dumps([i["body"] for i in tail.tail_logs(store, 7, LogFilter(), 50, cursor=cursor)["items"]]))
"""


@pytest.mark.parametrize("follower", ["polls", "away"])
def test_a_dropped_newest_partition_and_a_restart(tmp_path, follower):
    # Cleanup drops the day holding the newest insert (a log sent late); a restart then
    # numbers new inserts from the highest remaining part again, below the follower's
    # cursor. A follower that polled in between goes on from the highest number left
    # and sees both new logs; one that did not poll misses what was numbered up to its
    # cursor (documented in docs/API.md). A kept cursor missed "first" in both cases.
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    for phase in ("before", "after"):
        run = subprocess.run(
            [sys.executable, "-c", _RESTART, str(tmp_path / "ch"), phase, follower],
            capture_output=True,
            text=True,
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root), "TZ": "UTC"},
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    if follower == "polls":
        assert got == ["first after restart", "second after restart"]
    else:
        assert got == ["second after restart"]


def test_the_part_filter_reads_each_parts_block_range_from_its_name(clickhouse):
    # The tail skips parts by the block range in their names; the names must say what
    # ClickHouse says the ranges are, for fresh, merged and mutated parts, in days and
    # retention partitions alike.
    for days in (0, 40):
        insert_logs(clickhouse, 7, [sdk_log("x", at=-days * 86400)])
        insert_logs(clickhouse, 7, [sdk_log("y", at=-days * 86400)])
    clickhouse.command("OPTIMIZE TABLE logs FINAL")
    insert_logs(clickhouse, 7, [sdk_log("z")])
    clickhouse.command("DELETE FROM logs WHERE body = 'y'")
    parsed = f"{tail._PART_BLOCK.format(2)}, {tail._PART_BLOCK.format(3)}"
    rows = clickhouse.query_rows(
        f"SELECT name, min_block_number, max_block_number, {parsed.replace('_part', 'name')} "
        "FROM system.parts WHERE database = currentDatabase() AND table = 'logs' AND active"
    )
    # Merged (a range) and mutated (a fifth field) parts among them; background merges
    # decide how many parts there are.
    assert any(low < high for _, low, high, *_ in rows)
    assert any(name.count("_") == 4 for name, *_ in rows)
    for name, low, high, parsed_low, parsed_high in rows:
        assert (parsed_low, parsed_high) == (low, high), name


def test_cursors_round_trip_and_anything_else_is_refused():
    for c in (TailCursor(0), TailCursor(7, 0), TailCursor(2**64 - 1, 2**64 - 1)):
        assert tail.decode(c.encode()) == c
    list_one = list_cursor.Cursor("-timestamp", list_cursor._EPOCH, list_cursor.uuid.uuid4())
    for text in (
        "",
        "x" * 500,
        "not base64 !",
        list_one.encode(),  # a logs list cursor is no tail cursor
        TailCursor(1).encode()[:-3],
        _raw(["tail", -1, None]),
        _raw(["tail", 2**64, None]),
        _raw(["tail", True, None]),
        _raw(["tail", 1, False]),
        _raw(["tail", 1.0, None]),
        _raw(["tail", 1]),
        _raw(["list", 1, 1]),
    ):
        with pytest.raises(ValidationError) as caught:
            tail.decode(text)
        assert caught.value.field == "cursor"


def _raw(value):
    # The standard library's json: it writes integers beyond 64 bits, which orjson refuses.
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def test_a_tail_cursor_is_no_logs_list_cursor(clickhouse):
    text = tail_logs(clickhouse, 7, LogFilter(), 1)["next_cursor"]
    with pytest.raises(ValidationError):
        list_cursor.decode(text)
    # And the list still walks as before beside it.
    insert_logs(clickhouse, 7, [sdk_log("x")])
    assert list_logs(clickhouse, 7, LogFilter(), PageRequest())["total_count"] == 1


def test_refused_on_a_cluster_or_a_table_that_numbers_inserts_otherwise(chdb_dir):
    store = ClickHouse(f"chdb://{chdb_dir}", database="default", cluster="somewhere")
    with pytest.raises(NotSupported, match="here: a cluster"):
        tail_logs(store, 7, LogFilter(), 5)
    assert NotSupported.status == 501
    # A Replicated database or ClickHouse Cloud turns the table into another engine.
    other = ClickHouse(f"chdb://{chdb_dir}", database="tail_other_engine")
    other.command("CREATE TABLE logs (project_id UInt64) ENGINE = Log")
    try:
        with pytest.raises(NotSupported, match="here: Log"):
            tail_logs(other, 7, LogFilter(), 5)
    finally:
        other.drop_database()


def test_served_a_follower_gets_every_acknowledged_log_once_while_clients_send(tmp_path):
    # The real server: SDK ingest on its loop, the spool, the writer's batched inserts,
    # and a follower polling the tail over HTTP with a token while four clients send.
    import concurrent.futures
    import time
    import urllib.parse

    import httpx

    from tests.ingest_support import log_envelope, sentry_auth
    from tests.support import served_with_token

    with served_with_token(tmp_path) as (server, token):
        api = httpx.Client(
            base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {token}"}
        )
        made = api.post("/api/projects", json={"name": "tailed"})
        assert made.status_code == 201, made.text
        project = made.json()
        key = urllib.parse.urlsplit(project["dsn"]).username
        tail_url = f"/api/projects/{project['id']}/logs/tail"
        start = api.get(tail_url)
        assert start.status_code == 200 and start.json()["items"] == []
        acked: set[str] = set()

        def send(client_no: int) -> None:
            with httpx.Client(timeout=30) as c:
                for n in range(25):
                    bodies = [f"c{client_no}-{n}-{i}" for i in range(20)]
                    # Times out of order, up to a day back: arrival order is what counts.
                    logs = [
                        {"timestamp": time.time() - (i * 3571 % 86400), "level": "info", "body": b}
                        for i, b in enumerate(bodies)
                    ]
                    resp = c.post(
                        f"{server.url}/api/{project['id']}/envelope/",
                        content=log_envelope(logs),
                        headers=sentry_auth(key),
                    )
                    assert resp.status_code == 200, resp.text
                    acked.update(bodies)

        seen: list[str] = []
        cursor = start.json()["next_cursor"]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            sending = [pool.submit(send, n) for n in range(4)]
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                page = api.get(tail_url, params={"cursor": cursor, "per_page": 37})
                assert page.status_code == 200, page.text
                body = page.json()
                seen += [item["body"] for item in body["items"]]
                cursor = body["next_cursor"]
                if all(f.done() for f in sending) and len(seen) >= len(acked) and not body["more"]:
                    break
                if not body["more"]:
                    time.sleep(0.05)
            for f in sending:
                f.result()
        assert len(acked) == 4 * 25 * 20
        assert len(seen) == len(set(seen)) and set(seen) == acked
        # Bad input: a 400 in the common error shape, naming the parameter.
        for params in (
            {"cursor": "nonsense"},
            {"sort": "timestamp"},
            {"page": "2"},
            {"per_page": "0"},
        ):
            bad = api.get(tail_url, params=params)
            assert bad.status_code == 400, (params, bad.text)
            assert set(bad.json()) == {"error"}
        list_page = api.get(f"/api/projects/{project['id']}/logs", params={"per_page": 1})
        refused = api.get(tail_url, params={"cursor": list_page.json()["next_cursor"]})
        assert refused.status_code == 400 and refused.json()["error"]["field"] == "cursor"


def test_a_page_over_its_byte_budget_ends_early_and_the_rest_follows(clickhouse, monkeypatch):
    cursor = tail.decode(tail_logs(clickhouse, 7, LogFilter(), 1)["next_cursor"])
    insert_logs(clickhouse, 7, [sdk_log(f"{i:02d}" + "z" * 98, at=i) for i in range(30)])
    monkeypatch.setattr(paging, "PAGE_BYTES", 450)
    seen, pages = [], 0
    while True:
        page = tail_logs(clickhouse, 7, LogFilter(), 100, cursor=cursor)
        seen += [item["body"][:2] for item in page["items"]]
        pages += 1
        cursor = tail.decode(page["next_cursor"])
        if not page["more"]:
            break
        assert 1 <= len(page["items"]) < 100
    assert seen == [f"{i:02d}" for i in range(30)] and pages > 30 // 4
    # Without a cursor: the newest logs that fit, oldest of them first.
    first = tail_logs(clickhouse, 7, LogFilter(), 100)
    assert [item["body"][:2] for item in first["items"]] == ["26", "27", "28", "29"]
