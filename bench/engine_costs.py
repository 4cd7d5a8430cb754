"""Where the engine's CPU per stored log goes, and what merge settings would change.

Sustained raw inserts of the rows ingest spools (the writer's settings and batch size,
JSONEachRow), into a fresh chDB directory in a child process per run, with one table
feature removed or one merge setting changed at a time, alternating for ``--rounds``.
For each run: rows/s, the process's CPU per row (inserts and background merges), rows
rewritten by merges per row inserted (``system.events`` MergedRows / InsertedRows), the
active parts at the end and the compressed bytes per row on disk. One variant runs beside
another process that keeps one core busy, as the HTTP side does end to end.

    TZ=UTC .venv/bin/python -m bench.engine_costs [--seconds 20] [--rounds 2] [--only NAME]

The raw insert is bound by its one inserting thread (parsing and writing each part);
merges run beside it on the other core. End to end, both compete with the event loop
for the same two cores, so CPU per row is what limits ingest there (bench/RESULTS.md,
tenth session).
"""

from __future__ import annotations

import argparse
import multiprocessing
import subprocess
import sys
import tempfile

from bench.raw_insert import batches, log_envelopes, spooled_lines, sustained
from errortrack.analytics import ClickHouse
from errortrack.analytics import migrate as ch_migrate

_BLOOMS = ("idx_trace_id", "idx_attr_keys", "idx_attr_int_keys")
VARIANTS: dict[str, tuple[list[str], int]] = {
    "as migrated": ([], 10_000),
    "no 5-gram body index": (["ALTER TABLE logs DROP INDEX idx_body_5gram"], 10_000),
    "no string-pair text index": (["ALTER TABLE logs DROP INDEX idx_attr_string_pairs"], 10_000),
    "no projections": (
        [
            "ALTER TABLE logs DROP PROJECTION severity_counts",
            "ALTER TABLE logs DROP PROJECTION attr_names",
        ],
        10_000,
    ),
    "no bloom filters": (
        [f"ALTER TABLE logs DROP INDEX {name}" for name in _BLOOMS]
        + [
            "ALTER TABLE logs DROP INDEX idx_attr_float_keys",
            "ALTER TABLE logs DROP INDEX idx_attr_bool_keys",
        ],
        10_000,
    ),
    "no merges": (["SYSTEM STOP MERGES logs"], 10_000),
    "merge_selector_base 10": (
        ["ALTER TABLE logs MODIFY SETTING merge_selector_base = 10"],
        10_000,
    ),
    "20k-row batches": ([], 20_000),
    # The body and attributes JSON are most of a row's bytes, and every merge
    # recompresses them: their codec's cost is paid about three times per row.
    "20k, ZSTD(1) body+attributes": (
        [
            "ALTER TABLE logs MODIFY COLUMN body String CODEC(ZSTD(1))",
            "ALTER TABLE logs MODIFY COLUMN attributes String CODEC(ZSTD(1))",
        ],
        20_000,
    ),
    "20k, LZ4 body+attributes": (
        [
            "ALTER TABLE logs MODIFY COLUMN body String CODEC(LZ4)",
            "ALTER TABLE logs MODIFY COLUMN attributes String CODEC(LZ4)",
        ],
        20_000,
    ),
    "40k-row batches": ([], 40_000),
    # The engine as end to end has it: one core kept busy by another process (there, the
    # event loop, the spool's threads and the client take ~0.8 of the two cores).
    "20k, beside a busy core": ([], 20_000),
}
_BESIDE_BUSY_CORE = {"20k, beside a busy core"}
# A process that keeps one core busy for as long as it lives.
_BUSY = "while True:\n    pass"


def _run(directory: str, variant: str, seconds: float) -> tuple[float, float, float, int, float]:
    store = ClickHouse(f"chdb://{directory}")
    ch_migrate.apply(store)
    statements, size = VARIANTS[variant]
    for sql in statements:
        store.command(sql)
    blocks = batches(spooled_lines(log_envelopes(200)), size)

    def merged() -> int:
        return int(store.command("SELECT sum(value) FROM system.events WHERE event = 'MergedRows'"))

    merged_before = merged()
    busy = subprocess.Popen([sys.executable, "-c", _BUSY]) if variant in _BESIDE_BUSY_CORE else None
    try:
        rows, elapsed, cpu = sustained(store.client(), blocks, seconds)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    parts = int(store.command("SELECT count() FROM system.parts WHERE table = 'logs' AND active"))
    # What the variant costs on disk: compressed bytes per stored row, all columns.
    on_disk = float(
        store.command(
            "SELECT sum(data_compressed_bytes) / sum(rows) FROM system.parts"
            " WHERE table = 'logs' AND active"
        )
    )
    return rows / elapsed, cpu / rows * 1e6, (merged() - merged_before) / rows, parts, on_disk


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", action="append", choices=sorted(VARIANTS))
    args = parser.parse_args()
    names = args.only or list(VARIANTS)
    for _ in range(args.rounds):
        for name in names:
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                rate, us, merged, parts, on_disk = pool.apply(
                    _run, (tempfile.mkdtemp(prefix="engine-"), name, args.seconds)
                )
            print(
                f"{name:26s} {rate:8,.0f} rows/s  {us:5.1f} us CPU/row  "
                f"merged/inserted {merged:4.2f}  {parts:3d} parts  {on_disk:5.0f} B/row on disk",
                flush=True,
            )


if __name__ == "__main__":
    main()
