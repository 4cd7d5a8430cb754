"""A served worker adopts spool directories orphaned after its start.

gunicorn's reload (SIGHUP) boots the new worker before the old one exits, so adoption at
start cannot see what the old one leaves when its last inserts fail (ClickHouse or the
relational store in trouble, a drain longer than its timeout). The running writer looks
again while idle (docs/INGEST.md, "Lifecycle"). Real server, real stores.
"""

from __future__ import annotations

import time

import pytest

from errortrack.spool.segments import Spool
from tests.ingest_support import (
    create_project_in,
    query_data_dir,
    spool_empty,
    spooled_log_line,
    wait_spool_empty,
)
from tests.support import Server, scratch_database, server_env

pytestmark = pytest.mark.e2e


def test_a_spool_directory_orphaned_while_serving_is_inserted_without_a_restart(tmp_path):
    data = tmp_path / "data"
    with scratch_database(tmp_path) as url:
        server = Server(server_env(data, url)).start()
        try:
            pid, _ = create_project_in(url)
            # A worker that exits after the server's worker started, leaving a sealed
            # segment: what a worker replaced by a HUP leaves when its flush fails.
            old = Spool(data / "spool", max_bytes=10**9, batch_rows=10**6)
            old.open()
            lines = [spooled_log_line(pid, f"orphan-{i}", time.time()) for i in range(20)]
            old.append({"logs": b"".join(lines)}, len(lines))
            old.close()  # sealed, lock released: as the old worker's exit leaves it
            assert not spool_empty(data)
            wait_spool_empty(data, timeout=10)  # no restart
        finally:
            server.stop()
        assert "replaying 1 leftover segment(s)" in server.log()
    rows = query_data_dir(
        data, f"SELECT body, count() AS n FROM logs WHERE project_id = {pid} GROUP BY body"
    )
    assert {r["body"]: int(r["n"]) for r in rows} == {f"orphan-{i}": 1 for i in range(20)}
