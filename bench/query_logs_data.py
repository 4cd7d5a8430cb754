"""Generates realistic logs inside the engine (INSERT ... SELECT FROM numbers()).

Shape, per row ``n``:
- project: one of 5, shares 40/25/17/12/6 %, chosen per trace group (8 consecutive rows),
  so that a trace stays in one project;
- timestamp: the last DAYS days, evenly spread with jitter (about 16 logs/s at 10 M);
- level: trace 5, debug 20, info 55, warn 12, error 7, fatal 1 %; severity_number to match;
- body: per level, one of 2-4 templates carrying order ids (100000-999999), user ids,
  durations, hosts: "GET /api/orders/123456 200 in 87ms", "payment failed for order
  123456: card declined", ...;
- 70% of trace groups are inside a span: trace_id (32 hex) and span_id (16 hex) set;
- attributes as sentry-sdk sends them (sdk name/version, environment, release, server
  address, user.id, http.status_code, http.duration, severity number/text, and
  cache.hit on a third of the rows), in the exact JSON and in the typed maps.
"""

from __future__ import annotations

import time
from pathlib import Path

from errortrack.analytics import ClickHouse
from errortrack.analytics import migrate as ch_migrate

DAYS = 7
PROJECT_SHARES = (40, 25, 17, 12, 6)
CHUNK = 1_000_000

_ROW = """
SELECT
    project_id, ts, generateUUIDv4(n), ts + toIntervalMillisecond(300 + h % 2000),
    level, sev, body, if(in_span, trace, ''), if(in_span, span, ''),
    concat('{{"sentry.sdk.name":{{"value":"sentry.python","type":"string"}},',
           '"sentry.sdk.version":{{"value":"2.75.0","type":"string"}},',
           '"sentry.environment":{{"value":"', env, '","type":"string"}},',
           '"sentry.release":{{"value":"', release, '","type":"string"}},',
           '"server.address":{{"value":"', host, '","type":"string"}},',
           '"user.id":{{"value":"', user, '","type":"string"}},',
           '"http.status_code":{{"value":', toString(status), ',"type":"integer"}},',
           '"http.duration":{{"value":', toString(ms), ',"type":"double"}},',
           if(has_cache, concat('"cache.hit":{{"value":', if(hit, 'true', 'false'),
                                ',"type":"boolean"}},'), ''),
           '"sentry.severity_number":{{"value":', toString(sev), ',"type":"integer"}},',
           '"sentry.severity_text":{{"value":"', level, '","type":"string"}}}}'),
    map('sentry.sdk.name', 'sentry.python', 'sentry.sdk.version', '2.75.0',
        'sentry.environment', env, 'sentry.release', release, 'server.address', host,
        'user.id', user, 'sentry.severity_text', level),
    map('http.status_code', toInt64(status), 'sentry.severity_number', toInt64(sev)),
    map('http.duration', ms),
    if(has_cache, map('cache.hit', hit), map()),
    30
FROM (
    SELECT
        number AS n, cityHash64(n) AS h, cityHash64(n, 1) AS h1, intDiv(n, 8) AS g,
        cityHash64(g) AS hg,
        multiIf(hg % 100 < 40, 1, hg % 100 < 65, 2, hg % 100 < 82, 3, hg % 100 < 94, 4, 5)
            AS project_id,
        fromUnixTimestamp64Micro(toInt64({start_us} + n * {step_us} + h % {step_us}), 'UTC')
            AS ts,
        h1 % 1000 AS lv,
        multiIf(lv < 50, 'trace', lv < 250, 'debug', lv < 800, 'info', lv < 920, 'warn',
                lv < 990, 'error', 'fatal') AS level,
        multiIf(lv < 50, 1, lv < 250, 5, lv < 800, 9, lv < 920, 13, lv < 990, 17, 21) AS sev,
        hg % 10 < 7 AS in_span,
        lower(hex(MD5(toString(g)))) AS trace,
        leftPad(lower(hex(cityHash64(g, intDiv(n, 3)))), 16, '0') AS span,
        toString(100000 + h % 900000) AS oid,
        concat('u-', toString(cityHash64(g, 2) % 50000)) AS user,
        round(5 + (h1 % 100000) / 100.0 * if(lv >= 800, 10, 1), 1) AS ms,
        toString(round(ms)) AS ms_text,
        concat('web-', toString(hg % 12)) AS host,
        if(hg % 5 = 0, 'staging', 'production') AS env,
        concat('shop@1.', toString(4 + intDiv(n, 2000000))) AS release,
        h % 3 = 0 AS has_cache,
        h % 7 < 4 AS hit,
        multiIf(level = 'error', if(h % 2 = 0, 503, 500),
                level = 'warn', if(h % 10 < 3, 429, 200),
                h % 20 = 0, 404, h % 5 = 0, 201, 200) AS status,
        multiIf(
            level = 'trace',
            concat('enter handler ', ['checkout', 'cart', 'orders', 'login'][1 + h % 4],
                   '.views.', ['get', 'post', 'list'][1 + h1 % 3]),
            level = 'debug',
            [concat('SQL SELECT * FROM orders WHERE id = ', oid, ' took ', ms_text, 'ms'),
             concat('cache miss for key session:', lower(hex(h))),
             concat('loaded ', toString(h % 50), ' cart items for user ', user)][1 + h % 3],
            level = 'info',
            [concat('GET /api/orders/', oid, ' ', toString(status), ' in ', ms_text, 'ms'),
             concat('user ', user, ' logged in from ', host),
             concat('order ', oid, ' created for user ', user),
             concat('POST /api/cart ', toString(status), ' in ', ms_text, 'ms')][1 + h % 4],
            level = 'warn',
            [concat('slow request POST /api/checkout took ', ms_text, 'ms'),
             concat('retrying inventory-service call for order ', oid, ' (attempt ',
                    toString(1 + h % 3), ')')][1 + h % 2],
            level = 'error',
            [concat('payment failed for order ', oid, ': card declined'),
             concat('upstream timeout after ', ms_text, 'ms calling billing-service'),
             concat('HTTP 503 from inventory-service for order ', oid)][1 + h % 3],
            [concat('worker ', toString(h % 16), ' crashed: out of memory'),
             'database connection pool exhausted'][1 + h % 2]
        ) AS body
    FROM numbers({first}, {count})
)
"""

