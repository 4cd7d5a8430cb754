"""What ingest would give without the logs table's search indexes and projections, for
``bench.ingest_logs`` (not the server's code; issue 6's query targets rest on them).

With this directory on ``PYTHONPATH`` and ``ET_BARE_LOGS_TABLE=1``, every Python process
started (the benchmark, the server it starts and the raw reference's child processes,
which inherit the environment) drops the logs table's skip indexes and projections right
after its ClickHouse migrations, so end to end and the raw reference both insert into
the bare table:

    PYTHONPATH=bench/bare_logs_table ET_BARE_LOGS_TABLE=1 \\
        TZ=UTC .venv/bin/python -m bench.ingest_logs --seconds 20 --half-seconds 10

(bench/RESULTS.md, eleventh session.)
"""

import os

if os.environ.get("ET_BARE_LOGS_TABLE"):
    from typing import Any

    from errortrack.analytics import migrate

    _INDEXES = (
        "idx_trace_id",
        "idx_attr_keys",
        "idx_attr_int_keys",
        "idx_attr_float_keys",
        "idx_attr_bool_keys",
        "idx_body_5gram",
        "idx_attr_string_pairs",
    )
    _PROJECTIONS = ("severity_counts", "attr_names")
    _real = migrate.apply

    def apply(store: Any, *args: Any, **kwargs: Any) -> list[str]:
        newly = _real(store, *args, **kwargs)
        for name in _INDEXES:
            store.command(f"ALTER TABLE logs DROP INDEX IF EXISTS {name}")
        for name in _PROJECTIONS:
            store.command(f"ALTER TABLE logs DROP PROJECTION IF EXISTS {name}")
        return newly

    migrate.apply = apply
