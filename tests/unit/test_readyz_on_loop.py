"""/readyz is answered on the served app's event loop, not in the management API's
threads: with those all held (requests waiting on a store that does not answer), a probe
queued behind them and answered long after any load balancer's timeout (the twentieth
session's review measured 7-12 s with two threads). Real stores; the one API thread is
held by a job that waits, as a request stuck on a frozen store would."""

from __future__ import annotations

import asyncio
import threading

import httpx

from errortrack.server import create_server_app


def test_readyz_answers_while_every_api_thread_is_held(state):
    app = create_server_app(state=state, api_threads=1)
    release = threading.Event()
    held = app.api.executor.submit(release.wait, 30)

    async def probe() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            get = await asyncio.wait_for(client.get("/readyz"), 5)
            head = await asyncio.wait_for(client.head("/readyz/"), 5)
            post = await asyncio.wait_for(client.post("/readyz"), 5)
            return get, head, post

    try:
        get, head, post = asyncio.run(probe())
        # Still held: the answers did not wait for the API's thread.
        assert not held.done()
    finally:
        release.set()
    assert get.status_code == 200
    body = get.json()
    assert body.pop("spool")["insert_failures"] == 0
    assert isinstance(body.pop("dropped_items"), dict)  # this process's counts so far
    assert body.pop("bodies")["refused"] == 0
    assert body == {
        "status": "ok",
        "relational": "ok",
        "clickhouse": "ok",
        "quarantined_rows": 0,
    }
    assert head.status_code == 200 and head.content == b""
    assert post.status_code == 405 and post.json()["error"]["code"] == "method_not_allowed"
