"""Following logs: GET /api/projects/<id>/logs/tail against the raw queries, 10 M logs.

    TZ=UTC .venv/bin/python -m bench.tail_logs [--rows 10000000] [--runs 60]
        [--dir /tmp/errortrack-bench-tail] [--reload]

1. Loads ``--rows`` logs as ``bench.query_logs`` does (5 projects, 7 days, merged), then
   stores ``--inserts`` more inserts of 5,000 recent logs each, one at a time as the
   ingest writer does, so that the newest rows sit in small parts beside the merged week.
2. For each case, alternates an API call (the real Falcon app in this process, bearer
   token, permission check on SQLite, JSON) and the raw query for the same answer,
   each ``--runs`` times, on a random project (weighted by size):
   - a poll that finds nothing new: the cursor at the last stored insert (the API then
     reads only the bound);
   - a poll 1 insert behind, and one 20 inserts behind: the next page of 50;
   - the first page: the 50 logs stored last.
   Raw is the query as a person would write it from the table's columns:
   ``_block_number``/``_block_offset`` with ``ORDER BY`` and ``LIMIT``. The API adds the
   bound read from ``system.parts`` and the part filter on ``_part``'s block range
   (errortrack.logs.tail). Both sides' rows are checked to be the same, untimed.
3. Prints p50/p99 per case and the API/raw ratio of p99s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import sys
import time
from pathlib import Path

os.environ["TZ"] = "UTC"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.query_logs import _project, _timed, build_app, pct
from bench.query_logs_data import open_loaded
from errortrack.analytics import ClickHouse
from errortrack.logs.tail import TailCursor

_COLS = "toString(id), _block_number, _block_offset"
_LIVE = "startsWith(body, 'live ')"


def _store_recent(store: ClickHouse, inserts: int) -> None:
    """``inserts`` inserts of ~5,000 logs copied from the loaded ones, timed now."""
    have = store.query_rows(f"SELECT count() FROM logs WHERE {_LIVE}")
    if have[0][0]:
        return
    began = time.monotonic()
    for i in range(inserts):
        store.command(
            "INSERT INTO logs (project_id, timestamp, ingested_at, level, severity_number, body, "
            "trace_id, span_id, attributes, attr_string, attr_int, attr_float, attr_bool, "
            "retention_days) SELECT project_id, now64(6) - rand() % 60, now64(6), level, "
            "severity_number, concat('live ', body), trace_id, span_id, attributes, attr_string, "
            "attr_int, "
            # A sample across projects (every project gets its share of each insert).
            f"attr_float, attr_bool, retention_days FROM logs WHERE NOT {_LIVE} "
            f"AND cityHash64(id) % 2000 = {i} LIMIT 5000"
        )
    print(f"stored {inserts} inserts of 5,000 recent logs in {time.monotonic() - began:.0f}s")


def _high(store: ClickHouse) -> int:
    return int(
        store.query_rows(
            "SELECT max(max_block_number) FROM system.parts "
            "WHERE database = currentDatabase() AND table = 'logs' AND active"
        )[0][0]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--inserts", type=int, default=100)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/errortrack-bench-tail"))
    parser.add_argument("--reload", action="store_true")
    args = parser.parse_args()
    store = open_loaded(args.dir, args.rows, reload=args.reload)
    _store_recent(store, args.inserts)
    store.client().set_client_setting("use_query_condition_cache", 0)
    client, token = build_app(args.dir, store)
    headers = {"Authorization": f"Bearer {token}"}
    # The block numbers of the recent inserts, newest last.
    blocks = [
        int(r[0])
        for r in store.query_rows(
            f"SELECT DISTINCT _block_number FROM logs WHERE {_LIVE} ORDER BY 1"
        )
    ]
    high = _high(store)
    parts = store.query_rows(
        "SELECT count() FROM system.parts WHERE database = 'bench' AND table = 'logs' AND active"
    )[0][0]
    total = store.query_rows("SELECT count() FROM logs")[0][0]
    print(f"{total:,} logs in {parts} parts; the last {len(blocks)} inserts are recent")

    def nothing_new(rng):
        p = _project(rng)
        return p, TailCursor(high), f"_block_number > {high}", "ASC"

    def one_behind(rng):
        p = _project(rng)
        b = blocks[-2]
        return p, TailCursor(b, None), f"_block_number > {b}", "ASC"

    def behind(rng):
        p = _project(rng)
        b = blocks[-20]
        return p, TailCursor(b, None), f"_block_number > {b}", "ASC"

    def first_page(rng):
        return _project(rng), None, "1", "DESC"

    print(f"{'case':36} {'API p50':>8} {'API p99':>8} {'raw p50':>8} {'raw p99':>8} {'ratio':>6}")
    for seed, (name, make) in enumerate(
        [
            ("poll, nothing new", nothing_new),
            ("poll, 1 insert behind", one_behind),
            ("poll, 20 inserts behind", behind),
            ("first page (stored last)", first_page),
        ]
    ):
        rng = random.Random(seed)
        api_ms, raw_ms = [], []
        for i in range(args.runs + 3):
            p, cursor, where, direction = make(rng)
            query = f"per_page=50&cursor={cursor.encode()}" if cursor else "per_page=50"
            raw_sql = (
                f"SELECT {_COLS} FROM logs WHERE project_id = {p} AND {where} "
                f"ORDER BY _block_number {direction}, _block_offset {direction} LIMIT 51"
            )
            path = f"/api/projects/{p}/logs/tail"
            if i % 2:
                raw, raw_t = _timed(store.query_rows, raw_sql)
            resp, api_t = _timed(client.simulate_get, path, query_string=query, headers=headers)
            if not i % 2:
                raw, raw_t = _timed(store.query_rows, raw_sql)
            if resp.status_code != 200:
                raise SystemExit(f"{name}: API answered {resp.status_code}: {resp.text}")
            ids = [row[0] for row in raw[:50]]
            got = [item["id"] for item in resp.json["items"]]
            if got != (ids[::-1] if direction == "DESC" else ids):
                raise SystemExit(f"{name}: API and raw disagree on project {p}")
            if i >= 3:
                api_ms.append(api_t)
                raw_ms.append(raw_t)
        a50, a99, r50, r99 = pct(api_ms, 50), pct(api_ms, 99), pct(raw_ms, 50), pct(raw_ms, 99)
        print(f"{name:36} {a50:8.1f} {a99:8.1f} {r50:8.1f} {r99:8.1f} {a99 / r99:6.2f}")
    print(
        f"(milliseconds; ratio = API p99 / raw p99; {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC)"
    )


if __name__ == "__main__":
    main()
