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

    _real = migrate.apply

    def apply(store: Any, *args: Any, **kwargs: Any) -> list[str]:
        newly = _real(store, *args, **kwargs)
        # Whatever the migrations made, read from the engine, so that this stays true
        # when they add an index.
        for kind, table in (("INDEX", "data_skipping_indices"), ("PROJECTION", "projections")):
            for (name,) in store.query_rows(
                f"SELECT name FROM system.{table}"
                " WHERE database = currentDatabase() AND table = 'logs'"
            ):
                store.command(f"ALTER TABLE logs DROP {kind} {name}")
        return newly

    migrate.apply = apply
