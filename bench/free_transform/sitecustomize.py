"""An upper bound for a faster log transform, for ``bench.ingest_logs`` (not the server's code).

With this directory on ``PYTHONPATH`` and ``ET_FREE_TRANSFORM=1``, every Python process
started (the benchmark, and the server it starts, which inherits the environment)
replaces ``handle_log`` by a lookup of its own earlier result for the same payload. The
benchmark sends 400 distinct envelopes over and over, so after the first 400 requests the
transform costs one dict lookup (hashing the ~85 KiB payload) instead of ~6 us per log,
and the rows, hence the engine's work, stay the same. What end to end is then is the
most any faster transform (native code) could give:

    PYTHONPATH=bench/free_transform ET_FREE_TRANSFORM=1 \\
        TZ=UTC .venv/bin/python -m bench.ingest_logs --seconds 20 --half-seconds 10

(bench/RESULTS.md, tenth session.) The cached rows keep the time of their first arrival.
"""

import os

if os.environ.get("ET_FREE_TRANSFORM"):
    from typing import Any

    from errortrack.ingest import items, logs

    _real = logs.handle_log
    _done: dict[bytes, Any] = {}

    def handle_log(payload: bytes, headers: dict[str, Any], ctx: Any) -> Any:
        rows = _done.get(payload)
        if rows is None:
            rows = _done[payload] = _real(payload, headers, ctx)
        return rows

    logs.handle_log = handle_log
    items.HANDLERS["log"] = handle_log
