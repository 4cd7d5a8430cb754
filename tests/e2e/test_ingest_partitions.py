"""A batch may span more partitions than ClickHouse allows one insert by default.

The logs, events and spans tables are partitioned by (day, retention_days), ingest keeps
SDK times up to 30 days back, and one segment holds every project's rows: a segment can
cover well over 100 partitions. A real spool on disk, real chDB, the real insert.
"""

from __future__ import annotations

import time

from errortrack.spool.segments import Spool
from errortrack.spool.writer import Writer, clickhouse_insert
from tests.ingest_support import make_project, spooled_log_line

RETENTIONS = (30, 60, 90, 365)
DAYS = 26  # 4 x 26 = 104 partitions, past ClickHouse's default limit of 100


def _open_spool(root) -> Spool:
    spool = Spool(root, max_bytes=10**9, batch_rows=10**6)
    spool.open()
    return spool


def _stored(clickhouse, pids: list[int]) -> dict[str, int]:
    return dict(
        clickhouse.query_rows(
            "SELECT body, count() FROM logs WHERE project_id IN {p:Array(UInt64)} GROUP BY body",
            parameters={"p": pids},
        )
    )


def test_a_batch_over_100_partitions_goes_in_once_and_once_again_after_a_replay(
    state, clickhouse, tmp_path
):
    # Before max_partitions_per_insert_block=0 this insert failed with TOO_MANY_PARTS
    # (code 252), a transient error to the writer: it retried the segment forever.
    pids, lines, bodies = [], [], []
    now = float(int(time.time()))
    with state.sessions() as session:
        for retention in RETENTIONS:
            pid, _ = make_project(session, f"r{retention}", retention_days=retention)
            pids.append(pid)
            for d in range(DAYS):
                body = f"p{pid}-d{d}"
                bodies.append(body)
                at = now - d * 86400
                lines.append(spooled_log_line(pid, body, at, retention_days=retention))
    partitions = {
        (int(at // 86400), r) for r in RETENTIONS for at in (now - d * 86400 for d in range(DAYS))
    }
    assert len(partitions) > 100

    first = _open_spool(tmp_path / "spool")
    first.append({"logs": b"".join(lines)}, len(lines))
    first.seal()
    (segment,) = first.sealed()
    Writer(first, clickhouse_insert(clickhouse)).write_segment(segment)  # inserted...
    first.close()  # ...and the process dies before deleting the segment
    assert _stored(clickhouse, pids) == dict.fromkeys(bodies, 1)

    # The replay is deduplicated per partition (a block's id includes its partition),
    # so the same token over 104 partitions still lands each row once.
    second = _open_spool(tmp_path / "spool")
    assert second.pending() == 1
    Writer(second, clickhouse_insert(clickhouse)).drain()
    assert second.pending() == 0
    second.close()
    assert _stored(clickhouse, pids) == dict.fromkeys(bodies, 1)
    assert len(bodies) == 104
