"""The probes when the relational store stops answering (a network partition that drops
packets, a frozen host): /readyz answers 503 within its deadline and /healthz stays 200,
however many probes come. PostgreSQL reached through a TCP proxy on loopback that stops
forwarding. Real server, real stores."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time

import httpx
import pytest
import sqlalchemy as sa

from errortrack.api.health import READY_DEADLINE
from tests.support import TEST_PG, Server, free_port, scratch_database, server_env

pytestmark = pytest.mark.e2e


class FreezingProxy:
    """Forwards 127.0.0.1:<port> to a TCP server; while ``frozen`` is set it reads but
    forwards nothing (and connects to nothing), as a partition looks to the client: the
    connection stays up, and nothing comes back."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.frozen = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FreezingProxy:
        self._thread.start()
        assert self._ready.wait(5)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port)
        )
        self._ready.set()
        self._loop.run_forever()
        server.close()

    async def _thawed(self) -> None:
        while self.frozen.is_set():
            await asyncio.sleep(0.05)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            while data := await reader.read(65536):
                await self._thawed()
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._thawed()
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))


@pytest.mark.skipif(not TEST_PG, reason="needs PostgreSQL (ERRORTRACK_TEST_DATABASE_URL)")
def test_a_frozen_relational_store_fails_readyz_in_time_and_never_healthz(tmp_path):
    with scratch_database(tmp_path) as url:
        target = sa.make_url(url)
        with FreezingProxy(target.port or 5432) as proxy:
            proxied = target.set(host="127.0.0.1", port=proxy.port)
            env = server_env(tmp_path / "data", proxied.render_as_string(hide_password=False))
            # Two API threads: before, two probes held them both, and /healthz waited too.
            server = Server(env, threads=2).start()
            try:
                proxy.frozen.set()

                def probe(path: str) -> tuple[int, float]:
                    started = time.monotonic()
                    resp = httpx.get(f"{server.url}{path}", timeout=READY_DEADLINE + 8)
                    return resp.status_code, time.monotonic() - started

                def login() -> int:
                    body = {"email": "someone@example.com", "password": "not this one"}
                    url = f"{server.url}/auth/login"
                    return httpx.post(url, json=body, timeout=60).status_code

                # Both API threads held by requests waiting on the frozen store (until it
                # thaws, or a new connection's 5 s timeout): the probes are answered on
                # the event loop, not queued behind them (7-12 s before the twentieth
                # session).
                holders = concurrent.futures.ThreadPoolExecutor(2)
                logins = [holders.submit(login) for _ in range(2)]
                time.sleep(0.5)
                with concurrent.futures.ThreadPoolExecutor(8) as pool:
                    readyz = [pool.submit(probe, "/readyz") for _ in range(6)]
                    time.sleep(0.5)
                    healthz = [pool.submit(probe, "/healthz") for _ in range(2)]
                    answers = [f.result() for f in readyz]
                    assert [f.result()[0] for f in healthz] == [200, 200]
                    assert all(took < 1 for _, took in (f.result() for f in healthz))
                assert [status for status, _ in answers] == [503] * 6
                assert max(took for _, took in answers) < READY_DEADLINE + 1.5
                # A probe after them waits for the same check, not for a new one.
                assert probe("/readyz")[0] == 503

                proxy.frozen.clear()
                # 401 once the store thaws; 503 if one had to connect anew meanwhile.
                assert {f.result() for f in logins} <= {401, 503}
                holders.shutdown()
                deadline = time.monotonic() + 15
                while probe("/readyz")[0] != 200:
                    assert time.monotonic() < deadline, "readyz did not recover"
                    time.sleep(0.2)
            finally:
                proxy.frozen.clear()
                server.stop()
        assert "readyz: relational store not ready: did not answer within" in server.log()


@pytest.mark.skipif(not TEST_PG, reason="needs PostgreSQL (ERRORTRACK_TEST_DATABASE_URL)")
def test_connection_settings_in_the_url_win_over_the_defaults():
    # The defaults went in as connect_args, which libpq applies over the URL's query: an
    # operator's ?connect_timeout=60&keepalives=0 was silently 5 and 1.
    from errortrack import db

    sep = "&" if "?" in TEST_PG else "?"
    engine = db.make_engine(f"{TEST_PG}{sep}connect_timeout=60&keepalives=0")
    try:
        with engine.connect() as conn:
            given = conn.connection.dbapi_connection.info.get_parameters()
    finally:
        engine.dispose()
    assert (given["connect_timeout"], given["keepalives"]) == ("60", "0")
    assert given["keepalives_idle"] == "10"  # a default the URL left alone


def test_a_check_that_raises_a_base_exception_does_not_stick_readyz():
    # The check's thread caught Exception only: a BaseException killed it with the check
    # unresolved, and every later probe waited on it (503) until a restart.
    from errortrack.api.health import _SingleFlight

    class Stop(BaseException):
        pass

    calls = []

    def ping():
        calls.append(1)
        if len(calls) == 1:
            raise Stop

    check = _SingleFlight("relational", ping)
    first, _ = check.current()
    with pytest.raises(Stop):
        first.result(timeout=5)
    second, _ = check.current()
    assert second.result(timeout=5) is None
