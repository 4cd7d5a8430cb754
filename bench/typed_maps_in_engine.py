"""Could ClickHouse build the typed attribute maps instead of the event loop?

Ingest builds ``attr_string``/``attr_int``/``attr_float``/``attr_bool`` in Python from
each log's attributes (``ingest/logs.py``: ~1.9 us to decode them, ~1.5 us for the maps,
per log with 12 attributes). The alternative: leave the maps out of the spooled row and
let the columns' DEFAULT expressions derive them from the ``attributes`` text at insert.
This measures the engine's side of that trade: sustained 10k-row raw inserts (the
writer's settings, fresh directory, child process, alternating), the rows as ingest
spools them against the same rows without the maps into a table whose maps are DEFAULT
expressions over ``JSONExtractKeysAndValuesRaw(attributes)``, close to ingest's rules.
It prints rows/s, the engine's CPU per row and the spooled bytes per row.

    TZ=UTC .venv/bin/python -m bench.typed_maps_in_engine [--seconds 10] [--rounds 2]

Result (bench/RESULTS.md, tenth session): the engine spends ~9-10 us more per row, 3x
what the event loop would save, so the maps stay in Python.
"""

from __future__ import annotations

import argparse
import tempfile

from bench.raw_insert import batches, in_child, log_envelopes, spooled_lines, sustained
from errortrack.analytics import ClickHouse
from errortrack.analytics import migrate as ch_migrate

# Each attribute as (name, declared type, JSON type of its value, value as JSON text).
_PAIRS = (
    "arrayMap(x -> (x.1, JSONExtractString(x.2, 'type'), JSONType(x.2, 'value'), "
    "JSONExtractRaw(x.2, 'value')), JSONExtractKeysAndValuesRaw(attributes))"
)
_STRING = (
    "p.2 = 'string' OR (p.2 NOT IN ('integer', 'double', 'boolean') AND p.3 != 'Null')",
    "if(p.3 = 'String', JSONExtractString(p.4), p.4)",
)
_INT_TEXT = "if(p.3 = 'String', JSONExtractString(p.4), p.4)"
_INT = (f"p.2 = 'integer' AND isNotNull(toInt64OrNull({_INT_TEXT}))", f"toInt64({_INT_TEXT})")
_FLOAT = ("p.2 = 'double' AND p.3 IN ('Int64', 'UInt64', 'Double')", "toFloat64(p.4)")
_BOOL = ("p.2 = 'boolean' AND p.3 = 'Bool'", "p.4 = 'true'")


def _default(keep: str, value: str) -> str:
    kept = f"arrayFilter(p -> {keep}, {_PAIRS})"
    return f"mapFromArrays(arrayMap(p -> p.1, {kept}), arrayMap(p -> {value}, {kept}))"


DEFAULTS = {
    "attr_string": _default(*_STRING),
    "attr_int": _default(*_INT),
    "attr_float": _default(*_FLOAT),
    "attr_bool": _default(*_BOOL),
}


def _lines(in_engine: bool) -> list[bytes]:
    lines = spooled_lines(log_envelopes(200))
    if not in_engine:
        return lines
    # The maps sit between "attributes" and "retention_days" in a spooled row.
    return [
        line[: line.index(b',"attr_string":')] + line[line.index(b',"retention_days":') :]
        for line in lines
    ]


def _run(directory: str, in_engine: bool, seconds: float) -> tuple[float, float, float]:
    store = ClickHouse(f"chdb://{directory}")
    ch_migrate.apply(store)
    if in_engine:
        for column, expression in DEFAULTS.items():
            store.command(f"ALTER TABLE logs MODIFY COLUMN {column} DEFAULT {expression}")
    lines = _lines(in_engine)
    blocks = batches(lines, 10_000)
    rows, elapsed, cpu = sustained(store.client(), blocks, seconds)
    return rows / elapsed, cpu / rows * 1e6, sum(map(len, blocks)) / len(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    for _ in range(args.rounds):
        for in_engine, name in ((False, "maps from Python"), (True, "maps by DEFAULT")):
            rate, us, width = in_child(
                _run, tempfile.mkdtemp(prefix="maps-"), in_engine, args.seconds
            )
            print(
                f"{name:17s} {rate:8,.0f} rows/s  {us:5.1f} us engine CPU/row  "
                f"{width:5.0f} B/row spooled",
                flush=True,
            )


if __name__ == "__main__":
    main()
