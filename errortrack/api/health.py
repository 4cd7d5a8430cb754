"""Liveness and readiness probes.

/healthz and /readyz are answered on the event loop by the served app (``server.py``,
``ReadyzOnLoop``), apart from the management API's threads: with those all held by
requests waiting on a store that does not answer, a probe queued behind them took as long
as they did (7-12 s with two threads, past any load balancer's timeout). The management
app's own resources answer them where it runs alone.

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

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable

import falcon

from errortrack import db
from errortrack.api.errors import RETRY_AFTER
from errortrack.errors import Unavailable
from errortrack.ingest import items
from errortrack.spool import quarantine
from errortrack.state import AppState, one_line

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
        # What the last check that answered said ("ok", "read-only"); a ping's None is "ok".
        self.answer = "ok"
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
                answer = self._ping()
            # Any failure to answer means "not ready"; BaseException too, or the thread
            # died with the check unresolved and /readyz said 503 until a restart.
            except BaseException as exc:
                future.set_exception(exc)
            else:
                self.answer = str(answer or "ok")
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
        for future, since in running.values():
            # The deadline counts from the check's start: a probe that comes while a
            # check hangs answers at once, so many probes cannot hold the API's threads.
            concurrent.futures.wait([future], timeout=self._left(since))
        return self._failures(running)

    async def check_stores_async(self) -> dict[str, str]:
        """``check_stores`` awaited on an event loop: the same checks and deadline, and
        no thread held while waiting."""
        running = {check.name: check.current() for check in self._checks}
        loop = asyncio.get_running_loop()
        for future, since in running.values():
            if future.done():
                continue
            ready = asyncio.Event()

            def wake(_: object, ready: asyncio.Event = ready) -> None:
                # From the check's thread; a loop closed meanwhile has no one to wake.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(ready.set)

            future.add_done_callback(wake)
            # Only the wait is cancelled at the deadline, never the check, which later
            # probes share.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ready.wait(), timeout=self._left(since))
        return self._failures(running)

    def _left(self, since: float) -> float:
        return max(0.0, since + self._deadline - time.monotonic())

    def _failures(
        self, running: dict[str, tuple[concurrent.futures.Future[None], float]]
    ) -> dict[str, str]:
        failures: dict[str, str] = {}
        for name, (future, _) in running.items():
            if not future.done():
                failures[name] = f"did not answer within {self._deadline:g} s"
            elif (exc := future.exception()) is not None:
                failures[name] = one_line(exc)
        return failures

    def refuse(self, failures: dict[str, str]) -> None:
        """Raise the 503 for ``failures``. The probe is public: the answer names the
        stores, the log says why (a driver's message carries hosts, ports, users and
        database names)."""
        for store, why in failures.items():
            log.warning("readyz: %s store not ready: %s", store, why)
        names = ", ".join(sorted(failures))
        raise Unavailable(
            f"store not ready: {names} (the server log says why)", retry_after=RETRY_AFTER
        )

    def ready(self) -> dict[str, object]:
        """The 200's body (reads the quarantine's files)."""
        kept = quarantine.Quarantine(quarantine.directory(self._state.settings.spool_dir))
        body: dict[str, object] = {
            "status": "ok",
            # Still a 200 when read-only: ingest goes on (logs, and events of known keys
            # wait in the spool for their issues) and reads are served; taking this
            # server out of a load balancer would drop what SDKs send instead.
            "relational": self._checks[0].answer,
            "clickhouse": "ok",
            "quarantined_rows": kept.count(),
        }
        runtime = self._state.ingest
        if runtime is not None:
            # What an operator needs to see inserts failing before ingest answers 503:
            # ClickHouse answering a ping says nothing of inserts refused for a full
            # disk, permissions or a broken table (a review found /readyz 200 while
            # every insert failed). Still a 200: this worker serves, and its spool holds
            # what it acknowledged; this worker's own spool, as each worker has one.
            spool = runtime.writer.spool
            body["spool"] = {
                "bytes": spool.size,
                "max_bytes": spool.max_bytes,
                "insert_failures": runtime.writer.failures,
                # Ingest answers 503 while the spool cannot write (a full or read-only
                # disk): /readyz said nothing of it (disk review).
                "write_failures": spool.write_failures,
                # Below the floor every ingest request is a 503 before any write is tried.
                "free_bytes": spool.free_bytes,
                "disk_low": spool.disk_low,
            }
            # Items accepted and not stored, by type (docs/INGEST.md, "Request flow"):
            # the "counted" was a counter nothing showed.
            body["dropped_items"] = items.DROPPED.snapshot()
            # Requests refused (503) because this worker held too many bodies at once.
            body["bodies"] = {
                "held_bytes": runtime.bodies.held,
                "max_bytes": runtime.bodies.limit,
                "refused": runtime.bodies.refused,
            }
        return body

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        failures = self.check_stores()
        if failures:
            self.refuse(failures)
        resp.media = self.ready()

    on_head = on_get


class ReadyzOnLoop:
    """/readyz in the served app's ASGI app, on the event loop (the module's docstring):
    the checks run in their own threads as ever, and the probe awaits them."""

    def __init__(self, readyz: Readyz) -> None:
        self._readyz = readyz

    async def on_get(self, req: object, resp: falcon.Response) -> None:
        failures = await self._readyz.check_stores_async()
        if failures:
            self._readyz.refuse(failures)
        # In a thread of the loop's own pool, not the management API's: a directory
        # listing and small reads, but file I/O all the same.
        resp.media = await asyncio.to_thread(self._readyz.ready)

    on_head = on_get

    async def on_options(self, req: object, resp: falcon.Response) -> None:
        # Falcon's default OPTIONS answer leaves OPTIONS out of Allow; the management
        # routes list it (api/middleware.py), and so does this one.
        resp.set_header("Allow", "GET, HEAD, OPTIONS")
