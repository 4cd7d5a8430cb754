"""Fixtures shared by the in-process end-to-end tests."""

from __future__ import annotations

import dataclasses

import falcon
import falcon.testing
import pytest

from errortrack.app import create_app
from errortrack.server import create_server_app
from errortrack.state import AppState
from tests.access_world import build_world
from tests.ingest_support import make_project


@pytest.fixture
def project(state):
    with state.sessions() as session:
        return make_project(session)


@pytest.fixture
def ingest_client(state):
    # The app owns a spool with open segment files; close them with the test.
    client = falcon.testing.TestClient(create_server_app(state=state))
    yield client
    state.ingest.writer.spool.close()


@pytest.fixture
def ingest_client_with(state):
    """``ingest_client`` with other settings: ``make(**changes)`` returns the state and a
    client of the served app on the test's stores; every spool made is closed with the
    test."""
    made: list[AppState] = []

    def make(**changes):
        settings = dataclasses.replace(state.settings, **changes)
        st = AppState.build(
            settings, engine=state.engine, clickhouse=state.clickhouse, clock=state.clock
        )
        made.append(st)
        return st, falcon.testing.TestClient(create_server_app(state=st))

    yield make
    for st in made:
        st.ingest.writer.spool.close()


@pytest.fixture
def openapi_app(state) -> falcon.App:
    """The app on the test's stores with the openapi feature on (/api-docs, /docs)."""
    on = dataclasses.replace(state.settings, openapi=True)
    return create_app(
        state=AppState.build(
            on, engine=state.engine, clickhouse=state.clickhouse, clock=state.clock
        )
    )


@pytest.fixture
def ingest_world(state, client):
    """Callers with their tokens and a project (tests.access_world) on the app as served:
    SDK ingest and the management API together."""
    yield build_world(state, client)
    state.ingest.writer.spool.close()
