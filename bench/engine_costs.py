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
import subprocess
import sys
import tempfile
from typing import NamedTuple

from bench.raw_insert import batches, in_child, log_envelopes, spooled_lines, sustained
from errortrack.analytics import ClickHouse
from errortrack.analytics import migrate as ch_migrate


class Variant(NamedTuple):
    statements: list[str]  # run after the migrations
    rows: int  # per insert
    # Inserting while another process keeps one core busy, as end to end: there the
    # event loop, the spool's threads and the client take ~0.8 of the two cores.
    beside_busy_core: bool = False


# The typed attribute maps: column suffix and value type.
MAPS = (("string", "String"), ("int", "Int64"), ("float", "Float64"), ("bool", "Bool"))
_BLOOMS = ("idx_trace_id", "idx_attr_keys", "idx_attr_int_keys")
# The body and attributes JSON are most of a row's bytes, and every merge recompresses
# them: their codec's cost is paid about three times per row.
_CODEC = "ALTER TABLE logs MODIFY COLUMN {} String CODEC({})"
VARIANTS: dict[str, Variant] = {
    "as migrated": Variant([], 10_000),
    "no 5-gram body index": Variant(["ALTER TABLE logs DROP INDEX idx_body_5gram"], 10_000),
    "no string-pair text index": Variant(
        ["ALTER TABLE logs DROP INDEX idx_attr_string_pairs"], 10_000
    ),
    "no projections": Variant(
        [
            "ALTER TABLE logs DROP PROJECTION severity_counts",
            "ALTER TABLE logs DROP PROJECTION attr_names",
        ],
        10_000,
    ),
    "no bloom filters": Variant(
        [f"ALTER TABLE logs DROP INDEX {name}" for name in _BLOOMS]
        + [
            "ALTER TABLE logs DROP INDEX idx_attr_float_keys",
            "ALTER TABLE logs DROP INDEX idx_attr_bool_keys",
        ],
        10_000,
    ),
    "no merges": Variant(["SYSTEM STOP MERGES logs"], 10_000),
    "merge_selector_base 10": Variant(
        ["ALTER TABLE logs MODIFY SETTING merge_selector_base = 10"], 10_000
    ),
    "20k-row batches": Variant([], 20_000),
    "20k, ZSTD(1) body+attributes": Variant(
        [_CODEC.format(column, "ZSTD(1)") for column in ("body", "attributes")], 20_000
    ),
    "20k, LZ4 body+attributes": Variant(
        [_CODEC.format(column, "LZ4") for column in ("body", "attributes")], 20_000
    ),
    "40k-row batches": Variant([], 40_000),
    "20k, beside a busy core": Variant([], 20_000, beside_busy_core=True),
    # Since clickhouse/0012 the maps key on String; this puts LowCardinality back.
    "20k, LowCardinality map keys": Variant(
        [
            f"ALTER TABLE logs MODIFY COLUMN attr_{name} Map(LowCardinality(String), {value})"
            for name, value in MAPS
        ],
        20_000,
    ),
    "20k, level String": Variant(["ALTER TABLE logs MODIFY COLUMN level String"], 20_000),
    # Fewer, wider merges: each row is rewritten fewer times, and more parts wait.
    "20k, merge_selector_base 10": Variant(
        ["ALTER TABLE logs MODIFY SETTING merge_selector_base = 10"], 20_000
    ),
    "20k, no lower-max-parts heuristic": Variant(
        [
            "ALTER TABLE logs MODIFY SETTING"
            " merge_selector_enable_heuristic_to_lower_max_parts_to_merge_at_once = 0"
        ],
        20_000,
    ),
}
# A process that keeps one core busy for as long as it lives.
_BUSY = "while True:\n    pass"


def _run(directory: str, variant: str, seconds: float) -> tuple[float, float, float, int, float]:
    store = ClickHouse(f"chdb://{directory}")
    ch_migrate.apply(store)
    chosen = VARIANTS[variant]
    for sql in chosen.statements:
        store.command(sql)
    blocks = batches(spooled_lines(log_envelopes(200)), chosen.rows)

    def merged() -> int:
        return int(store.command("SELECT sum(value) FROM system.events WHERE event = 'MergedRows'"))

    merged_before = merged()
    busy = subprocess.Popen([sys.executable, "-c", _BUSY]) if chosen.beside_busy_core else None
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
            rate, us, merged, parts, on_disk = in_child(
                _run, tempfile.mkdtemp(prefix="engine-"), name, args.seconds
            )
            print(
                f"{name:26s} {rate:8,.0f} rows/s  {us:5.1f} us CPU/row  "
                f"merged/inserted {merged:4.2f}  {parts:3d} parts  {on_disk:5.0f} B/row on disk",
                flush=True,
            )


if __name__ == "__main__":
    main()
