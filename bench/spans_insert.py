"""Sustained raw inserts of span rows: the spans table as migrated against its typed
maps keyed on LowCardinality(String) again (as before clickhouse/0013), alternating.

The rows are what ingest makes of the Python and Node transaction fixtures (a root
span and two children each), repeated into the writer's 20k-row batches and inserted
with its settings for ``--seconds`` into a fresh chDB directory, in a child process per
run. Prints rows/s and the process's CPU per row (the insert and background merges).
Few distinct rows, so they compress far better than real spans: compare the two
variants with each other, not with bench.engine_costs' logs.

    TZ=UTC .venv/bin/python -m bench.spans_insert [--seconds 12] [--rounds 2]
"""

from __future__ import annotations

import argparse
import datetime as dt
import tempfile
from pathlib import Path

import orjson

from bench.engine_costs import MAPS
from bench.raw_insert import in_child, sustained
from errortrack.analytics import ClickHouse
from errortrack.analytics import migrate as ch_migrate
from errortrack.ingest.envelope import parse
from errortrack.ingest.items import ItemContext
from errortrack.traces.transactions import handle_transaction

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "sdk-envelopes"
ENVELOPES = (
    "python/0009_d_transaction_2_spans.envelope",
    "node/0036_d_transaction_2_spans.envelope",
)
BATCH_ROWS = 20_000


def _span_lines() -> list[bytes]:
    ctx = ItemContext(1, dt.datetime.now(dt.UTC), 30, {})
    lines = []
    for name in ENVELOPES:
        for headers, payload in parse((FIXTURES / name).read_bytes()).items:
            if headers.get("type") == "transaction":
                rows = handle_transaction(payload, headers, ctx).spans
                lines += [orjson.dumps(row) + b"\n" for row in rows]
    return lines


def _run(low_cardinality_keys: bool, seconds: float) -> tuple[float, float]:
    store = ClickHouse(f"chdb://{tempfile.mkdtemp(prefix='spans-')}")
    ch_migrate.apply(store)
    if low_cardinality_keys:
        for name, value in MAPS:
            store.command(
                f"ALTER TABLE spans MODIFY COLUMN attr_{name} Map(LowCardinality(String), {value})"
            )
    lines = _span_lines()
    block = b"".join(lines[i % len(lines)] for i in range(BATCH_ROWS))
    rows, elapsed, cpu = sustained(store.client(), [block], seconds, table="spans")
    return rows / elapsed, cpu / rows * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    for _ in range(args.rounds):
        for low_cardinality in (True, False):
            rate, us = in_child(_run, low_cardinality, args.seconds)
            keys = "LowCardinality(String)" if low_cardinality else "String (as migrated)"
            print(f"map keys {keys:22s} {rate:9,.0f} rows/s  {us:5.2f} us CPU/row", flush=True)


if __name__ == "__main__":
    main()