_COLUMNS = (
    "project_id, timestamp, id, ingested_at, level, severity_number, body, trace_id, "
    "span_id, attributes, attr_string, attr_int, attr_float, attr_bool, retention_days"
)


def open_loaded(directory: Path, rows: int, *, reload: bool = False) -> ClickHouse:
    """The benchmark's embedded store in ``directory``, migrated, holding ``rows`` logs."""
    directory.mkdir(parents=True, exist_ok=True)
    store = ClickHouse(f"chdb://{(directory / 'clickhouse').resolve()}", database="bench")
    ch_migrate.apply(store)
    load(store, rows, reload=reload)
    return store


def load(store: ClickHouse, rows: int, *, reload: bool = False) -> None:
    have = int(store.query_rows("SELECT count() FROM logs")[0][0])
    if have == rows and not reload:
        print(f"reusing {have:,} logs")
        _wait_for_mutations(store)  # new migrations materialise indexes in the background
        return
    store.command("TRUNCATE TABLE logs")
    end_us = int(time.time() * 1e6)
    step_us = DAYS * 86_400_000_000 // rows
    start_us = end_us - step_us * rows
    began = time.monotonic()
    for first in range(0, rows, CHUNK):
        sql = _ROW.format(
            start_us=start_us, step_us=step_us, first=first, count=min(CHUNK, rows - first)
        )
        store.command(f"INSERT INTO logs ({_COLUMNS}) {sql}")
        print(f"  loaded {min(first + CHUNK, rows):,} rows ({time.monotonic() - began:.0f}s)")
    # Let background merges settle the way a server's table looks after a while.
    store.command("OPTIMIZE TABLE logs FINAL")
    print(f"loaded {rows:,} logs in {time.monotonic() - began:.0f}s")


def _wait_for_mutations(store: ClickHouse) -> None:
    while store.query_rows(
        "SELECT count() FROM system.mutations WHERE database = currentDatabase() AND NOT is_done"
    )[0][0]:
        time.sleep(1)
