"""Helpers for the SDK issue tests: a served instance with its stores, and waiting on it."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from errortrack import db
from errortrack.models import Issue
from errortrack.projects.service import active_key, create_project, dsn
from tests.support import ROOT, Server

PY_CLIENT = Path(__file__).resolve().parent / "sdk" / "py_client.py"
NODE_DIR = Path(__file__).resolve().parent / "node"


@dataclasses.dataclass
class Served:
    server: Server
    database_url: str
    data_dir: Path

    def __post_init__(self) -> None:
        self.engine = db.make_engine(self.database_url)
        self.sessions = db.make_sessionmaker(self.engine)

    def new_project(self, name: str) -> tuple[int, str]:
        """A project of its own per test, so counts never mix; returns (id, DSN)."""
        with db.unit_of_work(self.sessions) as session:
            project = create_project(session, name=name)
            key = active_key(session, project.id)
            assert key is not None
            return project.id, dsn(self.server.url, key.public_key, project.id)

    def issues(self, project_id: int) -> dict[str, Issue]:
        with db.unit_of_work(self.sessions) as session:
            rows = session.scalars(sa.select(Issue).where(Issue.project_id == project_id))
            return {i.title: i for i in rows}

    def wait_for_issues(
        self, project_id: int, done: Callable[[dict[str, Issue]], bool], timeout: float = 20
    ) -> dict[str, Issue]:
        deadline = time.monotonic() + timeout
        while True:
            found = self.issues(project_id)
            if done(found) or time.monotonic() > deadline:
                return found
            time.sleep(0.2)

    def clickhouse_rows(self, sql: str) -> list[list[Any]]:
        """Query the server's chDB after it stopped: chDB allows one process per data dir,
        so a fresh interpreter opens it (this test process has its own engine)."""
        code = (
            "import json, sys\n"
            "from errortrack.analytics import ClickHouse\n"
            "store = ClickHouse('chdb://' + sys.argv[1])\n"
            "print(json.dumps(store.query_rows(sys.argv[2]), default=str))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, str((self.data_dir / "clickhouse").resolve()), sql],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            check=True,
        )
        return list(json.loads(out.stdout))


def run_sdk(sdk: str, project_dsn: str, scenario: str) -> str:
    """Run one scenario of the real SDK's client app; returns what it printed."""
    if sdk == "python":
        command, cwd = [sys.executable, str(PY_CLIENT)], ROOT
    else:
        command, cwd = ["node", "issues_client.js"], NODE_DIR
    out = subprocess.run(
        [*command, project_dsn, scenario], capture_output=True, text=True, timeout=60, cwd=cwd
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()
