"""The management API as clients meet it (a review, nineteenth session): chunked bodies over a real socket,
HEAD wherever GET is served, a token that cannot be an invitation's, an unreachable
relational store, and what the OpenAPI document promises about request bodies."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import falcon.testing
import httpx
import pytest

from errortrack.api.schemas import MAX_BODY_BYTES
from errortrack.app import create_app
from errortrack.state import AppState
from tests.access_matrix import ROWS
from tests.access_world import build_world
from tests.support import Server, free_port, served_with_token


@pytest.fixture
def world(state, client):
    return build_world(state, client)


# --- 1. chunked request bodies, over a real socket ----------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[Server, str]]:
    """A real `errortrack serve` (gunicorn, asgi worker, a2wsgi) and an admin token:
    falcon.testing always sends a Content-Length, a real client need not."""
    with served_with_token(tmp_path_factory.mktemp("served")) as found:
        yield found


def _chunks(data: bytes, size: int = 7) -> Iterator[bytes]:
    # A generator body: httpx sends it with Transfer-Encoding: chunked and no length.
    for start in range(0, len(data), size):
        yield data[start : start + size]


def _api(served: tuple[Server, str]) -> httpx.Client:
    server, token = served
    return httpx.Client(
        base_url=server.url,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        timeout=30,
    )


def test_a_chunked_body_is_read_not_taken_for_an_empty_one(served):
    # It was read as no body at all: a PATCH answered 200 and changed nothing (a leaked
    # key "disabled" this way stayed active), a POST said a field was missing.
    with _api(served) as api:
        made = api.post("/api/projects", content=_chunks(b'{"name": "via chunks"}'))
        assert made.request.headers.get("transfer-encoding") == "chunked"
        assert "content-length" not in made.request.headers
        assert made.status_code == 201, made.text
        assert made.json()["name"] == "via chunks"
        project = made.json()["id"]

        renamed = api.patch(f"/api/projects/{project}", content=_chunks(b'{"name": "renamed"}'))
        assert renamed.status_code == 200, renamed.text
        assert renamed.json()["name"] == "renamed"

        key = api.get(f"/api/projects/{project}/keys").json()[0]["id"]
        body = b'{"is_active": false, "label": "leaked"}'
        off = api.patch(f"/api/projects/{project}/keys/{key}", content=_chunks(body))
        assert off.status_code == 200, off.text
        assert (off.json()["is_active"], off.json()["label"]) == (False, "leaked")

        # An empty chunked body is still no body; a bad one is still a 400.
        empty = api.patch(f"/api/projects/{project}", content=_chunks(b""))
        assert empty.status_code == 200 and empty.json()["name"] == "renamed"
        bad = api.patch(f"/api/projects/{project}", content=_chunks(b'{"name": '))
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "bad_request"


def test_a_chunked_body_over_the_cap_is_413(served):
    # The 1 MiB cap applied only to a declared Content-Length.
    padding = b" " * MAX_BODY_BYTES
    with _api(served) as api:
        resp = api.post(
            "/api/projects", content=_chunks(b'{"name": "big"' + padding + b"}", 64 * 1024)
        )
        assert resp.status_code == 413, resp.text
        assert resp.json()["error"]["code"] == "payload_too_large"
        # Exactly at the cap is read.
        body = b'{"name": "at the cap"}'
        at_cap = body[:-1] + b" " * (MAX_BODY_BYTES - len(body)) + b"}"
        resp = api.post("/api/projects", content=_chunks(at_cap, 64 * 1024))
        assert resp.status_code == 201, resp.text


def _raw(server: Server, request: bytes) -> tuple[int, str, bytes]:
    import socket

    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers.get("content-type", ""), body


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        (b"Authorization: Bearer " + b"x" * 9000 + b"\r\n", 431),
        (b"".join(b"X-H%d: v\r\n" % i for i in range(150)), 431),
        (b"Content-Length: abc\r\n", 400),
        (b"Authorization: Bearer et_abc\x01\r\n", 400),
    ],
    ids=["long header", "many headers", "bad length", "control character"],
)
def test_gunicorns_own_refusals_are_plain_text_as_documented(served, headers, status):
    # docs/API.md lists them as the exceptions to the one JSON error body.
    server, _ = served
    request = b"GET /api/me HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + headers + b"\r\n"
    got, content_type, _ = _raw(server, request)
    assert (got, content_type.split(";")[0]) == (status, "text/plain")


# --- 12. HEAD wherever GET is served -------------------------------------------------------


def test_head_over_a_real_socket_answers_as_get_without_a_body(served):
    server, token = served
    auth = {"Authorization": f"Bearer {token}"}
    got = httpx.get(f"{server.url}/api/projects", headers=auth)
    head = httpx.head(f"{server.url}/api/projects", headers=auth)
    assert head.status_code == got.status_code == 200
    assert head.content == b""
    assert head.headers["content-type"] == "application/json"
    assert head.headers["content-length"] == str(len(got.content))
    # Refusals too: the status and headers of GET's refusal.
    assert httpx.head(f"{server.url}/api/projects").status_code == 401
    assert httpx.head(f"{server.url}/api/projects/99999", headers=auth).status_code == 404


_GET_ROWS = [row for row in ROWS if row.endpoint.startswith("GET ")]


@pytest.mark.parametrize("row", _GET_ROWS, ids=lambda r: f"{r.endpoint} {r.case}".strip())
def test_head_answers_every_get_route_like_get_without_a_body(world, row):
    # It was a 405 (Allow: GET, OPTIONS) on every API route; RFC 9110 asks for HEAD
    # wherever GET is served.
    for caller in ("anonymous", "primary", "viewer", "outsider"):
        _, path, _ = row.prepare(world, caller)
        # A token's use is recorded after its request (db.after_commit), so a token
        # listing shows it from the next request on: the GET compared is the second.
        world.call(caller, "GET", path)
        got = world.call(caller, "GET", path)
        head = world.call(caller, "HEAD", path)
        assert head.status_code == got.status_code, (caller, path, head.text)
        assert head.content == b""
        drop = {"content-length"} if got.status_code == 204 else set()
        same = {k: v for k, v in got.headers.items() if k not in drop}
        assert {k: v for k, v in head.headers.items() if k not in drop} == same, caller
        if got.status_code != 204:
            assert head.headers["content-length"] == str(len(got.content))


def test_head_where_no_get_is_served_is_still_405(world):
    resp = world.call("primary", "HEAD", "/auth/login")
    assert resp.status_code == 405
    assert resp.headers["allow"] == "POST, OPTIONS"


def test_allow_lists_head_beside_get(world):
    resp = world.call("primary", "DELETE", "/api/me")
    assert resp.status_code == 405
    assert resp.json["error"]["message"] == "method DELETE not allowed on /api/me"
    assert resp.headers["allow"] == "GET, HEAD, OPTIONS"
    options = world.call("primary", "OPTIONS", f"/api/projects/{world.project_id}")
    assert "HEAD" in options.headers["allow"].split(", ")
    # The OPTIONS answer and the 405 list the same methods.
    assert world.call("primary", "OPTIONS", "/api/me").headers["allow"] == "GET, HEAD, OPTIONS"


# --- 2. an invitation token with NUL --------------------------------------------------------


@pytest.mark.parametrize("token", ["abc%00def", "%00", "x" * 300, "a%20b"])
def test_a_token_that_cannot_be_an_invitations_is_404(world, token):
    # NUL was a 500 on PostgreSQL (text cannot hold it), for anyone, without credentials.
    got = world.call("anonymous", "GET", f"/auth/invitations/{token}")
    assert got.status_code == 404, got.text
    assert got.json["error"] == {
        "code": "not_found",
        "message": "invitation not found",
        "field": None,
    }
    accept = world.call(
        "anonymous", "POST", f"/auth/invitations/{token}/accept", {"password": "password123"}
    )
    assert accept.status_code == 404, accept.text
    assert accept.json["error"]["message"] == "invitation not found"


# --- 3. the relational store unreachable ------------------------------------------------------


@pytest.fixture
def dead_relational(state) -> Iterator[falcon.testing.TestClient]:
    """The app with a relational store that refuses connections (nothing listens there)."""
    from errortrack import db

    dead = db.make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/x")
    broken = AppState.build(
        state.settings, engine=dead, clickhouse=state.clickhouse, clock=state.clock
    )
    yield falcon.testing.TestClient(create_app(state=broken))
    dead.dispose()


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/api/me", None),
        ("GET", "/api/projects", None),
        ("GET", "/api/projects/1/logs", None),
        ("POST", "/auth/login", {"email": "a@example.com", "password": "password123"}),
        ("GET", "/auth/invitations/abc", None),
    ],
)
def test_an_unreachable_relational_store_is_503_with_retry_after(
    dead_relational, caplog, method, path, body
):
    # It was a 500 internal_error: a client could not tell a bug from a restart.
    headers = {"Authorization": "Bearer et_whatever"}
    with caplog.at_level(logging.WARNING, logger="errortrack.api.errors"):
        resp = dead_relational.simulate_request(method, path, headers=headers, json=body)
    assert resp.status_code == 503, resp.text
    assert resp.json["error"]["code"] == "unavailable"
    assert resp.json["error"]["message"].startswith("relational store unavailable")
    assert int(resp.headers["Retry-After"]) > 0
    # Public: where the store lives, and why it failed, stay in the server log.
    assert "127.0.0.1" not in resp.text and "psycopg" not in resp.text
    assert any("127.0.0.1" in r.getMessage() for r in caplog.records), caplog.text


def _answer(call):
    """What the API's error handlers answer for a request whose responder runs ``call``."""
    from errortrack.api import errors

    app = falcon.App()
    errors.install(app)

    class Calling:
        def on_get(self, req, resp):
            call()

    app.add_route("/q", Calling())
    return falcon.testing.TestClient(app).simulate_get("/q")


