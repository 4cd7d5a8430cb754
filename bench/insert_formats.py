"""Which insert format is fastest for the logs table: Arrow, Native or JSONEachRow?

Measures, on chDB in a scratch directory, one insert of N realistic log rows per batch,
both the engine alone (data already in the format) and end to end from row dicts (the
Python work the spool/writer would have to do). Usage:

    TZ=UTC .venv/bin/python bench/insert_formats.py [--rows 20000] [--batches 10]
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import tempfile
import time
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.ipc

from bench.logdata import envelope_logs
from errortrack.analytics import ClickHouse
from errortrack.analytics import migrate as ch_migrate
from errortrack.ingest.items import ItemContext
from errortrack.ingest.logs import handle_log


def rows_for(n: int) -> list[dict]:
    ctx = ItemContext(1, dt.datetime.now(dt.UTC), 90, {})
    rows: list[dict] = []
    while len(rows) < n:
        rows.extend(handle_log(orjson.dumps({"items": envelope_logs(100)}), {}, ctx).logs)
    return rows[:n]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--batches", type=int, default=10)
    args = parser.parse_args()
    store = ClickHouse(f"chdb://{tempfile.mkdtemp(prefix='fmt-')}", database="bench")
    ch_migrate.apply(store)
    client = store.client()
    client.command("SET use_query_condition_cache = 0")
    names = [r[0] for r in client.query("DESCRIBE TABLE logs").result_rows]
    batches = [rows_for(args.rows) for _ in range(args.batches)]
    ts_fields = ("timestamp", "ingested_at")
    settings = {"date_time_input_format": "best_effort"}

    def to_json(rows: list[dict]) -> bytes:
        return b"".join(orjson.dumps(r) + b"\n" for r in rows)

    def to_arrow(rows: list[dict]) -> pa.Table:
        cols = {n: [r[n] for r in rows] for n in names}
        for n in ts_fields:
            cols[n] = [int(v * 1_000_000) for v in cols[n]]
        arrays = {
            n: pa.array(v, type=pa.timestamp("us", "UTC")) if n in ts_fields else
            pa.array([list(m.items()) for m in v], type=pa.map_(pa.string(), pa.int64() if n == "attr_int" else pa.float64() if n == "attr_float" else pa.bool_() if n == "attr_bool" else pa.string())) if n.startswith("attr_") and n != "attributes" else
            pa.array(v)
            for n, v in cols.items()
        }
        return pa.table(arrays)

    def timed(label: str, prepare, insert) -> None:
        prep = eng = 0.0
        for rows in batches:
            t0 = time.perf_counter()
            data = prepare(rows)
            t1 = time.perf_counter()
            insert(data)
            t2 = time.perf_counter()
            prep += t1 - t0
            eng += t2 - t1
        total = args.rows * args.batches
        print(f"{label:12s} engine {total / eng:>10,.0f} rows/s   with conversion from dicts {total / (prep + eng):>10,.0f} rows/s")

    timed("JSONEachRow", to_json, lambda d: client.raw_insert("logs", insert_block=d, fmt="JSONEachRow", settings=settings))
    timed("Arrow", to_arrow, lambda t: client.insert_arrow("logs", t))

    def to_native(rows: list[dict]) -> list[list]:
        out = []
        for r in rows:
            row = [r[n] for n in names]
            out.append(row)
        return out

    def native_insert(data: list[list]) -> None:
        import uuid
        for row in data:
            row[1] = dt.datetime.fromtimestamp(row[1], dt.UTC) if isinstance(row[1], float) else row[1]
            row[2] = uuid.UUID(row[2]) if isinstance(row[2], str) else row[2]
            row[3] = dt.datetime.fromtimestamp(row[3], dt.UTC) if isinstance(row[3], float) else row[3]
        client.insert("logs", data, column_names=names)

    timed("Native", to_native, native_insert)
    n = client.command("SELECT count() FROM logs")
    print(f"rows in table: {n} (expected {3 * args.rows * args.batches})")


if __name__ == "__main__":
    main()
