"""gunicorn entry point: ``gunicorn -k asgi 'errortrack.asgi:build()'`` (what ``serve`` runs).

``state`` is module-level so that the gunicorn worker hooks (cli.py) can start the
background work (ingest writer) after fork and stop it when the worker exits.
"""

from __future__ import annotations

import sys

# chDB imports pyarrow, and with it numpy, whenever they are installed (its own package
# requires them), only for Arrow and DataFrame results that errortrack never asks for:
# ~60 MB of the serving process's resident memory (bench/RESULTS.md, fifth session).
# Marking the module absent before chDB is first imported makes chDB run without it.
# Only the served worker does this; other processes (tests, benchmarks) keep pyarrow.
sys.modules.setdefault("pyarrow", None)  # type: ignore[arg-type]

from errortrack.config import Settings  # noqa: E402
from errortrack.server import API_THREADS, ServerApp, create_server_app  # noqa: E402
from errortrack.state import AppState  # noqa: E402

state: AppState | None = None


def build(api_threads: int = API_THREADS) -> ServerApp:
    """Builds the stores and the app; connects nothing (that happens after fork)."""
    global state
    state = AppState.build(Settings.from_env())
    return create_server_app(state=state, api_threads=api_threads)
