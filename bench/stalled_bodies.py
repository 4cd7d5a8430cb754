"""Memory held by stalled uploads: ``--connections`` clients each declare a 20 MiB
envelope, send ``--mib`` of it and stop, with no key in a header (the envelope header's
key is read after the body, so anyone can do this). Prints the server's RSS before and
with them held, and how many were refused (503) by ERRORTRACK_MAX_HELD_BODY_BYTES;
before that budget (thirty-first session) 40 such clients held +860 MB.

    TZ=UTC .venv/bin/python -m bench.stalled_bodies [--connections 40] [--mib 19]

ERRORTRACK_MAX_HELD_BODY_BYTES in the environment is passed to the server.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import tempfile
import time
from pathlib import Path

from bench.ingest_logs import _peak_rss_mb
from tests.ingest_support import create_project_in
from tests.support import Server, server_env


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=40)
    parser.add_argument("--mib", type=int, default=19)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-stalled-"))
    budget = {k: v for k, v in os.environ.items() if k == "ERRORTRACK_MAX_HELD_BODY_BYTES"}
    env = server_env(
        tmp / "data", f"sqlite:///{tmp / 'bench.sqlite3'}", ERRORTRACK_LOG_LEVEL="WARNING", **budget
    )
    server = Server(env, threads=8).start()
    socks: list[socket.socket] = []
    try:
        pid, _ = create_project_in(env["ERRORTRACK_DATABASE_URL"])
        before = _peak_rss_mb(server)
        mib = os.urandom(2**20)
        head = (
            f"POST /api/{pid}/envelope/ HTTP/1.1\r\nHost: x\r\nContent-Length: {20 * 2**20}\r\n\r\n"
        ).encode()
        for _ in range(args.connections):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            sock.sendall(head)
            with contextlib.suppress(OSError):  # answered and closed while it sent
                for _ in range(args.mib):
                    sock.sendall(mib)
            socks.append(sock)
        time.sleep(2)  # let the server read what was sent
        refused = 0
        for sock in socks:
            sock.setblocking(False)
            with contextlib.suppress(OSError):  # no answer: still held
                refused += sock.recv(12).startswith(b"HTTP/1.1 503")
        during = _peak_rss_mb(server)
        print(
            f"{budget or 'default budget'}; {args.connections} clients x {args.mib} MiB "
            f"stalled: RSS {before[0]:.0f} MB before (anonymous {before[2]:.0f}), peak "
            f"{during[0]:.0f} MB with them (anonymous now {during[2]:.0f}); "
            f"{refused} answered 503"
        )
    finally:
        for sock in socks:
            sock.close()
        server.stop()


if __name__ == "__main__":
    main()
