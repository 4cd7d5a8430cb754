"""gunicorn entry point: ``gunicorn errortrack.wsgi:app``. Builds the app, connects nothing.

``state`` is module-level so that the gunicorn worker hooks (cli.py) can start the
background work (ingest writer) after fork and stop it when the worker exits.
"""

from errortrack.app import create_app
from errortrack.config import Settings
from errortrack.state import AppState

state = AppState.build(Settings.from_env())
app = create_app(state=state)
