"""End-to-end error-event ingest benchmark: HTTP -> spool -> writer + grouping -> stores.

1. Starts ``errortrack serve`` on a fresh data dir (SQLite + chDB unless
   ``--database-url`` names a Postgres database); creates a project.
2. ``--connections`` keep-alive connections send envelopes of ONE realistic ~8 KB error
   event each (bench/eventdata.py, as SDKs send them) for ``--seconds``, over
   ``--kinds`` distinct code paths; waits until the spool is drained.
   events/s = acknowledged events / (first send -> spool drained).
3. Checks the issues exactly: one issue per code path, each with the count of
   acknowledged events of that path; then stops the server and checks that ClickHouse
   holds every acknowledged event, each with its issue id.
4. Writer side alone, in this process on the same stores (a second project): the same
   rows in writer-sized batches through what the writer does per batch (decode, grouping
   hook, encode, one raw insert), to show which side limits the end-to-end rate.

    TZ=UTC .venv/bin/python -m bench.ingest_events [--seconds 20] [--connections 8]
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import tempfile
import threading
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

from bench import wire
from bench.eventdata import envelope, event, kinds, with_new_event_id
from errortrack import db
from errortrack.issues.fingerprint import fingerprint
from errortrack.models import Issue
from tests.ingest_support import create_project_in
from tests.support import Server, server_env


def _bodies(n_kinds: int, per_kind: int) -> tuple[list[bytes], list[str]]:
    """Distinct envelopes, and the fingerprint of each (what its issue must count)."""
    rng = random.Random(7)
    now = time.time()
    events = [event(k, rng, now) for _ in range(per_kind) for k in kinds(n_kinds)]
    return [envelope(e) for e in events], [fingerprint(e) for e in events]


def _send(
    port: int,
    path: str,
    headers: dict[str, str],
    bodies: list[tuple[int, bytes]],
    until: float,
    acked: collections.Counter[int],
    lock: threading.Lock,
) -> None:
    # The lean client of the logs benchmark: http.client's CPU per request is CPU the
    # server, on the same two cores, would have had in a real deployment.
    conn = wire.Connection(port, timeout=60)
    mine: collections.Counter[int] = collections.Counter()
    n = 0
    while time.perf_counter() < until:
        index, body = bodies[n % len(bodies)]
        n += 1
        if conn.send(wire.request(path, headers, with_new_event_id(body))) == 200:
            mine[index] += 1
    conn.close()
    with lock:
        acked.update(mine)


def _load(
    port: int, pid: int, key: str, bodies: list[bytes], seconds: float, connections: int
) -> collections.Counter[int]:
    headers = {
        "X-Sentry-Auth": f"Sentry sentry_key={key}, sentry_version=7",
        "Content-Type": "application/x-sentry-envelope",
    }
    indexed = list(enumerate(bodies))
    acked: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()
    until = time.perf_counter() + seconds
    threads = [
        threading.Thread(
            target=_send,
            args=(
                port,
                f"/api/{pid}/envelope/",
                headers,
                indexed[i::connections],
                until,
                acked,
                lock,
            ),
        )
        for i in range(connections)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return acked


def _wait_drained(data: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while list((data / "spool").glob("*/*.seg")):
        if time.monotonic() > deadline:
            raise SystemExit("spool did not drain")
        time.sleep(0.05)


def _check_issues(database_url: str, pid: int, expected: collections.Counter[str]) -> str:
    engine = db.make_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.select(Issue.fingerprint, Issue.event_count).where(Issue.project_id == pid)
            ).all()
    finally:
        engine.dispose()
    got = {fp: count for fp, count in rows}
    ok = got == dict(expected)
    return f"issues: {len(got)} (expected {len(expected)}), counts {'exact' if ok else 'MISMATCH'}"


def _check_clickhouse(data: Path, pid: int) -> tuple[int, int]:
    from errortrack.analytics import ClickHouse

    store = ClickHouse(f"chdb://{(data / 'clickhouse').resolve()}")
    [(rows, issues)] = store.query_rows(
        f"SELECT count(), uniqExact(issue_id) FROM events WHERE project_id = {pid} AND issue_id > 0"
    )
    return int(rows), int(issues)


def _writer_side(data: Path, url: str, bodies: list[bytes], batch_rows: int) -> float:
    import datetime as dt

    import orjson

    from errortrack.analytics import ClickHouse
    from errortrack.ingest.envelope import parse
    from errortrack.ingest.items import ItemContext
    from errortrack.issues.events import handle_event
    from errortrack.issues.grouping import GroupingHook
    from errortrack.spool.writer import INSERT_SETTINGS, decode_row

    pid, _ = create_project_in(url, name="writer-side")
    ctx = ItemContext(pid, dt.datetime.now(dt.UTC), 90, {})
    rows = [row for body in bodies for row in handle_event(parse(body).items[0][1], {}, ctx).events]
    # 20k events, each with its own id (the hook drops ids it has seen or stored).
    rows = (rows * (1 + 20_000 // len(rows)))[:20_000]
    lines = [orjson.dumps({**row, "event_id": str(uuid.uuid4())}) for row in rows]
    engine = db.make_engine(url)
    store = ClickHouse(f"chdb://{(data / 'clickhouse').resolve()}")
    hook = GroupingHook(db.make_sessionmaker(engine), store=store)
    client = store.client()
    start = time.perf_counter()
    for n in range(0, len(lines), batch_rows):
        rows = hook([decode_row(line) for line in lines[n : n + batch_rows]], f"bench-{n}")
        block = b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in rows)
        client.raw_insert(
            "events",
            insert_block=block,
            fmt="JSONEachRow",
            settings={**INSERT_SETTINGS, "insert_deduplication_token": f"bench-{n}"},
        )
        hook.after_insert(f"bench-{n}")  # as the writer calls it (its issues still exist?)
    rate = len(lines) / (time.perf_counter() - start)
    engine.dispose()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--threads", type=int, default=8, help="server threads")
    parser.add_argument("--kinds", type=int, default=200, help="distinct fingerprints")
    parser.add_argument("--per-kind", type=int, default=10, help="distinct events per kind")
    parser.add_argument("--database-url", default="", help="default: SQLite in the temp dir")
    parser.add_argument(
        "--batch-rows",
        type=int,
        default=1000,
        help="rows per batch for the writer-side measurement (step 4)",
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-events-"))
    data = tmp / "data"
    url = args.database_url or f"sqlite:///{tmp / 'bench.sqlite3'}"
    env = server_env(data, url, ERRORTRACK_LOG_LEVEL="WARNING")
    bodies, fingerprints = _bodies(args.kinds, args.per_kind)
    size = sum(map(len, bodies)) / len(bodies) / 1024
    print(
        f"load before: {os.getloadavg()}; {len(bodies)} distinct envelopes, one event of "
        f"{size:.1f} KiB each, {len(set(fingerprints))} fingerprints"
    )
    server = Server(env, threads=args.threads).start()
    try:
        pid, key = create_project_in(url)
        client_before = os.times()
        start = time.perf_counter()
        acked = _load(server.port, pid, key, bodies, args.seconds, args.connections)
        sent_s = time.perf_counter() - start
        client = os.times()
        client_cores = (
            client.user + client.system - client_before.user - client_before.system
        ) / sent_s
        _wait_drained(data)
        total_s = time.perf_counter() - start
        n = sum(acked.values())
        print(
            f"{n} events acknowledged in {sent_s:.1f}s, drained after {total_s:.1f}s -> "
            f"{n / total_s:,.0f} events/s end to end (acked at {n / sent_s:,.0f}/s); "
            f"this client used {client_cores:.2f} of the 2 cores while sending"
        )
        expected: collections.Counter[str] = collections.Counter()
        for index, count in acked.items():
            expected[fingerprints[index]] += count
        print(_check_issues(url, pid, expected))
    finally:
        server.stop()
    rows, issues = _check_clickhouse(data, pid)
    print(
        f"events in ClickHouse: {rows} (acknowledged {n}) {'OK' if rows == n else 'MISMATCH'},"
        f" {issues} distinct issue ids"
    )
    side = _writer_side(data, url, bodies, args.batch_rows)
    print(
        f"writer side alone ({args.batch_rows}-row batches: decode, grouping hook, encode, "
        f"insert): {side:,.0f} events/s"
    )
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
