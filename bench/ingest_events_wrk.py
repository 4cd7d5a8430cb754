"""Cross-check of bench/ingest_events.py with a C load generator (wrk) instead of Python.

Question it answers: is the Python client of ingest_events.py what limits events/s? It
sends the same realistic ~8 KB error envelopes (200 fingerprints) with `wrk` (Debian
package `wrk`; `apt-get install wrk`), waits for the spool to drain, and counts the rows
in ClickHouse. Run: ``TZ=UTC .venv/bin/python -m bench.ingest_events_wrk --threads 8``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.ingest_events import _bodies, _check_clickhouse, _wait_drained
from tests.ingest_support import create_project_in
from tests.support import Server, server_env

# wrk cycles through the envelopes, one per request, each connection from its own offset.
LUA = """
local bodies = {}
for i = 0, %(last)d do
  local f = io.open("%(dir)s/" .. i .. ".env", "rb"); bodies[#bodies + 1] = f:read("*a"); f:close()
end
local n = math.random(#bodies)
local headers = {["X-Sentry-Auth"] = "Sentry sentry_key=%(key)s, sentry_version=7",
                 ["Content-Type"] = "application/x-sentry-envelope"}
-- Every request a new event: the server drops an event id it has stored already.
local function hex32()
  return string.format("%%04x%%04x%%04x%%04x%%04x%%04x%%04x%%04x", math.random(0, 65535),
    math.random(0, 65535), math.random(0, 65535), math.random(0, 65535), math.random(0, 65535),
    math.random(0, 65535), math.random(0, 65535), math.random(0, 65535))
end
request = function()
  n = n %% #bodies + 1
  local body = bodies[n]:gsub(bodies[n]:sub(14, 45), hex32())
  return wrk.format("POST", "/api/%(pid)d/envelope/", headers, body)
end
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--threads", type=int, default=8, help="server threads")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    tmp = Path(tempfile.mkdtemp(prefix="bench-events-wrk-"))
    data, url = tmp / "data", f"sqlite:///{tmp / 'bench.sqlite3'}"
    bodies, _ = _bodies(200, 10)
    (tmp / "bodies").mkdir()
    for i, body in enumerate(bodies):
        (tmp / "bodies" / f"{i}.env").write_bytes(body)
    print(f"load before: {os.getloadavg()}; {len(bodies)} envelopes, server threads {args.threads}")
    server = Server(server_env(data, url, ERRORTRACK_LOG_LEVEL="WARNING"), threads=args.threads)
    server.start()
    try:
        pid, key = create_project_in(url)
        script = tmp / "envelopes.lua"
        script.write_text(
            LUA % {"last": len(bodies) - 1, "dir": tmp / "bodies", "key": key, "pid": pid}
        )
        start = time.perf_counter()
        wrk = subprocess.run(
            [
                "wrk",
                "-t1",
                f"-c{args.connections}",
                f"-d{args.seconds}s",
                "--latency",
                "-s",
                str(script),
                server.url,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        _wait_drained(data)
        total = time.perf_counter() - start
    finally:
        server.stop()
    rows, issues = _check_clickhouse(data, pid)
    print(wrk.stdout)
    print(
        f"{rows} events in ClickHouse, {issues} issues -> {rows / total:,.0f} events/s end to end"
    )
    print(f"load after: {os.getloadavg()}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
