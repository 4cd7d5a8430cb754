"""``/docs`` in a real browser: headless Chromium renders the Swagger UI from the app's own
assets, lists every documented operation, and "Try it out" with a bearer token reads logs.

The app runs on the test's real stores behind a loopback WSGI server; Playwright drives
Debian's ``chromium`` (``CHROMIUM`` overrides the path; `make test` and `.ci/run` install
it). Every request the page makes is recorded: none may leave the server (no CDN).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from socketserver import ThreadingMixIn
from urllib.parse import urlsplit
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from tests.access_world import build_world
from tests.logs_data import insert_logs, sdk_log

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
LOGS_PATH = "/api/projects/{project_id}/logs"


class _ThreadedServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # the stdlib names it "format"
        pass


@pytest.fixture
def docs_server(state, client, openapi_app) -> Iterator[tuple[str, object]]:
    world = build_world(state, client)
    insert_logs(
        state.clickhouse,
        world.project_id,
        [sdk_log("checkout failed for order 77", level="error", code=503)],
    )
    httpd = make_server(
        "127.0.0.1", 0, openapi_app, server_class=_ThreadedServer, handler_class=_QuietHandler
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}", world
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def page() -> Iterator[Page]:
    assert os.path.exists(CHROMIUM), (
        f"no Chromium at {CHROMIUM}: `apt-get install chromium` (or set CHROMIUM)"
    )
    with sync_playwright() as pw:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser.new_page()
        finally:
            browser.close()


def test_swagger_ui_renders_and_tries_a_request(docs_server, page: Page):
    base, world = docs_server
    origin = urlsplit(base).netloc
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    page.goto(f"{base}/docs")
    document = json.loads(page.request.get(f"{base}/api-docs/openapi.json").text())
    operations = sum(
        1
        for item in document["paths"].values()
        for method in item
        if method in {"get", "post", "put", "patch", "delete"}
    )
    # Every operation of the document is on the page, once.
    expect(page.locator(".opblock")).to_have_count(operations, timeout=15_000)
    expect(page.locator(".info .title")).to_contain_text(document["info"]["title"])

    # Authorize with a bearer token, then try the logs list for real.
    page.locator("button.btn.authorize").first.click()
    bearer = page.locator(".auth-container").filter(has_text="bearer")
    bearer.locator("input").fill(world.tokens["viewer"])
    bearer.locator("button.authorize").click()
    page.locator("button.btn-done, button.close-modal").first.click()

    logs = page.locator(f'.opblock-get:has(.opblock-summary-path[data-path="{LOGS_PATH}"])')
    logs.locator(".opblock-summary").click()
    logs.locator("button.try-out__btn").click()
    logs.locator('tr[data-param-name="project_id"] input').fill(str(world.project_id))
    logs.locator("button.execute").click()
    live = logs.locator(".live-responses-table .response")
    expect(live.locator(".response-col_status").first).to_have_text("200", timeout=15_000)
    expect(live.locator(".response-col_description")).to_contain_text(
        "checkout failed for order 77"
    )
    # The request the page built carried the token.
    expect(logs.locator(".curl-command")).to_contain_text(f"Bearer {world.tokens['viewer']}")

    assert errors == []
    foreign = [url for url in requested if urlsplit(url).netloc != origin]
    assert foreign == [], f"the page fetched from outside the server: {foreign}"
    assert any(url.endswith("/docs/assets/swagger-ui-bundle.js") for url in requested)
