"""How fast does one day of logs go? 10 million logs over 10 days, then deleting one day
through the cleanup endpoint, against the raw engine doing the same in the same run.

- Load: generated in the engine (``INSERT ... SELECT FROM numbers()``): 1 M logs a day
  for 10 days, 20 projects, realistic bodies and attributes.
- Endpoint: ``POST /api/storage/cleanup`` through the in-process WSGI app (the real
  Falcon app with its middleware, bearer-token auth, marshmallow and JSON; no socket),
  by a global admin. The app's clock is injected and set to midnight, so that
  ``older_than_days`` puts the cutoff on a day boundary and each call removes exactly
  the oldest remaining day: the case where whole partitions are dropped.
  ``GET /api/storage`` is timed on the full 10 M rows too.
- Raw: ``ALTER TABLE logs DROP PARTITION ID`` for one day (alternating with the
  endpoint, day by day, so both see the same machine load), and a lightweight
  ``DELETE FROM logs WHERE`` over one day.
- Also: a dry run, and a cutoff at noon (a lightweight delete of half a day).

chDB's query-condition cache is off for the run. Usage::

    TZ=UTC .venv/bin/python -m bench.retention [--rows 10000000] [--days 10]
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import falcon.testing

from errortrack import db, relational
from errortrack.analytics import ClickHouse
from errortrack.analytics import migrate as ch_migrate
from errortrack.app import create_app
from errortrack.auth.tokens import create_token
from errortrack.config import Settings
from errortrack.state import AppState
from errortrack.team.users import bootstrap_primary

LOAD = """
INSERT INTO logs (project_id, timestamp, id, ingested_at, level, severity_number, body,
                  trace_id, attributes, attr_string, attr_int, retention_days)
SELECT number % 20 + 1,
       {start:DateTime64(6, 'UTC')}
           + toIntervalMicrosecond(intDiv(number * {span:UInt64}, {rows:UInt64})),
       generateUUIDv4(), now64(6), 'info', 9,
       concat('GET /api/orders/', toString(number % 10007),
              ' handled in ', toString(number % 997), ' ms'),
       lower(hex(cityHash64(intDiv(number, 50)))),
       '{"http.route": {"value": "/api/orders/{id}", "type": "string"}}',
       map('http.route', '/api/orders/{id}'), map('status', toInt64(200 + number % 3)),
       90
