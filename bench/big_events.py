"""Peak memory under big error events: how large spool segments get, and the server's RSS.

Starts ``errortrack serve`` on the embedded default, sends envelopes of one ~900 KB error
event each (an ~8 KB realistic event, bench/eventdata.py, with a big ``extra`` value:
under the 1 MiB event cap) over ``--connections`` keep-alive connections for
``--seconds``, without pause, so the spool fills to its cap (503s then are expected),
waits for the spool to drain, and prints the largest segment file seen and the server's
peak RSS. The writer reads a segment whole and holds its rows several times over while
inserting them, so the segment's size bounds the writer's memory: before segments were
sealed by bytes too (ERRORTRACK_WRITER_BATCH_BYTES) one grew to 615 MB and the server
peaked at 4.7 GB (bench/RESULTS.md, thirty-first session).

    TZ=UTC .venv/bin/python -m bench.big_events [--seconds 15] [--event-bytes 900000]

ERRORTRACK_WRITER_* settings in the environment are passed to the server.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import tempfile
import threading
import time
from pathlib import Path

from bench import wire
from bench.eventdata import envelope, event, kinds, with_new_event_id
from bench.ingest_logs import _peak_rss_mb, _wait_drained
from tests.ingest_support import create_project_in
from tests.support import Server, server_env


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--event-bytes", type=int, default=900_000)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-big-events-"))
    data = tmp / "data"
    writer_settings = {k: v for k, v in os.environ.items() if k.startswith("ERRORTRACK_WRITER")}
    env = server_env(
        data,
        f"sqlite:///{tmp / 'bench.sqlite3'}",
        ERRORTRACK_LOG_LEVEL="WARNING",
        **writer_settings,
    )
    ev = event(kinds(1)[0], random.Random(1), time.time())
    ev["extra"]["blob"] = os.urandom(args.event_bytes // 2).hex()  # incompressible
    body = envelope(ev)
    server = Server(env, threads=8).start()
    try:
        pid, key = create_project_in(env["ERRORTRACK_DATABASE_URL"])
        path = f"/api/{pid}/envelope/"
        headers = {"X-Sentry-Auth": f"Sentry sentry_key={key}, sentry_version=7"}
        until = time.monotonic() + args.seconds
        statuses: dict[int, int] = {}
        largest = [0]
        sending = True

        def send() -> None:
            conn = wire.Connection(server.port, timeout=120)
            while time.monotonic() < until:
                status = conn.send(wire.request(path, headers, with_new_event_id(body)))
                statuses[status] = statuses.get(status, 0) + 1
            conn.close()

        def watch() -> None:
            while sending:
                for segment in (data / "spool").rglob("*.seg"):
                    with contextlib.suppress(OSError):  # inserted and deleted meanwhile
                        largest[0] = max(largest[0], segment.stat().st_size)
                time.sleep(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        senders = [threading.Thread(target=send) for _ in range(args.connections)]
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join()
        _wait_drained(data)
        sending = False
        watcher.join()
        rss, file_mb, anon_mb = _peak_rss_mb(server)
        print(
            f"{writer_settings or 'default writer settings'}; envelopes of {len(body):,} "
            f"bytes for {args.seconds:g}s: statuses {dict(sorted(statuses.items()))}; "
            f"largest spool segment {largest[0] / 2**20:.1f} MiB; peak RSS (VmHWM) {rss:.0f} MB "
            f"(now {file_mb:.0f} MB file-backed, {anon_mb:.0f} MB anonymous)"
        )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
