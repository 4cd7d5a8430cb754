"""Requests/s of a trivial Falcon endpoint under gunicorn's worker classes, with wrk: the
ceiling each worker puts on small requests such as SDK ingest (errortrack/server.py).

    TZ=UTC .venv/bin/python -m bench.serving_workers [--seconds 6] [--connections 64]

One worker process each: ``gthread`` with 64 and 8 threads (a WSGI app) and ``asgi``
(gunicorn's own, with uvloop when installed; a Falcon ASGI app). Prints GET and POST of
an 8 KiB body. Needs wrk (apt-get install wrk).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support import free_port

APP = """
import falcon, falcon.asgi

class Sync:
    def on_get(self, req, resp):
        resp.media = {"ok": True}

    def on_post(self, req, resp):
        resp.media = {"n": len(req.bounded_stream.read())}

class Async:
    async def on_get(self, req, resp):
        resp.media = {"ok": True}

    async def on_post(self, req, resp):
        resp.media = {"n": len(await req.stream.read())}

wsgi = falcon.App()
wsgi.add_route("/h", Sync())
asgi = falcon.asgi.App()
asgi.add_route("/h", Async())
"""

POST = """
wrk.method = "POST"
wrk.body = string.rep("x", 8192)
wrk.headers["Content-Type"] = "application/octet-stream"
"""

WORKERS = {
    "gthread, 64 threads": ["-k", "gthread", "--threads", "64", "trivial:wsgi"],
    "gthread, 8 threads": ["-k", "gthread", "--threads", "8", "trivial:wsgi"],
    "asgi": ["-k", "asgi", "trivial:asgi"],
}


def _wrk(url: str, seconds: int, connections: int, script: Path | None) -> float:
    cmd = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", url]
    if script is not None:
        cmd[1:1] = ["-s", str(script)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert match, out
    return float(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=6)
    parser.add_argument("--connections", type=int, default=64)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    tmp = Path(tempfile.mkdtemp(prefix="bench-workers-"))
    (tmp / "trivial.py").write_text(APP)
    (tmp / "post.lua").write_text(POST)
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    print(f"load before: {os.getloadavg()}")
    for name, argv in WORKERS.items():
        port = free_port()
        proc = subprocess.Popen(
            [gunicorn, "-b", f"127.0.0.1:{port}", "--log-level", "warning", *argv],
            cwd=tmp,
        )
        try:
            time.sleep(2.5)
            url = f"http://127.0.0.1:{port}/h"
            get = _wrk(url, args.seconds, args.connections, None)
            post = _wrk(url, args.seconds, args.connections, tmp / "post.lua")
            print(f"{name:22s} GET {get:9,.0f} req/s   POST 8 KiB {post:9,.0f} req/s")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
