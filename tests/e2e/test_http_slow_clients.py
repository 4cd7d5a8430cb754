"""Clients that go away, stall or trickle (HTTP review, twenty-third session): a body that
did not arrive whole is never stored, a refused key is answered before the body is
asked for, slow management bodies hold no API thread, and a busy embedded engine is a
503, not a 500."""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import subprocess
import sys
import time

import falcon.testing
import httpx
import orjson

from errortrack import server
from errortrack.analytics import ClickHouse
from errortrack.server import create_server_app
from errortrack.state import AppState
from tests.access_world import build_world
from tests.ingest_support import create_project_in, query_data_dir
from tests.support import Server, scratch_database, served_with_token, server_env


def _envelope(*bodies: str) -> bytes:
    items = b"".join(
        b'{"type":"log"}\n' + orjson.dumps({"items": [{"body": body, "level": "info"}]}) + b"\n"
        for body in bodies
    )
    return b"{}\n" + items


def _request(port: int, head: str, body: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(head.encode() + body)
    return sock


def _answer(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
            if b"\r\n\r\n" in data and not data.startswith(b"HTTP/1.1 100"):
                break
    except TimeoutError:
        pass
    return data


def _scope(path: str, headers: list[tuple[bytes, bytes]], query: str = "") -> dict:
    """An HTTP request's ASGI scope, as gunicorn gives one, for calling the app itself."""
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": headers,
        "http_version": "1.1",
        "scheme": "http",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 5000),
        "root_path": "",
    }


def test_a_body_cut_short_stores_nothing_and_a_refused_key_gets_no_100(tmp_path):
    data = tmp_path / "data"
    with scratch_database(tmp_path) as url:
        server_ = Server(server_env(data, url)).start()
        try:
            pid, key = create_project_in(url)
            port = server_.port
            auth = f"X-Sentry-Auth: Sentry sentry_key={key}\r\n"
            whole = _envelope("kept")
            cut = _envelope("first half", "second half")
            # What arrives is a whole envelope of its own (the first item): before, it was
            # stored as if it were all the client sent.
            arrived = len(_envelope("first half"))
            # The client sends part of what its Content-Length says, then goes away.
            for shut in (socket.SHUT_RDWR, None):
                sock = _request(
                    port,
                    f"POST /api/{pid}/envelope/ HTTP/1.1\r\nHost: x\r\n{auth}"
                    f"Content-Length: {len(cut)}\r\n\r\n",
                    cut[:arrived],
                )
                if shut is not None:
                    sock.shutdown(shut)
                sock.close()
            # A chunked body that ends without its last chunk.
            sock = _request(
                port,
                f"POST /api/{pid}/envelope/ HTTP/1.1\r\nHost: x\r\n{auth}"
                "Transfer-Encoding: chunked\r\n\r\n",
                b"%x\r\n%s\r\n" % (arrived, cut[:arrived]),
            )
            time.sleep(0.3)
            sock.close()
            # Expect: 100-continue with a refused key: the 403 comes without a 100 first
            # (the client would otherwise upload its whole body for nothing).
            sock = _request(
                port,
                f"POST /api/{pid}/envelope/ HTTP/1.1\r\nHost: x\r\n"
                "X-Sentry-Auth: Sentry sentry_key=0123456789abcdef0123456789abcdef\r\n"
                "Expect: 100-continue\r\nContent-Length: 2000000\r\n\r\n",
            )
            answer = _answer(sock)
            sock.close()
            assert answer.startswith(b"HTTP/1.1 403"), answer[:200]
            # With a good key the 100 comes once the body is asked for, and the 200 after.
            sock = _request(
                port,
                f"POST /api/{pid}/envelope/ HTTP/1.1\r\nHost: x\r\n{auth}"
                f"Expect: 100-continue\r\nContent-Length: {len(whole)}\r\n\r\n",
            )
            assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue"), "no 100 Continue"
            sock.sendall(whole)
            answer = _answer(sock)
            sock.close()
            assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        finally:
            server_.stop()
        assert "Traceback" not in server_.log(), server_.log()
    rows = query_data_dir(data, f"SELECT body FROM logs WHERE project_id = {pid}")
    assert [r["body"] for r in rows] == ["kept"]


