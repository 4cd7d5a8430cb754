"""Which insert format is fastest for the logs table: Arrow, Native or JSONEachRow?

Measures, on chDB in a scratch directory, one insert of ``--rows`` realistic log rows per
batch: the engine alone (data already in the format) and including the Python
conversion from the row dicts that ingest builds. Usage:

    TZ=UTC .venv/bin/python -m bench.insert_formats [--rows 20000] [--batches 8]
"""

from __future__ import annotations

import argparse
import datetime as dt
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
import pyarrow as pa

from bench.logdata import envelope_logs
from errortrack.analytics import ClickHouse
from errortrack.analytics import migrate as ch_migrate
from errortrack.ingest.items import ItemContext
from errortrack.ingest.logs import handle_log
from errortrack.spool.writer import INSERT_SETTINGS

Row = dict[str, Any]
TIMES = ("timestamp", "ingested_at")
MAP_VALUES = {
    "attr_string": pa.string(),
    "attr_int": pa.int64(),
    "attr_float": pa.float64(),
    "attr_bool": pa.bool_(),
}


def rows_for(n: int) -> list[Row]:
    ctx = ItemContext(1, dt.datetime.now(dt.UTC), 90, {})
    rows: list[Row] = []
    while len(rows) < n:
        lines = handle_log(orjson.dumps({"items": envelope_logs(100)}), {}, ctx).log_lines
        for line in lines.splitlines():
            row = orjson.loads(line)
            # The attributes as the text the String column stores (the spooled row holds
            # them as a JSON object, which ClickHouse stores as its text).
            row["attributes"] = orjson.dumps(row["attributes"]).decode()
            rows.append(row)
    return rows[:n]


def to_json(rows: list[Row]) -> bytes:
    """The rows as the spool holds them: the attributes as a JSON object."""
    return b"".join(
        orjson.dumps(
            {**r, "attributes": orjson.Fragment(r["attributes"])},
            option=orjson.OPT_APPEND_NEWLINE,
        )
        for r in rows
    )


def to_arrow(rows: list[Row], names: list[str]) -> pa.Table:
    arrays = {}
    for name in names:
        values = [r[name] for r in rows]
        if name in TIMES:
            micros = [int(v * 1_000_000) for v in values]
            arrays[name] = pa.array(micros, type=pa.timestamp("us", "UTC"))
        elif name in MAP_VALUES:
            pairs = [list(m.items()) for m in values]
            arrays[name] = pa.array(pairs, type=pa.map_(pa.string(), MAP_VALUES[name]))
        else:
            arrays[name] = pa.array(values)
    return pa.table(arrays)


def to_native(rows: list[Row], names: list[str]) -> list[list[Any]]:
    out = []
    for r in rows:
        row = [r[n] for n in names]
        for i, name in enumerate(names):
            if name in TIMES:
                row[i] = dt.datetime.fromtimestamp(row[i], dt.UTC)
            elif name == "id":
                row[i] = uuid.UUID(row[i])
        out.append(row)
    return out


def timed(
    label: str,
    batches: list[list[Row]],
    prepare: Callable[[list[Row]], Any],
    insert: Callable[[Any], None],
) -> None:
    prep = engine = 0.0
    for rows in batches:
        t0 = time.perf_counter()
        data = prepare(rows)
        t1 = time.perf_counter()
        insert(data)
        prep += t1 - t0
        engine += time.perf_counter() - t1
    total = sum(map(len, batches))
    print(
        f"{label:12s} engine {total / engine:>10,.0f} rows/s   "
        f"with conversion from dicts {total / (prep + engine):>10,.0f} rows/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--batches", type=int, default=8)
    args = parser.parse_args()
    store = ClickHouse(f"chdb://{tempfile.mkdtemp(prefix='fmt-')}", database="bench")
    ch_migrate.apply(store)
    client = store.client()
    batches = [rows_for(args.rows) for _ in range(args.batches)]
    # The columns ingest sends: the table makes the rest (the id, clickhouse/0010).
    names = list(batches[0][0])
    timed(
        "JSONEachRow",
        batches,
        to_json,
        lambda d: client.raw_insert(
            "logs", insert_block=d, fmt="JSONEachRow", settings=INSERT_SETTINGS
        ),
    )
    timed(
        "Arrow",
        batches,
        lambda rows: to_arrow(rows, names),
        lambda t: client.insert_arrow("logs", t),
    )
    timed(
        "Native",
        batches,
        lambda rows: to_native(rows, names),
        lambda d: client.insert("logs", d, column_names=names),
    )
    count = client.command("SELECT count() FROM logs")
    print(f"rows in table: {count} (expected {3 * args.rows * args.batches})")


if __name__ == "__main__":
    main()
