"""End-to-end log ingest benchmark on the embedded default (SQLite + chDB).

1. Starts ``errortrack serve`` on a fresh data dir; creates a project.
2. Full load: ``--connections`` keep-alive connections send envelopes of 100 realistic
   logs (bench/logdata.py) for ``--seconds``; waits until the spool is drained.
   logs/s = acknowledged logs / (first send -> spool drained).
3. Half load: the same connections paced to half that rate; p50/p99 request latency.
4. Stops the server, counts the rows in ClickHouse (must equal the acknowledged logs).
5. In the same run, before the server starts and again after it stops, measures the raw
   chDB insert rate of the same rows in the same format, batch size and settings as the
   writer (JSONEachRow, one raw insert per batch), sustained for ``--raw-seconds`` into a
   fresh directory (in a child process); end to end / raw uses the mean of the two.

    TZ=UTC .venv/bin/python -m bench.ingest_logs [--seconds 20] [--connections 8]

While the full load is sent it also prints the CPU the worker's threads used (event loop,
writer and syncer, the engine's merges, the engine's other threads) and the client's own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from bench import wire
from bench.raw_insert import in_child, log_envelopes
from errortrack.config import Settings
from tests.ingest_support import create_project_in
from tests.support import Server, server_env

LOGS_PER_ENVELOPE = 100


def _send(
    port: int,
    requests: list[bytes],
    until: float,
    interval: float,
    latencies: list[float],
    acked: list[int],
) -> None:
    conn = wire.Connection(port)
    n = ok = 0
    next_at = time.perf_counter()
    while (now := time.perf_counter()) < until:
        if interval and now < next_at:
            time.sleep(next_at - now)
        next_at += interval
        t0 = time.perf_counter()
        status = conn.send(requests[n % len(requests)])
        latencies.append(time.perf_counter() - t0)
        if status == 200:
            ok += 1
        n += 1
    conn.close()
    acked.append(ok * LOGS_PER_ENVELOPE)


def _load(
    server: Server,
    pid: int,
    key: str,
    bodies: list[bytes],
    seconds: float,
    connections: int,
    rate: float = 0.0,
) -> tuple[int, list[float]]:
    headers = {
        "X-Sentry-Auth": f"Sentry sentry_key={key}, sentry_version=7",
        "Content-Type": "application/x-sentry-envelope",
    }
    interval = connections / rate if rate else 0.0  # seconds between requests per connection
    latencies: list[float] = []
    acked: list[int] = []
    requests = [wire.request(f"/api/{pid}/envelope/", headers, body) for body in bodies]
    until = time.perf_counter() + seconds
    threads = [
        threading.Thread(
            target=_send,
            args=(server.port, requests[i::connections], until, interval, latencies, acked),
        )
        for i in range(connections)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(acked), latencies


def _drained(data: Path) -> bool:
    return not list((data / "spool").glob("*/*.seg"))


def _wait_drained(data: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not _drained(data):
        if time.monotonic() > deadline:
            raise SystemExit("spool did not drain")
        time.sleep(0.05)


def _peak_rss_mb(server: Server) -> tuple[float, float, float]:
    """Highest VmHWM among the server's processes (arbiter and worker), and that
    process's current RssFile and RssAnon: file-backed pages are mostly the mapped chDB
    library (shared and clean), anonymous ones the engine's and Python's own memory."""
    assert server.proc is not None
    peak = (0, 0, 0)
    for pid in [server.proc.pid, *_children(server.proc.pid)]:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        fields = {
            line.split(":")[0]: int(line.split()[1])
            for line in status.splitlines()
            if line.startswith(("VmHWM:", "RssFile:", "RssAnon:"))
        }
        peak = max(peak, (fields["VmHWM"], fields["RssFile"], fields["RssAnon"]))
    return peak[0] / 1024, peak[1] / 1024, peak[2] / 1024


def _thread_ticks(pid: int) -> dict[int, tuple[str, int]]:
    """Per thread of ``pid``: its name and CPU time so far (clock ticks)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(task.name)] = (name, int(fields[11]) + int(fields[12]))
    return out


def _cpu_split(pid: int, before: dict[int, tuple[str, int]], seconds: float) -> dict[str, float]:
    """Cores used by the worker's threads since ``before``: the event loop (its main
    thread), the other Python threads (spool writer and syncer; an insert partly runs
    in the writer's thread), the engine's merges and the engine's other threads."""
    hz = os.sysconf("SC_CLK_TCK")
    split = {"event loop": 0.0, "writer+syncer": 0.0, "engine merges": 0.0, "engine other": 0.0}
    for tid, (name, ticks) in _thread_ticks(pid).items():
        used = (ticks - before.get(tid, (name, 0))[1]) / hz / seconds
        if tid == pid:
            split["event loop"] += used
        elif name == "python":
            split["writer+syncer"] += used
        elif name == "MergeMutate":
            split["engine merges"] += used
        else:
            split["engine other"] += used
    return split


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out += [int(c) for c in text]
    return out + [g for c in out for g in _children(c)]


