"""How fast is this machine today? Two fixed workloads, to compare benchmark runs made on
different days or machines of the same kind (their absolute figures move with the host).

    TZ=UTC .venv/bin/python -m bench.calibrate

- Python: a 10-million-step integer loop in one thread (CPython speed, GIL-bound work).
- chDB: ``sum(cityHash64(number))`` over 100 million numbers (the engine on both cores).
- loopback: request/response round trips per second over one TCP connection on
  127.0.0.1 between two threads (syscalls, wake-ups and thread switches: what an HTTP
  server's per-request cost is mostly made of).
- steal: the share of CPU time the hypervisor gave to other guests during the runs
  (``/proc/stat``), a sign of a busy host.
Prints the best of three for each.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time

import chdb


def _cpu_times() -> list[int]:
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def _python_loop() -> float:
    start = time.perf_counter()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.perf_counter() - start


def _loopback(rounds: int = 20_000) -> float:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def echo() -> None:
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(64):
                conn.sendall(data)

    thread = threading.Thread(target=echo, daemon=True)
    thread.start()
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.perf_counter()
        for _ in range(rounds):
            client.sendall(b"x")
            client.recv(64)
        elapsed = time.perf_counter() - start
    thread.join()
    server.close()
    return rounds / elapsed


def main() -> None:
    before = _cpu_times()
    py = min(_python_loop() for _ in range(3))
    loop = max(_loopback() for _ in range(3))
    with tempfile.TemporaryDirectory() as tmp:
        conn = chdb.connect(tmp)
        cur = conn.cursor()
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            cur.execute("SELECT sum(cityHash64(number)) FROM numbers(100000000)")
            cur.fetchall()
            runs.append(time.perf_counter() - start)
        conn.close()
    after = _cpu_times()
    delta = [b - a for a, b in zip(before, after, strict=True)]
    steal = delta[7] / max(1, sum(delta[:8]) - delta[3] - delta[4])
    print(
        f"python loop 10M: {py:.2f} s; loopback {loop:,.0f} round trips/s; "
        f"chDB hash-sum 100M: {min(runs):.2f} s; "
        f"steal {steal:.0%} of busy CPU; cores {os.cpu_count()}; load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
