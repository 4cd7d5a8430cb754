"""Liveness and readiness probes.

/healthz is answered on the event loop by the served app (``server.py``), apart from the
management API's threads; this resource answers it where the management app runs alone.

/readyz also reports ``quarantined_rows``: rows ClickHouse refused for their data, kept
in the spool's quarantine (docs/INGEST.md, "Poison rows"). They do not make the server
unready: ingest goes on around them, and a 503 would only take a working instance out
of its load balancer. Counted from the files, so every worker and restart agrees.

Each store's check runs in a thread of its own, one at a time per store (a probe that
comes while one runs waits for it), and a probe waits at most ``READY_DEADLINE``: a
store that does not answer (a network partition drops its packets) makes /readyz a 503
within that time, and holds one thread, not one of the management API's per probe.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable

import falcon

from errortrack import db
from errortrack.api.errors import RETRY_AFTER
from errortrack.errors import Unavailable
from errortrack.spool import quarantine
from errortrack.state import AppState

log = logging.getLogger(__name__)

# Seconds a probe waits for the stores: under the 3 s that docker-compose's health check
# (and many load balancers) give /readyz, far over a store's answer when it is well.
READY_DEADLINE = 2.5
# A check thread not asked for this long ends (and lets go of the app it checks).
_IDLE_SECONDS = 60.0


class Healthz:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {"status": "ok"}

    # Load balancers probe with HEAD too (HTTP says HEAD goes wherever GET does); the
    # server sends no body for it.
    on_head = on_get


class _SingleFlight:
    """One check of a store at a time, in a daemon thread of its own, kept while probes
    come (the stores make a client per thread, on its first call); callers that come
    while a check runs share its answer."""

    def __init__(self, name: str, ping: Callable[[], object]) -> None:
        self.name = name
        self._ping = ping
        self._lock = threading.Lock()
        self._running: concurrent.futures.Future[None] | None = None
        self.started = 0.0  # when the check in ``_running`` was asked for (monotonic)
        self._work: queue.SimpleQueue[concurrent.futures.Future[None]] | None = None

    def current(self) -> tuple[concurrent.futures.Future[None], float]:
        """The running check (a new one if none runs) and when it was asked for."""
        with self._lock:
            if self._running is None or self._running.done():
                if self._work is None:
                    self._work = queue.SimpleQueue()
                    threading.Thread(
                        target=self._serve,
                        args=(self._work,),
                        name=f"readyz-{self.name}",
                        daemon=True,  # a check that never returns must not hold the exit
                    ).start()
                self._running = concurrent.futures.Future()
                self.started = time.monotonic()
                self._work.put(self._running)
            return self._running, self.started

    def _serve(self, work: queue.SimpleQueue[concurrent.futures.Future[None]]) -> None:
        while True:
            try:
                future = work.get(timeout=_IDLE_SECONDS)
            except queue.Empty:
                with self._lock:  # current() queues under it: nothing can slip in
                    if work.empty():
                        self._work = None  # the next check starts a thread again
                        return
                continue
            try:
                self._ping()
            # Any failure to answer means "not ready"; BaseException too, or the thread
            # died with the check unresolved and /readyz said 503 until a restart.
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(None)


class Readyz:
    def __init__(self, state: AppState, *, deadline: float = READY_DEADLINE) -> None:
        self._state = state
        self._deadline = deadline
        self._checks = [
            _SingleFlight("relational", lambda: db.ping(state.engine)),
            _SingleFlight("clickhouse", state.clickhouse.ping),
        ]

    def check_stores(self) -> dict[str, str]:
        """Store name -> why it is not ready, within the deadline; empty when both answer."""
        running = {check.name: check.current() for check in self._checks}
        failures: dict[str, str] = {}
        for name, (future, since) in running.items():
            # The deadline counts from the check's start: a probe that comes while a
            # check hangs answers at once, so many probes cannot hold the API's threads.
            left = since + self._deadline - time.monotonic()
            concurrent.futures.wait([future], timeout=max(0.0, left))
            if not future.done():
                failures[name] = f"did not answer within {self._deadline:g} s"
            elif (exc := future.exception()) is not None:
                failures[name] = _one_line(exc)
        return failures

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        failures = self.check_stores()
        if failures:
            # The probe is public: the answer names the stores, the log says why (a
            # driver's message carries hosts, ports, users and database names).
            for store, why in failures.items():
                log.warning("readyz: %s store not ready: %s", store, why)
            names = ", ".join(sorted(failures))
            raise Unavailable(
                f"store not ready: {names} (the server log says why)", retry_after=RETRY_AFTER
            )
        kept = quarantine.Quarantine(quarantine.directory(self._state.settings.spool_dir))
        resp.media = {
            "status": "ok",
            "relational": "ok",
            "clickhouse": "ok",
            "quarantined_rows": kept.count(),
        }

    on_head = on_get


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]
