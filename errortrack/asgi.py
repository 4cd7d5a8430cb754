"""gunicorn entry point: ``gunicorn -k asgi 'errortrack.asgi:build()'`` (what ``serve`` runs).

``state`` and ``lifecycle`` are module-level so that serve's gunicorn worker hooks
(cli.py) can start the background work (ingest writer, retention) after fork and stop it
when the worker exits. The ASGI lifespan (server.py) starts and stops the same
``lifecycle``, so a plain ``gunicorn -k asgi 'errortrack.asgi:build()'`` inserts what it
spools too; whichever comes first does it, the other finds it done. Plain gunicorn does
not run the migrations (``errortrack migrate`` first) nor set the time zone (TZ=UTC is
the tested setting), and on the embedded store it must run one worker (``-w 1``).
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
from typing import IO

# chDB imports pyarrow, and with it numpy, whenever they are installed (its own package
# requires them), only for Arrow and DataFrame results that errortrack never asks for:
# ~60 MB of the serving process's resident memory (bench/RESULTS.md, fifth session).
# Marking the module absent before chDB is first imported makes chDB run without it.
# Only the served worker does this; other processes (tests, benchmarks) keep pyarrow.
sys.modules.setdefault("pyarrow", None)  # type: ignore[arg-type]

from errortrack import private  # noqa: E402
from errortrack.config import Settings  # noqa: E402
from errortrack.server import API_THREADS, ServerApp, create_server_app  # noqa: E402
from errortrack.state import AppState  # noqa: E402

log = logging.getLogger(__name__)

state: AppState | None = None
lifecycle: Lifecycle | None = None


class Lifecycle:
    """Starts the worker's background work once and stops it once, whoever asks first.

    serve's ``post_worker_init`` hook starts it before the lifespan's startup does; the
    lifespan's shutdown (in a thread) stops it before ``worker_exit`` does, and a second
    ``stop`` waits for the first to end, so the worker never exits mid-flush.
    """

    def __init__(self, state: AppState, *, lock_data_dir: bool) -> None:
        self.state = state
        # serve holds the data dir's lock in the master; a worker of plain gunicorn takes
        # it itself (shared: its sibling workers, and after a reload its successor, are
        # the same server; serve's exclusive lock and this one exclude each other).
        self.lock_data_dir = lock_data_dir
        self._lock = threading.Lock()
        self._started = False
        self._stopped = False
        self._data_dir_lock: IO[str] | None = None

    def start(self) -> None:
        with self._lock:
            if self._started or self._stopped:
                return
            if self.lock_data_dir:
                from errortrack.cli import DataDirInUse, lock_data_dir

                try:
                    self._data_dir_lock = lock_data_dir(self.state.settings, shared=True)
                except DataDirInUse as exc:
                    log.error("%s", exc)
                    raise
            self._started = True
            self.state.start_background()
            if self.state.settings.embedded_clickhouse:
                self._check_engine()
        # Everything built so far (modules, the app, the stores' clients: ~80k objects)
        # lives as long as the worker. Left to the cyclic GC, each full collection walks
        # them all while holding the GIL: under bench.ingest_logs that was 34 pauses of
        # 63 ms (median, up to 116 ms) in 40 s, the slowest requests' whole delay
        # (bench/RESULTS.md, fifth session). Frozen, they are never scanned again.
        gc.collect()
        gc.freeze()

    def _check_engine(self) -> None:
        """Open chDB now, and say at once when it cannot be opened here: it allows one
        process per directory, so a second worker under plain gunicorn (-w 2)
        acknowledged ingest its writer could never insert (``serve`` runs one worker on
        the embedded store for this).

        Under ``serve`` too: the engine was opened at its first use, so a second server
        whose own data dir was free but whose ``ERRORTRACK_CLICKHOUSE_URL`` named this
        one's chDB directory passed its migrations and took the engine over while this
        one was idle (its ingest then spooled and its API answered 503 until the other
        stopped; operations review, thirty-second session). Held from the start, the
        directory refuses the second server's migrations, which say so in one line."""
        try:
            self.state.clickhouse.ping()
        except Exception as exc:  # chDB's "Cannot lock file ... status", or any failure
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            log.error(
                "the embedded ClickHouse store cannot be opened in this worker (%s): it "
                "allows one process, so run plain gunicorn with one worker (-w 1); after "
                "a reload this clears when the old worker exits. Until then spooled rows "
                "wait and ingest fills the spool.",
                reason,
            )

    def stop(self) -> None:
        # Flushes the spool into ClickHouse; what cannot be inserted is adopted by the
        # next worker (after a reload) or replayed at the next start.
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            try:
                if self._started:
                    self.state.stop_background()
            finally:
                if self._data_dir_lock is not None:
                    self._data_dir_lock.close()
                    self._data_dir_lock = None


def build(api_threads: int = API_THREADS, *, lock_data_dir: bool = True) -> ServerApp:
    """Builds the stores and the app; connects nothing (that happens after fork).

    ``serve`` passes ``lock_data_dir=False``: it holds the data dir's lock itself."""
    global state, lifecycle
    private.restrict_new_files()  # run by gunicorn directly too, not only by `serve`
    state = AppState.build(Settings.from_env(), api_threads=api_threads)
    lifecycle = Lifecycle(state, lock_data_dir=lock_data_dir)
    return create_server_app(state=state, api_threads=api_threads, lifecycle=lifecycle)