def test_slow_management_bodies_hold_no_api_thread(tmp_path):
    """Ten clients trickle a login body (more than the API's two threads here): other API
    requests are answered meanwhile."""
    with served_with_token(tmp_path) as (served, token):
        port = served.port
        slow = [
            _request(
                port,
                "POST /auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Content-Length: 100\r\n\r\n",
                b'{"email": ',
            )
            for _ in range(10)
        ]
        try:
            time.sleep(0.5)
            started = time.monotonic()
            me = httpx.get(
                f"{served.url}/api/me", headers={"Authorization": f"Bearer {token}"}, timeout=20
            )
            assert me.status_code == 200, me.text
            assert time.monotonic() - started < 5
        finally:
            for sock in slow:
                sock.close()
        # A declared length over the API's cap is refused by its header, without the
        # 100 Continue that would make the client upload it.
        sock = _request(
            port,
            "POST /auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Expect: 100-continue\r\nContent-Length: 3000000\r\n\r\n",
        )
        answer = _answer(sock)
        sock.close()
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        # Clients gone mid-body are answered into the void, without an error logged.
        time.sleep(0.5)
        assert "Traceback" not in served.log(), served.log()


def test_a_management_body_that_never_ends_is_408(state, monkeypatch):
    monkeypatch.setattr(server, "API_BODY_SECONDS", 0.2)
    app = create_server_app(state=state)
    sent: list[dict] = []

    events = [{"type": "http.request", "body": b'{"em', "more_body": True}]

    async def receive() -> dict:
        if events:
            return events.pop(0)
        await asyncio.sleep(3600)  # the rest never comes
        raise AssertionError("unreachable")

    async def send(message: dict) -> None:
        sent.append(message)

    headers = [(b"content-length", b"100"), (b"content-type", b"application/json")]
    scope = _scope("/auth/login", headers)
    asyncio.run(asyncio.wait_for(app(scope, receive, send), 10))
    assert sent[0]["status"] == 408
    assert orjson.loads(sent[1]["body"])["error"]["code"] == "request_timeout"


def test_the_408_of_a_management_body_cut_short_has_every_management_answer_s_headers(state):
    """Answered by the server before the app, it had none of the headers API.md says
    every management answer carries."""
    app = create_server_app(state=state)
    sent: list[dict] = []
    events = [{"type": "http.request", "body": b'{"em', "more_body": True}]

    async def receive() -> dict:
        return events.pop(0) if events else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    headers = [(b"content-length", b"100"), (b"content-type", b"application/json")]
    asyncio.run(app(_scope("/auth/login", headers), receive, send))
    assert sent[0]["status"] == 408
    answered = dict(sent[0]["headers"])
    assert answered[b"cache-control"] == b"no-store"
    assert answered[b"x-content-type-options"] == b"nosniff"
    assert answered[b"x-frame-options"] == b"DENY"
    assert answered[b"referrer-policy"] == b"no-referrer"


def test_an_embedded_engine_held_by_another_process_is_503(state, tmp_path):
    """During a reload the old worker holds chDB's directory while it drains: the new
    worker's API reads were 500s with a traceback; /readyz said 503."""
    held = tmp_path / "held"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, clickhouse_connect;"
            f"clickhouse_connect.get_client(dsn='chdb://{held}').command('SELECT 1');"
            "print('ready', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        busy = AppState.build(
            state.settings,
            engine=state.engine,
            clickhouse=ClickHouse(f"chdb://{held}"),
            clock=state.clock,
        )
        client = falcon.testing.TestClient(create_server_app(state=busy))
        world = build_world(busy, client)
        got = world.call("primary", "GET", f"/api/projects/{world.project_id}/logs")
        assert got.status_code == 503, got.text
        assert got.json["error"]["code"] == "unavailable"
        assert got.headers["retry-after"] == "5"
    finally:
        holder.communicate("", timeout=30)


def test_ingest_answers_while_management_bodies_trickle(tmp_path):
    """The pre-read runs on the loop: ingest and the probes go on meanwhile."""
    with served_with_token(tmp_path) as (served, _token):
        port = served.port
        slow = [
            _request(
                port,
                "POST /auth/login HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
                b"{",
            )
            for _ in range(20)
        ]
        try:
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                probes = list(
                    pool.map(lambda _: httpx.get(f"{served.url}/readyz", timeout=10), range(8))
                )
            assert all(p.status_code == 200 for p in probes)
        finally:
            for sock in slow:
                sock.close()


def test_a_whole_body_sent_before_the_client_closes_is_stored(tmp_path):
    """A client that sends its whole envelope and closes at once (not waiting for the
    answer) has it stored, also when its key is not cached yet (loaded in a thread, so
    the loop sees the close before the body is read)."""
    data = tmp_path / "data"
    with scratch_database(tmp_path) as url:
        server_ = Server(server_env(data, url)).start()
        try:
            port = server_.port
            sent = []
            for i in range(10):
                pid, key = create_project_in(url, f"p{i}")
                body = _envelope(f"sent and gone {i}")
                sock = _request(
                    port,
                    f"POST /api/{pid}/envelope/ HTTP/1.1\r\nHost: x\r\n"
                    f"X-Sentry-Auth: Sentry sentry_key={key}\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n",
                    body,
                )
                sock.close()
                sent.append(f"sent and gone {i}")
            time.sleep(2)
        finally:
            server_.stop()
    rows = query_data_dir(data, "SELECT body FROM logs ORDER BY body")
    assert [r["body"] for r in rows] == sorted(sent)