def _raw_rate(
    directory: Path, bodies: list[bytes], batch_rows: int, seconds: float
) -> tuple[float, int]:
    """The same rows, serialised as the spool stores them, in writer-sized raw inserts,
    for ``seconds`` without a pause, into a fresh chDB directory.

    Sustained like the end-to-end run, so that the engine's own merges count in both;
    a fresh directory, so that the merges left over from the end-to-end run (about a
    million rows in many parts) do not slow the reference down. A short burst right
    after reopening the server's directory gave anything from 49 k to 91 k rows/s."""
    from bench.raw_insert import batches, spooled_lines, sustained
    from errortrack.analytics import ClickHouse
    from errortrack.analytics import migrate as ch_migrate

    store = ClickHouse(f"chdb://{directory.resolve()}")
    ch_migrate.apply(store)
    blocks = batches(spooled_lines(bodies), batch_rows)
    rows, elapsed, _ = sustained(store.client(), blocks, seconds)
    return rows / elapsed, rows


def _count(data: Path, pid: int) -> int:
    from errortrack.analytics import ClickHouse

    store = ClickHouse(f"chdb://{(data / 'clickhouse').resolve()}")
    return int(store.command(f"SELECT count() FROM logs WHERE project_id = {pid}"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--half-seconds", type=float, default=10)
    parser.add_argument(
        "--raw-seconds", type=float, default=10, help="sustained raw reference insert"
    )
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--threads", type=int, default=8, help="server threads")
    parser.add_argument(
        "--batch-rows", type=int, default=Settings().writer_batch_rows, help="server default"
    )
    parser.add_argument(
        "--spread-days",
        type=float,
        default=0,
        help="log timestamps spread over this many past days (0: all now)",
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    data = tmp / "data"
    env = server_env(
        data,
        f"sqlite:///{tmp / 'bench.sqlite3'}",
        ERRORTRACK_WRITER_BATCH_ROWS=str(args.batch_rows),
        ERRORTRACK_LOG_LEVEL="WARNING",
    )
    bodies = log_envelopes(400, LOGS_PER_ENVELOPE, args.spread_days)
    print(
        f"load before: {os.getloadavg()}; {len(bodies)} distinct envelopes of "
        f"{LOGS_PER_ENVELOPE} logs, {sum(map(len, bodies)) / len(bodies) / 1024:.1f} KiB each"
    )
    # The raw reference runs before the server and again after it: one run alone moved
    # between 46 k and 69 k rows/s within minutes on the same code (bench/RESULTS.md,
    # seventh session); the ratio uses their mean.
    raw_before, _ = _raw_in_child(tmp / "raw-before", bodies, args)
    server = Server(env, threads=args.threads).start()
    try:
        pid, key = create_project_in(env["ERRORTRACK_DATABASE_URL"])
        assert server.proc is not None
        worker = _children(server.proc.pid)[0]  # the one gunicorn worker
        threads_before, client_before = _thread_ticks(worker), os.times()
        start = time.perf_counter()
        full, full_lat = _load(server, pid, key, bodies, args.seconds, args.connections)
        sent_s = time.perf_counter() - start
        split = _cpu_split(worker, threads_before, sent_s)
        client = os.times()
        client_cores = (
            client.user + client.system - client_before.user - client_before.system
        ) / sent_s
        _wait_drained(data)
        total_s = time.perf_counter() - start
        rate = full / total_s
        print(
            f"full load: {full} logs acknowledged in {sent_s:.1f}s, drained after {total_s:.1f}s "
            f"-> {rate:,.0f} logs/s end to end (acked at {full / sent_s:,.0f} logs/s); "
            f"p50 {statistics.median(full_lat) * 1000:.1f} ms"
        )
        print(
            "CPU while sending (cores of 2): "
            + ", ".join(f"{name} {cores:.2f}" for name, cores in split.items())
            + f"; this client {client_cores:.2f}"
        )
        half, half_lat = _load(
            server,
            pid,
            key,
            bodies,
            args.half_seconds,
            args.connections,
            rate=rate / 2 / LOGS_PER_ENVELOPE,
        )
        _wait_drained(data)
        q = statistics.quantiles(half_lat, n=100)
        print(
            f"half load ({rate / 2:,.0f} logs/s target, {half / args.half_seconds:,.0f} achieved): "
            f"p50 {q[49] * 1000:.1f} ms, p99 {q[98] * 1000:.1f} ms"
        )
        rss, file_mb, anon_mb = _peak_rss_mb(server)
        print(
            f"peak RSS (VmHWM, largest server process): {rss:.0f} MB "
            f"(now: {file_mb:.0f} MB file-backed, {anon_mb:.0f} MB anonymous)"
        )
    finally:
        server.stop()
    stored = _count(data, pid)
    print(
        f"rows in ClickHouse: {stored} (acknowledged {full + half}) "
        f"{'OK' if stored == full + half else 'MISMATCH'}"
    )
    raw_after, n = _raw_in_child(tmp / "raw-after", bodies, args)
    raw = (raw_before + raw_after) / 2
    print(
        f"raw chDB insert (JSONEachRow, {args.batch_rows}-row batches for "
        f"{args.raw_seconds:.0f}s, ~{n} rows, fresh directory): before the server "
        f"{raw_before:,.0f}, after it {raw_after:,.0f}, mean {raw:,.0f} rows/s; "
        f"end-to-end / raw = {rate / raw:.0%}"
    )
    print(f"load after: {os.getloadavg()}")


def _raw_in_child(
    directory: Path, bodies: list[bytes], args: argparse.Namespace
) -> tuple[float, int]:
    # In a child process: chDB opens one directory per process, and this one holds the
    # server's (for the count).
    return in_child(_raw_rate, directory, bodies, args.batch_rows, args.raw_seconds)


if __name__ == "__main__":
    main()
