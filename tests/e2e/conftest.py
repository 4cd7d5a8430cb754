"""Fixtures shared by the in-process ingest tests."""

from __future__ import annotations

import falcon.testing
import pytest

from errortrack.app import create_app
from tests.ingest_support import make_project


@pytest.fixture
def project(state):
    with state.sessions() as session:
        return make_project(session)


@pytest.fixture
def ingest_client(state):
    # The app owns a spool with open segment files; close them with the test.
    client = falcon.testing.TestClient(create_app(state=state))
    yield client
    state.ingest.writer.spool.close()
