"""gunicorn entry point: ``gunicorn errortrack.wsgi:app``. Builds the app, connects nothing."""

from errortrack.app import create_app

app = create_app()
