"""Password checks beyond those running and waiting for a hashing slot are refused at
once, 503 ``password_busy``: junk logins with a new email each time, from one address and
without credentials, waited for a slot in every one of the API's 8 threads, and a token's
GET /api/me took a median 2-4 s behind 16 of them, 18-23 s behind 64 (security review).

The app as served (its 8 API threads) on the test's real stores; only argon2 is a stub,
whose checks wait until the test lets them go, so that the slots stay taken for as long
as the test looks."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
from argon2 import PasswordHasher
from argon2.exceptions import VerifyMismatchError

from errortrack.auth import login as login_module
from errortrack.auth import passwords
from errortrack.server import create_server_app
from tests.access_world import PASSWORD, build_world


class HeldHasher:
    """argon2 whose checks and hashes wait for ``go`` (real, cheap hashes underneath)."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.started = 0
        self._lock = threading.Lock()
        self._real = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)

    def _hold(self) -> None:
        with self._lock:
            self.started += 1
        assert self.go.wait(30), "never let go"

    def verify(self, password_hash: str, password: str) -> bool:
        self._hold()
        if password == "guess-guess":
            raise VerifyMismatchError
        return self._real.verify(password_hash, password)

    def hash(self, password: str) -> str:
        self._hold()
        return self._real.hash(password)


@pytest.fixture
def world(state, app):
    import falcon.testing

    return build_world(state, falcon.testing.TestClient(app))


def test_a_login_flood_is_refused_at_once_and_the_api_still_answers(state, world, monkeypatch):
    login_module._dummy_hash()  # computed by the real argon2, before the stub
    held = HeldHasher()
    monkeypatch.setattr(passwords, "_hasher", held)
    served = create_server_app(state=state)  # 8 API threads, as served
    invitation = world.call(
        "primary", "POST", "/api/invitations", {"email": "new@example.com", "role": "member"}
    ).json["token"]
    me = world.headers("viewer")

    async def flood() -> None:
        transport = httpx.ASGITransport(app=served)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:

            async def junk(i: int) -> httpx.Response:
                body = {"email": f"junk{i}@example.com", "password": "guess-guess"}
                return await client.post("/auth/login", json=body)

            logins = [asyncio.create_task(junk(i)) for i in range(16)]
            deadline = time.monotonic() + 10
            while held.started < passwords.RUNNING and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert held.started == passwords.RUNNING
            # Two run, two wait; the other twelve are answered without waiting.
            admitted = passwords.RUNNING + passwords.WAITING
            while sum(not t.done() for t in logins) > admitted and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            pending = [t for t in logins if not t.done()]
            assert len(pending) == admitted
            refused_email = ""
            for i, task in enumerate(logins):
                if task in pending:
                    continue
                refused_email = f"junk{i}@example.com"
                refused = task.result()
                assert refused.status_code == 503, refused.text
                assert refused.json()["error"]["code"] == "password_busy"
                assert refused.headers["Retry-After"] == "1"
            # The rest of the API has its threads: answered at once.
            start = time.monotonic()
            got = await asyncio.wait_for(client.get("/api/me", headers=me), 5)
            assert got.status_code == 200 and time.monotonic() - start < 2
            # Every caller of the hasher is bounded alike; a refusal changes nothing.
            accept = await client.post(
                f"/auth/invitations/{invitation}/accept", json={"password": "long enough"}
            )
            assert accept.status_code == 503, accept.text
            change = await client.post(
                "/api/me/password",
                json={"current_password": "guess-guess", "new_password": "a new passphrase"},
                headers=me,
            )
            assert change.status_code == 503, change.text
            assert held.started == passwords.RUNNING
            held.go.set()
            for answer in await asyncio.gather(*pending):
                assert answer.status_code == 401, answer.text
            # Once free: the invitation was not used up, and no refusal counted as a
            # failed login (a sixth try after five failures would be a 429).
            accept = await client.post(
                f"/auth/invitations/{invitation}/accept", json={"password": "long enough"}
            )
            assert accept.status_code == 201, accept.text
            for _ in range(5):
                wrong = await client.post(
                    "/auth/login", json={"email": refused_email, "password": "guess-guess"}
                )
                assert wrong.status_code == 401, wrong.text
            right = await client.post(
                "/auth/login", json={"email": "viewer@example.com", "password": PASSWORD}
            )
            assert right.status_code == 200, right.text

    try:
        asyncio.run(flood())
    finally:
        held.go.set()
        state.ingest.writer.spool.close()
