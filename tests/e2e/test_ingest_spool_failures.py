"""Nothing acknowledged is lost: failing inserts, the spool cap, replays without duplicates.

In-process with a real spool on disk, real chDB and the real HTTP app; the failure is
injected through the writer's ``insert`` dependency, never through a setting.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import falcon.testing

from errortrack.ingest import runtime
from errortrack.server import create_server_app
from errortrack.spool.segments import Spool
from errortrack.spool.writer import Writer, clickhouse_insert
from errortrack.state import AppState
from tests.ingest_support import log_envelope, make_project, sentry_auth, spooled_log_line


def _log(body):
    return {"timestamp": time.time(), "level": "info", "body": body, "trace_id": "0" * 32}


def _counts(clickhouse, pid):
    return dict(
        clickhouse.query_rows(
            "SELECT body, count() FROM logs WHERE project_id = {p:UInt64} GROUP BY body",
            parameters={"p": pid},
        )
    )


def _wait(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_failing_inserts_then_cap_then_recovery_lands_each_acknowledged_log_once(state, clickhouse):
    capped = dataclasses.replace(state.settings, spool_max_bytes=40_000, writer_max_age_ms=50)
    st = AppState.build(capped, engine=state.engine, clickhouse=clickhouse, clock=state.clock)
    real = clickhouse_insert(clickhouse)
    broken = threading.Event()
    broken.set()
    attempts = []

    def flaky(table, data, token):
        attempts.append(token)
        if broken.is_set():
            raise ConnectionError("injected: ClickHouse unreachable")
        real(table, data, token)

    st.ingest = runtime.build(st, insert=flaky, backoff=(0.02, 0.1))
    client = falcon.testing.TestClient(create_server_app(state=st))
    with st.sessions() as session:
        pid, key = make_project(session)
    st.ingest.start()
    try:
        acked, refused = [], []
        for n in range(200):
            body = [f"r{n}-{i}" for i in range(10)]
            resp = client.simulate_post(
                f"/api/{pid}/envelope/",
                body=log_envelope([_log(b) for b in body]),
                headers=sentry_auth(key),
            )
            if resp.status_code == 200:
                acked += body
            else:
                assert resp.status_code == 503, resp.text
                assert resp.json["error"]["code"] == "unavailable"
                assert int(resp.headers["Retry-After"]) > 0
                refused += body
                if len(refused) >= 30:
                    break
        assert len(acked) >= 100 and refused  # 200s while the spool had room, then 503s
        _wait(lambda: len(attempts) >= 3)  # the writer keeps retrying with backoff
        assert _counts(clickhouse, pid) == {}
        # /readyz stays 200 (ClickHouse answers) and shows the inserts failing.
        ready = client.simulate_get("/readyz")
        assert ready.status_code == 200, ready.text
        spool = ready.json["spool"]
        assert spool["insert_failures"] >= 1 and spool["max_bytes"] == 40_000
        assert spool["bytes"] >= 30_000
        broken.clear()
        _wait(lambda: st.ingest.writer.spool.pending() == 0)
        _wait(lambda: client.simulate_get("/readyz").json["spool"]["insert_failures"] == 0)
    finally:
        st.ingest.stop()
    counts = _counts(clickhouse, pid)
    assert counts == dict.fromkeys(acked, 1)
    assert not set(refused) & set(counts)


def test_crash_between_insert_and_delete_does_not_duplicate(state, clickhouse, tmp_path):
    with state.sessions() as session:
        pid, _ = make_project(session)

    now = time.time()
    # Without ids, as ingest spools them (ClickHouse makes each row's id): with fixed ids
    # the replayed block was byte-identical, and ClickHouse dropped it by its content
    # hash whether or not the writer sent its deduplication token.
    rows = b"".join(spooled_log_line(pid, f"once-{i}", now) for i in range(50))
    first = Spool(tmp_path / "spool", max_bytes=10**9, batch_rows=10**6)
    first.open()
    first.append({"logs": rows}, 50)
    first.seal()
    (segment,) = first.sealed()
    Writer(first, clickhouse_insert(clickhouse)).write_segment(segment)  # inserted...
    first.close()  # ...and the process dies before deleting the segment
    assert sum(_counts(clickhouse, pid).values()) == 50
    second = Spool(tmp_path / "spool", max_bytes=10**9, batch_rows=10**6)
    second.open()  # adopts the orphan and replays it
    assert second.pending() == 1
    Writer(second, clickhouse_insert(clickhouse)).drain()
    assert _counts(clickhouse, pid) == {f"once-{i}": 1 for i in range(50)}
    assert second.pending() == 0
    second.close()
