"""gunicorn entry point: ``gunicorn -k asgi 'errortrack.asgi:build()'`` (what ``serve`` runs).

``state`` is module-level so that the gunicorn worker hooks (cli.py) can start the
background work (ingest writer) after fork and stop it when the worker exits.
"""

from __future__ import annotations

from errortrack.config import Settings
from errortrack.server import API_THREADS, ServerApp, create_server_app
from errortrack.state import AppState

state: AppState | None = None


def build(api_threads: int = API_THREADS) -> ServerApp:
    """Builds the stores and the app; connects nothing (that happens after fork)."""
    global state
    state = AppState.build(Settings.from_env())
    return create_server_app(state=state, api_threads=api_threads)
