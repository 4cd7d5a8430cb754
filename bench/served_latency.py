"""Latency of single management requests through a served `errortrack serve` (HTTP, one
keep-alive connection, one request at a time): what the thread hop of the WSGI
management app behind the ASGI server costs (errortrack/server.py).

    TZ=UTC .venv/bin/python -m bench.served_latency [--requests 1500]

Run it from another checkout (same venv) to compare trees: the server is started from
the current directory's ``errortrack`` package.
"""

from __future__ import annotations

import argparse
import http.client
import shutil
import tempfile
import time
from pathlib import Path

from tests.support import Server, server_env

PATHS = ("/healthz", "/readyz", "/api/me")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=1500)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-served-"))
    env = server_env(
        tmp / "data", f"sqlite:///{tmp / 'db.sqlite3'}", ERRORTRACK_LOG_LEVEL="WARNING"
    )
    server = Server(env).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port)
        for path in PATHS:
            took = []
            for _ in range(args.requests):
                start = time.perf_counter()
                conn.request("GET", path)
                resp = conn.getresponse()
                resp.read()
                took.append((time.perf_counter() - start) * 1000)
            took.sort()
            p50, p99 = took[len(took) // 2], took[int(len(took) * 0.99)]
            print(f"{path:10s} status {resp.status}  p50 {p50:.2f} ms  p99 {p99:.2f} ms")
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