def test_a_constraint_violation_is_still_no_503():
    # Only connection failures mean "retry later": an IntegrityError stays a 500 (a bug).
    import sqlalchemy as sa

    def boom():
        raise sa.exc.IntegrityError("INSERT", {}, Exception("duplicate key"))

    resp = _answer(boom)
    assert resp.status_code == 500 and resp.json["error"]["code"] == "internal_error"


@pytest.mark.parametrize(
    ("sql", "status"),
    [
        # sqlite3 raises OperationalError for SQL mistakes too: they were 503 "retry later"
        # with no traceback logged (a review, nineteenth session). Bugs stay 500s.
        ("SELECT * FROM no_such_table", 500),
        ("SELECT no_such_column FROM t", 500),
        ("SELEC 1", 500),
        # Another connection holds the write lock past the busy timeout: retry later.
        ("INSERT INTO t VALUES (1)", 503),
    ],
)
def test_sqlite_store_errors_are_503_only_when_the_store_cannot_serve(tmp_path, sql, status):
    import sqlite3

    import sqlalchemy as sa

    path = tmp_path / "store.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x INTEGER)")
    if status == 503:
        holder.execute("BEGIN EXCLUSIVE")  # an exclusive lock blocks readers too
    engine = sa.create_engine(f"sqlite:///{path}", connect_args={"timeout": 0.05})

    def query():
        with engine.begin() as conn:
            conn.execute(sa.text(sql))

    try:
        resp = _answer(query)
    finally:
        holder.close()
        engine.dispose()
    assert resp.status_code == status, resp.text
    assert resp.json["error"]["code"] == {500: "internal_error", 503: "unavailable"}[status]


