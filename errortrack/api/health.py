"""Liveness and readiness probes."""

from __future__ import annotations

import falcon

from errortrack.errors import Unavailable
from errortrack.state import AppState


class Healthz:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"status": "ok"}


class Readyz:
    def __init__(self, state: AppState) -> None:
        self._state = state

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        failures = self._state.check_stores()
        if failures:
            detail = "; ".join(f"{store}: {why}" for store, why in failures.items())
            raise Unavailable(f"store not ready: {detail}", retry_after=5)
        resp.media = {"status": "ok", "relational": "ok", "clickhouse": "ok"}