FROM numbers({rows:UInt64})
"""


class Clock:
    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


def timed(fn, *args, **kwargs) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return (time.perf_counter() - start) * 1000, out


def build(workdir: Path, clock: Clock) -> tuple[AppState, falcon.testing.TestClient, str]:
    url = f"sqlite:///{workdir / 'errortrack.sqlite3'}"
    relational.upgrade(url)
    store = ClickHouse(f"chdb://{workdir / 'clickhouse'}", database="bench")
    ch_migrate.apply(store)
    store.client().set_client_setting("use_query_condition_cache", 0)
    settings = Settings.from_env({}, data_dir=workdir, database_url=url)
    state = AppState.build(settings, clickhouse=store, clock=clock)
    with db.unit_of_work(state.sessions) as s:
        admin = bootstrap_primary(s, email="bench@example.com", password="bench password 123")
        secret = create_token(s, user_id=admin.id, description="bench", now=clock()).secret
    return state, falcon.testing.TestClient(create_app(state=state)), secret


def day_count(store: ClickHouse, day: dt.date) -> int:
    sql = "SELECT count() FROM logs WHERE toDate(timestamp) = {d:Date}"
    return int(store.query_rows(sql, {"d": day})[0][0])


def settle(store: ClickHouse, limit: float = 300) -> None:
    deadline = time.monotonic() + limit
    sql = "SELECT count() FROM system.merges WHERE database = currentDatabase()"
    while store.query_rows(sql)[0][0] and time.monotonic() < deadline:
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=10)
    args = parser.parse_args()
    os.environ["TZ"] = "UTC"
    today = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    clock = Clock(today)
    workdir = Path(tempfile.mkdtemp(prefix="bench-retention-"))
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    try:
        run(args, workdir, today, clock)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        print(f"load average at end: {os.getloadavg()[0]:.1f}")


def run(args: argparse.Namespace, workdir: Path, today: dt.datetime, clock: Clock) -> None:
    first = today - dt.timedelta(days=args.days)  # days first .. today-1, inside the 90-day TTL
    state, client, secret = build(workdir, clock)
    store = state.clickhouse
    span = args.days * 86_400_000_000
    ms, _ = timed(store.command, LOAD, {"start": first, "span": span, "rows": args.rows})
    print(f"loaded {args.rows:,} logs over {args.days} days in {ms / 1000:.1f} s")
    # Measure a settled table, as a day-old partition is: a DROP PARTITION first has to
    # cancel the merges running in it, which right after a bulk load costs up to a second.
    ms, _ = timed(settle, store)
    print(f"background merges settled after {ms / 1000:.1f} s")
    headers = {"Authorization": f"Bearer {secret}"}

    def cleanup(days: int, dry_run: bool = False) -> tuple[float, dict]:
        body = {"older_than_days": days, "dry_run": dry_run}
        ms, resp = timed(client.simulate_post, "/api/storage/cleanup", json=body, headers=headers)
        assert resp.status_code == 200, resp.text  # type: ignore[attr-defined]
        return ms, resp.json  # type: ignore[attr-defined]

    results: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(3):
        ms, resp = timed(client.simulate_get, "/api/storage", headers=headers)
        assert resp.status_code == 200, resp.text  # type: ignore[attr-defined]
        results["GET /api/storage (usage of 10 days)"].append(ms)
    ms, out = cleanup(args.days - 1, dry_run=True)
    results["endpoint, dry run"].append(ms)
    print(f"dry run: {ms:.1f} ms, would remove {out['removed']['logs']:,} logs")
    # Days 0-5 alternate endpoint / raw DROP PARTITION, so that both see the same load
    # on a shared machine; day 6 goes by a raw lightweight DELETE.
    for k in range(6):
        day = (first + dt.timedelta(days=k)).date()
        rows = day_count(store, day)
        if k % 2 == 0:
            ms, out = cleanup(args.days - 1 - k)  # cutoff = the end of day k
            assert out["removed"]["logs"] == rows and out["partitions_dropped"]["logs"] == 1
            results["endpoint, one whole day (partition drop)"].append(ms)
        else:
            sql = f"ALTER TABLE logs DROP PARTITION ID '{day:%Y%m%d}-90'"
            ms, _ = timed(store.command, sql)
            results["raw ALTER TABLE DROP PARTITION, one day"].append(ms)
        print(f"day {k} ({rows:,} rows): {'endpoint' if k % 2 == 0 else 'raw drop'} {ms:.1f} ms")
    day = (first + dt.timedelta(days=6)).date()
    rows = day_count(store, day)
    ms, _ = timed(store.command, "DELETE FROM logs WHERE toDate(timestamp) = {d:Date}", {"d": day})
    results["raw lightweight DELETE, one day"].append(ms)
    print(f"day 6 ({rows:,} rows): raw lightweight DELETE {ms:.1f} ms")
    clock.now = today + dt.timedelta(hours=12)  # cutoff at noon of day 7
    ms, out = cleanup(args.days - 7)
    results["endpoint, cutoff at noon (half-day lightweight delete)"].append(ms)
    print(f"endpoint, cutoff at noon: {ms:.1f} ms, removed {out['removed']['logs']:,} logs")
    left = int(store.query_rows("SELECT count() FROM logs")[0][0])
    print(f"logs left: {left:,} (expected {args.rows - args.rows * 15 // (2 * args.days):,})")
    print("\n| operation | ms (median of runs) | runs |\n|---|---|---|")
    for name, values in results.items():
        print(f"| {name} | {statistics.median(values):.1f} | {len(values)} |")


if __name__ == "__main__":
    main()
