"""``errortrack token create``: an API token for an existing user, for automation and set-up.

It touches only the relational store (never chDB), so it works while the server runs.
"""

from __future__ import annotations

import sys

import click


@click.group()
def token() -> None:
    """Manage API tokens."""


@token.command("create")
@click.option("--email", required=True, help="Email of the existing user the token acts as.")
@click.option("--description", required=True, help="What the token is for (shown in lists).")
def create(email: str, description: str) -> None:
    """Print a new API token for an existing user (shown once)."""
    import sqlalchemy as sa

    from errortrack import db
    from errortrack.auth.tokens import create_token
    from errortrack.cli import _settings, relational_store_errors, upgrade_relational
    from errortrack.errors import ErrortrackError
    from errortrack.models import User
    from errortrack.state import utc_now
    from errortrack.team.users import email_key

    settings = _settings()
    upgrade_relational(settings)
    engine = db.make_engine(settings.resolved_database_url)
    try:
        with relational_store_errors(), db.unit_of_work(db.make_sessionmaker(engine)) as session:
            user = session.scalar(sa.select(User).where(User.email == email_key(email)))
            if user is None:
                click.echo(f"error: no user with email {email}", err=True)
                sys.exit(1)
            new = create_token(session, user_id=user.id, description=description, now=utc_now())
    except ErrortrackError as exc:
        click.echo(f"error: {exc.message}", err=True)
        sys.exit(1)
    finally:
        engine.dispose()
    click.echo(new.secret)
