"""Liveness and readiness probes.

/readyz also reports ``quarantined_rows``: rows ClickHouse refused for their data, kept
in the spool's quarantine (docs/INGEST.md, "Poison rows"). They do not make the server
unready: ingest goes on around them, and a 503 would only take a working instance out
of its load balancer. Counted from the files, so every worker and restart agrees.
"""

from __future__ import annotations

import logging

import falcon

from errortrack.errors import Unavailable
from errortrack.spool import quarantine
from errortrack.state import AppState

log = logging.getLogger(__name__)


class Healthz:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"status": "ok"}

    # Load balancers probe with HEAD too (HTTP says HEAD goes wherever GET does); the
    # server sends no body for it.
    on_head = on_get


class Readyz:
    def __init__(self, state: AppState) -> None:
        self._state = state

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        failures = self._state.check_stores()
        if failures:
            # The probe is public: the answer names the stores, the log says why (a
            # driver's message carries hosts, ports, users and database names).
            for store, why in failures.items():
                log.warning("readyz: %s store not ready: %s", store, why)
            names = ", ".join(sorted(failures))
            raise Unavailable(f"store not ready: {names} (the server log says why)", retry_after=5)
        kept = quarantine.Quarantine(quarantine.directory(self._state.settings.spool_dir))
        resp.media = {
            "status": "ok",
            "relational": "ok",
            "clickhouse": "ok",
            "quarantined_rows": kept.count(),
        }

    on_head = on_get