def test_an_unreachable_clickhouse_server_is_503_with_retry_after():
    # A logs list while the ClickHouse server restarts was a 500 internal_error.
    from errortrack.analytics import ClickHouse

    store = ClickHouse(f"http://default:@127.0.0.1:{free_port()}/errortrack")
    resp = _answer(lambda: store.query_rows("SELECT 1"))
    assert resp.status_code == 503, resp.text
    assert resp.json["error"]["code"] == "unavailable" and resp.headers["Retry-After"] == "5"


# --- 5, 6. what the OpenAPI document says about request bodies and refusals -----------------


@pytest.fixture
def document(openapi_app) -> dict:
    return falcon.testing.TestClient(openapi_app).simulate_get("/api-docs/openapi.json").json


def test_request_schemas_state_the_limits_the_server_enforces(document, world):
    # Each was a plain string or integer in the document while the server refused values
    # outside these (found by a review, nineteenth session; test_schemathesis now checks schema-valid bodies
    # of these operations are taken).
    import re

    schemas = document["components"]["schemas"]

    def prop(schema, field):
        return schemas[schema]["properties"][field]

    for schema, field in [
        ("ProjectIn", "name"),
        ("ProjectPatchIn", "name"),
        ("TokenIn", "description"),
    ]:
        named = prop(schema, field)
        assert (named["minLength"], named["maxLength"]) == (1, 200), schema
        assert re.search(named["pattern"], " a ") and not re.search(named["pattern"], " \x85\t")
    days = prop("ProjectPatchIn", "retention_days")
    assert (days["minimum"], days["maximum"], days["nullable"]) == (1, 3650, True)
    assert prop("KeyIn", "label")["maxLength"] == prop("KeyPatchIn", "label")["maxLength"] == 200
    assert (
        prop("AcceptIn", "password")["minLength"],
        prop("AcceptIn", "password")["maxLength"],
    ) == (8, 1024)
    email = prop("InvitationIn", "email")
    assert email["maxLength"] == 320
    assert re.search(email["pattern"], "dev@example.com")
    assert not any(re.search(email["pattern"], bad) for bad in ("dev", "a b@c.d", "a@b"))

    # The bounds are the server's: in takes, out is the services' 400 as before.
    def status(method, path, body):
        return world.call("primary", method, path, body).status_code

    p = f"/api/projects/{world.project_id}"
    assert status("PATCH", p, {"name": "n" * 200, "retention_days": 3650}) == 200
    assert status("PATCH", p, {"retention_days": 1}) == 200
    assert world.call("primary", "PATCH", p, {"retention_days": 3651}).json["error"] == {
        "code": "invalid",
        "message": "retention_days must be 1 to 3650 or null",
        "field": "retention_days",
    }
    assert world.call("primary", "PATCH", p, {"name": " \x85 "}).json["error"]["message"] == (
        "name must be 1 to 200 characters"
    )
    assert status("POST", "/api/tokens", {"description": "d" * 200}) == 201
    assert status("POST", "/api/tokens", {"description": "d" * 201}) == 400
    assert status("POST", f"{p}/keys", {"label": "k" * 200}) == 201
    assert status("POST", f"{p}/keys", {"label": "k" * 201}) == 400


def test_register_documents_its_403_with_the_error_body(document, world):
    # The document said "Done; no body"; the server sends the one error body.
    refused = document["paths"]["/auth/register"]["post"]["responses"]["403"]
    assert refused["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }
    resp = world.call("anonymous", "POST", "/auth/register", {})
    assert resp.status_code == 403 and set(resp.json["error"]) == {"code", "message", "field"}