def test_a_body_cut_short_is_408_whatever_its_encoding(state, project, clickhouse):
    """gunicorn says "disconnect" for a client gone and for one silent past its timeout
    (who still reads the answer): a gzip body cut short was a 400 "not valid gzip"."""
    import gzip

    pid, key = project
    app = create_server_app(state=state)
    whole = _envelope("first half", "second half")
    arrived = len(_envelope("first half"))
    for encoding, body, part in (
        ("identity", whole, whole[:arrived]),
        ("gzip", gzip.compress(whole), gzip.compress(whole)[:30]),
    ):
        sent: list[dict] = []
        events = [{"type": "http.request", "body": part, "more_body": True}]

        async def receive(events: list[dict] = events) -> dict:
            return events.pop(0) if events else {"type": "http.disconnect"}

        async def send(message: dict, sent: list[dict] = sent) -> None:
            sent.append(message)

        headers = [
            (b"content-length", str(len(body)).encode()),
            (b"content-encoding", encoding.encode()),
        ]
        asyncio.run(
            app(_scope(f"/api/{pid}/envelope/", headers, f"sentry_key={key}"), receive, send)
        )
        assert sent[0]["status"] == 408, (encoding, sent)
        assert orjson.loads(sent[1]["body"])["error"]["code"] == "request_timeout"
    state.ingest.writer.drain()
    assert clickhouse.query_rows(
        "SELECT count() FROM logs WHERE project_id = {p:UInt64}", {"p": pid}
    ) == [(0,)]
    state.ingest.writer.spool.close()


def test_bodies_held_at_once_are_bounded_and_given_back(tmp_path):
    """Stalled uploads hold their bodies: past ERRORTRACK_MAX_HELD_BODY_BYTES another
    request, keyed or not, is a 503 with Retry-After and nothing of it is stored; once
    the stalled clients go, everything they held is given back and ingest goes on."""
    data = tmp_path / "data"
    mib = 2**20
    with scratch_database(tmp_path) as url:
        env = server_env(data, url, ERRORTRACK_MAX_HELD_BODY_BYTES=str(3 * mib))
        server_ = Server(env).start()
        stalled: list[socket.socket] = []
        try:
            pid, key = create_project_in(url)
            auth = f"X-Sentry-Auth: Sentry sentry_key={key}\r\n"
            keyed = {"X-Sentry-Auth": f"Sentry sentry_key={key}"}

            def stall(headers: str, size: int) -> socket.socket:
                # Declares 4 MiB, sends ``size`` of it, then nothing: the body is held.
                head = (
                    f"POST /api/{pid}/envelope/ HTTP/1.1\r\nHost: x\r\n{headers}"
                    f"Content-Length: {4 * mib}\r\n\r\n"
                )
                return _request(server_.port, head, b"x" * size)

            def held(expected: int) -> int:
                deadline = time.monotonic() + 10
                while True:
                    now = httpx.get(f"{server_.url}/readyz").json()["bodies"]["held_bytes"]
                    if now == expected or time.monotonic() > deadline:
                        return now
                    time.sleep(0.05)

            stalled.append(stall("", 2 * mib))  # no key in a header: read before any key
            assert held(2 * mib) == 2 * mib
            stalled.append(stall(auth, mib))
            assert held(3 * mib) == 3 * mib  # the whole budget, not more
            small = httpx.post(
                f"{server_.url}/api/{pid}/envelope/", content=_envelope("refused"), headers=keyed
            )
            assert small.status_code == 503, small.text
            assert small.headers["Retry-After"] == "2"
            assert "holds too many request bodies" in small.json()["error"]["message"]
            # Refused while it uploads, too.
            stalled.append(stall(auth, mib))
            refused = _answer(stalled[-1])
            assert refused.startswith(b"HTTP/1.1 503"), refused[:200]
            assert b"retry-after: 2" in refused.lower()
            for sock in stalled:
                sock.close()
            assert held(0) == 0
            ready = httpx.get(f"{server_.url}/readyz").json()["bodies"]
            assert ready == {"held_bytes": 0, "max_bytes": 3 * mib, "refused": 2}
            ok = httpx.post(
                f"{server_.url}/api/{pid}/envelope/", content=_envelope("stored"), headers=keyed
            )
            assert ok.status_code == 200, ok.text
        finally:
            for sock in stalled:
                sock.close()
            server_.stop()
        bodies = query_data_dir(data, f"SELECT body FROM logs WHERE project_id = {pid}")
        assert bodies == [{"body": "stored"}]
