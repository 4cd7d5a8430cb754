"""One JSON error body for every error, including Falcon's own."""


def _assert_error(resp, status, code):
    assert resp.status_code == status
    body = resp.json
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "field"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]


def test_unknown_route_is_json_404(client):
    _assert_error(client.simulate_get("/no/such/thing"), 404, "not_found")


def test_wrong_method_is_json_405(client):
    _assert_error(client.simulate_delete("/healthz"), 405, "method_not_allowed")


def test_healthz(client):
    resp = client.simulate_get("/healthz")
    assert resp.status_code == 200
    assert resp.json == {"status": "ok"}


def test_health_probes_answer_head(client):
    # Load balancers probe with HEAD too; it was a 405.
    for path in ("/healthz", "/readyz"):
        resp = client.simulate_head(path)
        assert resp.status_code == 200, path
        assert resp.content == b""


def test_health_probes_list_options_in_their_options_answer(client):
    # As every management route does; /readyz, served on the event loop, left it out.
    for path in ("/healthz", "/readyz"):
        resp = client.simulate_options(path)
        assert resp.status_code == 200, path
        assert resp.headers["allow"] == "GET, HEAD, OPTIONS", path


def test_readyz_when_both_stores_answer(client):
    resp = client.simulate_get("/readyz")
    assert resp.status_code == 200, resp.text
    assert resp.json["status"] == "ok"


def _readyz_with(state, **stores):
    import falcon.testing

    from errortrack.app import create_app
    from errortrack.state import AppState

    broken = AppState.build(
        state.settings, **{"engine": state.engine, "clickhouse": state.clickhouse, **stores}
    )
    return falcon.testing.TestClient(create_app(state=broken)).simulate_get("/readyz")


def test_readyz_503_when_clickhouse_unreachable(state):
    from errortrack.analytics import ClickHouse
    from tests.support import free_port

    port = free_port()
    dead = ClickHouse(f"http://default:@127.0.0.1:{port}/errortrack")
    resp = _readyz_with(state, clickhouse=dead)
    _assert_error(resp, 503, "unavailable")
    assert resp.json["error"]["message"].startswith("store not ready: clickhouse ")
    # Public: where the store lives stays in the server log.
    assert str(port) not in resp.text and "127.0.0.1" not in resp.text
    assert resp.headers["Retry-After"]


def test_readyz_503_when_relational_unreachable(state):
    from errortrack import db
    from tests.support import free_port

    port = free_port()
    dead = db.make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{port}/x")
    resp = _readyz_with(state, engine=dead)
    _assert_error(resp, 503, "unavailable")
    assert resp.json["error"]["message"].startswith("store not ready: relational ")
    assert str(port) not in resp.text and "127.0.0.1" not in resp.text
