"""Logs query benchmark: 10 million realistic logs, read through the API and raw.

    TZ=UTC .venv/bin/python bench/query_logs.py [--rows 10000000] [--runs 60]
        [--dir /tmp/errortrack-bench-logs] [--reload]

1. Loads ``--rows`` logs into an embedded store (chDB) in ``--dir``, generated inside the
   engine with ``INSERT ... SELECT FROM numbers()``: 5 projects of unequal size, 7 days,
   the six levels in realistic proportions, bodies from templates with ids in them,
   70% of logs inside a trace (8 logs per trace), SDK-like typed attributes. A second
   run reuses the data unless ``--reload``.
2. For each case, alternates an API call and the raw ClickHouse queries, each with
   fresh random parameters of its own (another project; a trace, an order id or a user
   picked from the stored data, so that every lookup finds rows; never the same lookup
   for both, so that neither finds the other's granules cached), ``--runs`` times:
   - API: ``GET /api/projects/<id>/logs?...`` through the real Falcon app in this process
     (WSGI, ``falcon.testing``): bearer-token authentication, the permission check on
     SQLite, query parsing, both ClickHouse queries, JSON encoding. No socket.
   - raw: the same answer written by hand as SQL with literals (the page, and a count
     when the first page is full or a later page is asked for, capped as the API caps
     it), sent
     through the same clickhouse-connect client, as a person would type it.
   The query-condition cache is off for both (``use_query_condition_cache=0``); the
   mark and page caches stay warm, as they would on a live server.
3. Prints p50/p99 per case and the API/raw ratio of p99s, and checks that API and raw
   agree on total_count.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ["TZ"] = "UTC"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import falcon.testing

from bench.query_logs_data import DAYS, PROJECT_SHARES, open_loaded
from errortrack import db, relational
from errortrack.analytics import ClickHouse
from errortrack.app import create_app
from errortrack.auth.tokens import create_token
from errortrack.config import Settings
from errortrack.logs.cursor import Cursor
from errortrack.logs.query import COUNT_CAP
from errortrack.models import Project, ProjectMember, User
from errortrack.state import AppState

Case = tuple[str, Callable[[random.Random], tuple[dict[str, Any], str, str]]]


def build_app(directory: Path, store: ClickHouse) -> tuple[falcon.testing.TestClient, str]:
    """The real app on a fresh SQLite file: a global member with viewer role everywhere."""
    sqlite = directory / "bench.sqlite3"
    sqlite.unlink(missing_ok=True)
    url = f"sqlite:///{sqlite}"
    relational.upgrade(url)
    settings = Settings.from_env({}, data_dir=directory, database_url=url)
    state = AppState.build(settings, clickhouse=store)
    with db.unit_of_work(state.sessions) as s:
        user = User(email="bench@example.com", password_hash="x", role="member")
        s.add(user)
        s.flush()
        for pid in range(1, len(PROJECT_SHARES) + 1):
            s.add(Project(id=pid, name=f"project {pid}"))
            s.flush()
            s.add(ProjectMember(project_id=pid, user_id=user.id, role="viewer"))
        secret = create_token(s, user_id=user.id, description="bench", now=state.clock()).secret
    return falcon.testing.TestClient(create_app(state=state)), secret


def _project(rng: random.Random) -> int:
    return rng.choices(range(1, len(PROJECT_SHARES) + 1), weights=PROJECT_SHARES)[0]


def _raw(where: str, order: str = "timestamp DESC", offset: int = 0, capped: bool = False):
    """The raw queries, in the API's order (``list_logs``): the first page is read first
    and is its own total when short; filters beyond level and time count up to the cap."""
    cols = "id, level, severity_number, body, trace_id, span_id, attributes, timestamp, ingested_at"
    page = f"SELECT {cols} FROM logs WHERE {where} ORDER BY {order} LIMIT 50 OFFSET {offset}"
    if capped:
        limit = max(COUNT_CAP, offset + 50)
        count = f"SELECT count() FROM (SELECT 1 FROM logs WHERE {where} LIMIT {limit + 1})"
    else:
        limit, count = None, f"SELECT count() FROM logs WHERE {where}"
    return count, page, offset != 0, limit


def run_raw(store: ClickHouse, count_sql: str, page_sql: str, count_first: bool, limit) -> int:
    if not count_first:
        rows = store.query_rows(page_sql)
        if len(rows) < 50:
            return len(rows)
        total = store.query_rows(count_sql)[0][0]
    else:
        total = store.query_rows(count_sql)[0][0]
        store.query_rows(page_sql)
    return min(total, limit) if limit is not None else total


def cases(store: ClickHouse) -> list[Case]:
    # Real values to look up, picked from the data so that every lookup finds something.
    traces = [
        r[0]
        for r in store.query_rows(
            "SELECT trace_id, project_id FROM logs WHERE trace_id != '' LIMIT 2000 "
            "SETTINGS max_threads = 1"
        )
    ]
    trace_projects = dict(
        store.query_rows(
            "SELECT trace_id, any(project_id) FROM logs WHERE trace_id IN {t:Array(String)} "
            "GROUP BY trace_id",
            {"t": traces},
        )
    )

    # Order ids and users that exist, with their project, spread over the whole week.
    sampled = store.query_rows(
        "SELECT project_id, extract(body, 'order ([0-9]{6})'), attr_string['user.id'] "
        "FROM logs WHERE cityHash64(id) % 2000 = 0 AND body LIKE '%order %' LIMIT 2000"
    )

    def newest(rng):
        p = _project(rng)
        return {"p": p, "q": ""}, *_raw(f"project_id = {p}")

    def levels(rng):
        p = _project(rng)
        return {"p": p, "q": "level=error,fatal"}, *_raw(
            f"project_id = {p} AND severity_number IN (17, 21)"
        )

    def trace(rng):
        t = rng.choice(traces)
        p = trace_projects[t]
        return {"p": p, "q": f"trace_id={t}"}, *_raw(
            f"project_id = {p} AND trace_id = '{t}'", capped=True
        )

    def page100(rng):
        p = _project(rng)
        return {"p": p, "q": "page=100"}, *_raw(f"project_id = {p}", offset=99 * 50)

    # Where page 100 starts in each project, as a cursor: the API then lists the 50 logs
    # after that row; raw, as a person would type it, reads those after its time (a cursor
    # page always counts, as the API does).
    starts = {
        p: store.query_rows(
            f"SELECT timestamp, id FROM logs WHERE project_id = {p} "
            "ORDER BY timestamp DESC, id DESC LIMIT 1 OFFSET 4949"
        )[0]
        for p in range(1, len(PROJECT_SHARES) + 1)
    }

    def cursor_page(rng):
        p = _project(rng)
        at, log_id = starts[p]
        after = Cursor.after_row("-timestamp", at, log_id, None).encode()
        count, _, _, limit = _raw(f"project_id = {p}")
        page = _raw(f"project_id = {p} AND timestamp < '{at}'")[1]
        return {"p": p, "q": f"cursor={after}"}, count, page, True, limit

    def body(rng):
        p, order, _ = rng.choice(sampled)
        return {"p": p, "q": f"q=order {order}"}, *_raw(
            f"project_id = {p} AND lower(body) LIKE '%order {order}%'", capped=True
        )

    def attr_user(rng):
        p, _, user = rng.choice(sampled)
        # Through the index on "<key length>:<key>=<value>" tokens (clickhouse/0009),
        # written out as its definition says, or ClickHouse would scan the map instead.
        pairs = (
            "arrayMap((k, v) -> concat(toString(length(k)), ':', k, '=', v), "
            "mapKeys(attr_string), mapValues(attr_string))"
        )
        return {"p": p, "q": f"attr[user.id]={user}"}, *_raw(
            f"project_id = {p} AND has({pairs}, '7:user.id={user}')",
            capped=True,
        )

    def attr_status(rng):
        p = _project(rng)
        return {"p": p, "q": "attr[http.status_code]=503"}, *_raw(
            f"project_id = {p} AND mapContains(attr_int, 'http.status_code') "
            "AND attr_int['http.status_code'] = 503",
            capped=True,
        )

    return [
        ("newest page", newest),
        ("level error+fatal", levels),
        ("trace lookup", trace),
        ("page 100", page100),
        ("page 100 by cursor", cursor_page),
        ("body search (order id)", body),
        ("attribute user.id (string)", attr_user),
        ("attribute http.status_code=503 (integer)", attr_status),
    ]


def measure(client, token, store, case: Case, runs: int, seed: int) -> dict[str, Any]:
    """``runs`` timed API calls and raw answers, each a lookup of its own.

    The two sides never time the same lookup: the one timed second would find the
    first one's granules in the page cache (a user's logs, a trace, an order id). For
    the string attribute, the API timed first took ~8 ms more than raw at the median,
    and no more when timed second (bench/RESULTS.md, fourteenth session). The API's
    answer is checked against the raw queries for its own lookup afterwards, untimed;
    which side goes first alternates.
    """
    name, make = case
    rng = random.Random(seed)
    api_ms, raw_ms, mismatches = [], [], 0
    headers = {"Authorization": f"Bearer {token}"}
    for i in range(runs + 3):  # the first three warm up the code paths, not counted
        args, *same = make(rng)
        _, *raw = make(rng)
        path, query = f"/api/projects/{args['p']}/logs", args["q"]
        if i % 2:
            raw_t = _timed(run_raw, store, *raw)[1]
        resp, api_t = _timed(client.simulate_get, path, query_string=query, headers=headers)
        if not i % 2:
            raw_t = _timed(run_raw, store, *raw)[1]
        if resp.status_code != 200:
            raise SystemExit(f"{name}: API answered {resp.status_code}: {resp.text}")
        mismatches += resp.json["total_count"] != run_raw(store, *same)
        if i >= 3:
            api_ms.append(api_t)
            raw_ms.append(raw_t)
    return {
        "case": name,
        "api": api_ms,
        "raw": raw_ms,
        "mismatches": mismatches,
        "matched": resp.json["total_count"],
    }


def _timed(call: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """What ``call`` returned, and the milliseconds it took."""
    t0 = time.perf_counter()
    result = call(*args, **kwargs)
    return result, (time.perf_counter() - t0) * 1000


def pct(values: list[float], p: float) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]
        if len(values) > 1
        else values[0]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/errortrack-bench-logs"))
    parser.add_argument("--reload", action="store_true")
    args = parser.parse_args()
    store = open_loaded(args.dir, args.rows, reload=args.reload)
    store.client().set_client_setting("use_query_condition_cache", 0)
    assert store.query_rows("SELECT getSetting('use_query_condition_cache')")[0][0] in (0, False)
    client, token = build_app(args.dir, store)
    parts = store.query_rows(
        "SELECT count() FROM system.parts WHERE database = 'bench' AND table = 'logs' AND active"
    )[0][0]
    print(
        f"{args.rows:,} logs, {len(PROJECT_SHARES)} projects, {DAYS} days, {parts} parts; "
        f"{args.runs} runs per case; API = in-process WSGI; query-condition cache off"
    )
    print(
        f"{'case':44} {'API p50':>8} {'API p99':>8} {'raw p50':>8} {'raw p99':>8} "
        f"{'ratio':>6} {'matches':>8}"
    )
    for seed, case in enumerate(cases(store)):
        r = measure(client, token, store, case, args.runs, seed)
        a50, a99, r50, r99 = (
            pct(r["api"], 50),
            pct(r["api"], 99),
            pct(r["raw"], 50),
            pct(r["raw"], 99),
        )
        flag = "" if r["mismatches"] == 0 else f" MISMATCH x{r['mismatches']}"
        print(
            f"{r['case']:44} {a50:8.1f} {a99:8.1f} {r50:8.1f} {r99:8.1f} {a99 / r99:6.2f} "
            f"{r['matched']:8}{flag}"
        )
    print(
        f"(milliseconds; ratio = API p99 / raw p99; matches = total_count of the last run; "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC)"
    )


if __name__ == "__main__":
    main()
