"""The real @sentry/browser (npm, tests/e2e/node) in headless Chromium against a real server.

The page (tests/e2e/browser/) and the SDK's own ES modules are served by a static server
on another loopback port than errortrack, so every request the SDK sends is cross-origin
and needs the server's CORS headers: a refusal is a failed request and a console error in
the browser, which fail the test. The page captures errors (handled, in a span, uncaught),
a message, logs with attributes of every JSON type inside and outside spans, and flushes;
the tests read all of it back through the management API and, last, after the server
stops, from its ClickHouse. A second page load sends with a header that makes Chromium
preflight the POSTs (OPTIONS), which must pass too.

@sentry/browser 11 publishes no CDN bundle (``build/bundles``) to npm, only its ES
modules: the page loads those through an import map, as a browser does without a bundler.
Logs need no option in 11 (``enableLogs`` is gone; ``Sentry.logger`` always sends).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import httpx
import orjson
import pytest
from playwright.sync_api import Browser, sync_playwright

from errortrack import db
from errortrack.auth.tokens import create_token
from errortrack.models import ProjectMember, User
from errortrack.projects.service import active_key, create_project, dsn
from tests.ingest_support import stored_logs
from tests.support import Server, scratch_database, server_env

pytestmark = pytest.mark.e2e
PAGE_DIR = Path(__file__).with_name("browser")
NODE_MODULES = Path(__file__).with_name("node") / "node_modules"
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SDK_VERSION = "11.12.0"  # tests/e2e/node/package.json
SEVERITY = {"trace": 1, "debug": 5, "info": 9, "warn": 13, "error": 17, "fatal": 21}
# What app.js passes with every log, as the SDK types it (an object is sent as its JSON).
ATTRIBUTES = {
    "s": {"value": "text", "type": "string"},
    "i": {"value": 42, "type": "integer"},
    "big": {"value": 9007199254740991, "type": "integer"},
    "d": {"value": 2.5, "type": "double"},
    "b": {"value": True, "type": "boolean"},
    "a": {"value": ["x", "y"], "type": "array"},
    "n": {"value": [1, 2, 3], "type": "array"},
    "o": {"value": '{"k":1}', "type": "string"},
}
# Issue title -> (level, function of the culprit, mechanism.handled, the page's id for it).
ISSUES = {
    "TypeError: browser order 12 has no items": ("error", "checkout", True, "exception_id"),
    "browser payment declined by bank": ("warning", "main", True, "message_id"),
    "Error: browser error in span": ("error", "?", True, "span_exception_id"),
    "RangeError: browser uncaught boom": ("error", "?", False, None),
}
PREFLIGHT_ISSUE = "browser message after a preflight"
EXPOSE = "x-sentry-rate-limits, retry-after"


class _StaticHandler(SimpleHTTPRequestHandler):
    """The page from tests/e2e/browser, the SDK's modules under /node_modules/."""

    extensions_map = {
        **SimpleHTTPRequestHandler.extensions_map,
        ".js": "text/javascript",
        ".mjs": "text/javascript",
        ".map": "application/json",
    }

    def translate_path(self, path: str) -> str:
        path = unquote(urlsplit(path).path)
        root, rest = PAGE_DIR, path
        if path.startswith("/node_modules/"):
            root, rest = NODE_MODULES, path.removeprefix("/node_modules")
        # Resolved both: node_modules may be a link (a worktree sharing a checkout's).
        target = (root / rest.lstrip("/")).resolve()
        return str(target if target.is_relative_to(root.resolve()) else root / "missing")

    def log_message(self, format: str, *args: object) -> None:  # the stdlib names it "format"
        pass


@dataclasses.dataclass
class Run:
    """One page load: what the page says it sent, and what the browser saw."""

    sent: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Each POST to errortrack: its request headers and envelope items.
    posts: list[tuple[dict[str, str], list[tuple[dict[str, Any], Any]]]] = dataclasses.field(
        default_factory=list
    )
    # Each answer from errortrack that Playwright reported: method, status, headers.
    answers: list[tuple[str, int, dict[str, str]]] = dataclasses.field(default_factory=list)
    # The status of every POST's answer as the page itself saw it (Resource Timing).
    # Playwright lost one ``response`` event in CI twice (twenty-eighth session: 9 posts,
    # 8 answers, no failure) though ``Sentry.flush`` returned true, which it does only
    # once every request has settled: the count is taken from the page, and the headers
    # checked on the answers Playwright did report.
    statuses: list[int] = dataclasses.field(default_factory=list)
    # CORS preflights as Chromium's DevTools protocol reports them (Playwright does not).
    preflights: list[tuple[int, dict[str, str]]] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)
    console_errors: list[str] = dataclasses.field(default_factory=list)
    page_errors: list[str] = dataclasses.field(default_factory=list)

    def items(self, item_type: str) -> list[Any]:
        return [p for _, items in self.posts for h, p in items if h["type"] == item_type]


@dataclasses.dataclass
class Sent:
    server: Server
    data_dir: Path
    project_id: int
    headers: dict[str, str]
    page_origin: str
    main: Run
    preflight: Run

    def fetch(self, path: str, query: str = "") -> httpx.Response:
        return httpx.get(
            f"{self.server.url}/api/projects/{self.project_id}{path}?{query}",
            headers=self.headers,
            timeout=10,
        )

    def wait(
        self, path: str, query: str = "", done: Callable[[Any], bool] = bool, timeout: float = 20
    ) -> Any:
        """The answer once ``done`` holds for it. The writer creates an issue before it
        inserts its event into ClickHouse, so a 404 (no event, no trace yet) is waited
        out too."""
        deadline = time.monotonic() + timeout
        while True:
            resp = self.fetch(path, query)
            found = resp.json() if resp.status_code == 200 else None
            if (found is not None and done(found)) or time.monotonic() > deadline:
                assert resp.status_code == 200, resp.text
                return found
            time.sleep(0.2)

    def logs(self) -> dict[str, dict[str, Any]]:
        sent = len(self.main.sent["logs"]) + len(self.preflight.sent["logs"])
        page = self.wait("/logs", "per_page=100", done=lambda p: p["total_count"] >= sent)
        assert page["total_count"] == sent, page
        return {item["body"]: item for item in page["items"]}

    def issues(self) -> dict[str, dict[str, Any]]:
        page = self.wait("/issues", done=lambda p: p["total_count"] >= len(ISSUES) + 1)
        return {item["title"]: item for item in page["items"]}


def _envelope(body: str) -> list[tuple[dict[str, Any], Any]]:
    """An envelope's items as the browser SDK frames them: a JSON line for each item
    header and payload, no ``length``, no trailing newline."""
    lines = body.split("\n")
    return [
        (orjson.loads(h), orjson.loads(p)) for h, p in zip(lines[1::2], lines[2::2], strict=True)
    ]


def _load(browser: Browser, page_url: str, ingest: str, scenario: str, project_dsn: str) -> Run:
    page = browser.new_page()
    run = Run()
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")

    def on_cdp_response(event: dict[str, Any]) -> None:
        if event.get("type") == "Preflight":
            response = event["response"]
            headers = {k.lower(): v for k, v in response["headers"].items()}
            run.preflights.append((response["status"], headers))

    def on_request(request: Any) -> None:
        if request.url.startswith(ingest):
            run.posts.append((request.headers, _envelope(request.post_data or "")))

    def on_response(response: Any) -> None:
        if response.url.startswith(ingest):
            run.answers.append((response.request.method, response.status, response.headers))

    cdp.on("Network.responseReceived", on_cdp_response)
    page.on("request", on_request)
    page.on("response", on_response)
    page.on("requestfailed", lambda r: run.failed.append(f"{r.method} {r.url}: {r.failure}"))
    page.on("console", lambda m: run.console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: run.page_errors.append(f"{exc.name}: {exc.message}"))
    # Chromium keeps 250 entries by default, which the SDK's ES modules use up.
    page.add_init_script("performance.setResourceTimingBufferSize(10000)")
    page.goto(f"{page_url}?scenario={scenario}&dsn={quote(project_dsn, safe='')}")
    # The page sets one of them once Sentry.flush(5000) has returned.
    page.wait_for_function(
        "window.__result !== undefined || window.__failure !== undefined", timeout=20_000
    )
    failure = page.evaluate("window.__failure")
    assert failure is None, failure
    run.sent = page.evaluate("window.__result")
    # A request the SDK made as flush returned (a client report) may still be answered
    # (a CI run on a busy machine, twenty-second session): waited for, as the page sees
    # it, and for the events Playwright reports of it.
    entries = f"performance.getEntriesByType('resource').filter(e => e.name.startsWith({ingest!r}))"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        run.statuses = page.evaluate(f"{entries}.map(e => e.responseStatus)")
        if len(run.statuses) >= len(run.posts) and len(run.answers) >= len(run.posts):
            break
        page.wait_for_timeout(50)
    page.close()
    return run


def _viewer_token(session: Any, project_id: int) -> dict[str, str]:
    user = User(email="viewer@example.com", password_hash="x", role="member")
    session.add(user)
    session.flush()
    session.add(ProjectMember(project_id=project_id, user_id=user.id, role="viewer"))
    now = dt.datetime.now(dt.UTC)
    secret = create_token(session, user_id=user.id, description="e2e", now=now).secret
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture(scope="module")
def sent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sent]:
    assert os.path.exists(CHROMIUM), (
        f"no Chromium at {CHROMIUM}: `apt-get install chromium` (or set CHROMIUM)"
    )
    assert (NODE_MODULES / "@sentry" / "browser").is_dir(), "run: npm ci --prefix tests/e2e/node"
    tmp = tmp_path_factory.mktemp("sdk-browser")
    static = ThreadingHTTPServer(("127.0.0.1", 0), _StaticHandler)
    static.daemon_threads = True
    threading.Thread(target=static.serve_forever, daemon=True).start()
    page_url = f"http://127.0.0.1:{static.server_port}/"
    try:
        with scratch_database(tmp) as url:
            server = Server(server_env(tmp / "data", url)).start()
            assert server.port != static.server_port  # another origin: CORS applies
            engine = db.make_engine(url)
            try:
                with db.unit_of_work(db.make_sessionmaker(engine)) as s:
                    project = create_project(s, name="browser")
                    key = active_key(s, project.id)
                    assert key is not None
                    project_dsn = dsn(server.url, key.public_key, project.id)
                    headers = _viewer_token(s, project.id)
                    project_id = project.id
                with sync_playwright() as pw:
                    # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
                    browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                    try:
                        main, preflight = (
                            _load(browser, page_url, server.url, scenario, project_dsn)
                            for scenario in ("main", "preflight")
                        )
                    finally:
                        browser.close()
                yield Sent(
                    server, tmp / "data", project_id, headers, page_url[:-1], main, preflight
                )
            finally:
                engine.dispose()
                server.stop()
            assert "Traceback" not in server.log(), server.log()
    finally:
        static.shutdown()
        static.server_close()


def _assert_clean(run: Run, page_errors: list[str]) -> None:
    """Nothing failed in the browser, and every answer allowed the page to read it."""
    assert run.sent["flushed"] is True and run.sent["sdk_version"] == SDK_VERSION
    assert run.failed == [] and run.console_errors == []
    assert run.page_errors == page_errors
    assert run.posts and run.statuses == [200] * len(run.posts)
    # All of them, but for an event Playwright lost (``Run.statuses``).
    assert run.answers and len(run.answers) >= len(run.posts) - 1
    for method, status, headers in run.answers:
        assert (method, status) == ("POST", 200)
        assert headers["access-control-allow-origin"] == "*"
        assert headers["access-control-expose-headers"] == EXPOSE


def test_the_browser_saw_no_failure(sent: Sent):
    _assert_clean(sent.main, ["RangeError: browser uncaught boom"])
    # The SDK's own requests are "simple" (a string body, so text/plain, and the key in
    # the query string): no preflight, and the browser sends them cross-origin as such.
    assert sent.main.preflights == []
    for headers, _ in sent.main.posts:
        assert headers["content-type"] == "text/plain;charset=UTF-8"
        assert headers["referer"] == sent.page_origin + "/"
    assert {"event", "log", "span", "session"} <= {
        h["type"] for _, items in sent.main.posts for h, _ in items
    }


def test_preflighted_posts_pass(sent: Sent):
    _assert_clean(sent.preflight, [])
    assert {h["content-type"] for h, _ in sent.preflight.posts} == {"application/x-sentry-envelope"}
    # Chromium caches the first answer (Access-Control-Max-Age), so maybe only one.
    assert sent.preflight.preflights
    for status, headers in sent.preflight.preflights:
        assert status == 200
        assert headers["access-control-allow-origin"] == "*"
        assert "POST" in headers["access-control-allow-methods"]
        assert "content-type" in headers["access-control-allow-headers"].split(", ")
    issue = sent.issues()[PREFLIGHT_ISSUE]
    assert (issue["level"], issue["count"]) == ("info", 1)
    log = sent.logs()["preflighted log"]
    assert (log["level"], log["attributes"]["i"]) == ("info", ATTRIBUTES["i"])


def test_errors_and_messages_become_issues(sent: Sent):
    issues = sent.issues()
    assert set(issues) == {*ISSUES, PREFLIGHT_ISSUE}
    events = {e["event_id"]: e for e in sent.main.items("event")}
    for title, (level, function, handled, id_name) in ISSUES.items():
        issue = issues[title]
        assert (issue["level"], issue["count"], issue["status"]) == (level, 1, "unresolved")
        assert issue["culprit"] == f"{function}({sent.page_origin}/app.js)"
        latest = sent.wait(f"/issues/{issue['id']}/events/latest")
        assert (latest["platform"], latest["title"], latest["level"]) == (
            "javascript",
            title,
            level,
        )
        assert (latest["release"], latest["environment"]) == ("e2e-browser@1", "test")
        if id_name is not None:
            assert latest["event_id"] == sent.main.sent[id_name]
        # Stored as the browser sent it.
        assert latest["payload"] == events[latest["event_id"]]
        payload = latest["payload"]
        assert payload["sdk"]["name"] == "sentry.javascript.browser"
        assert payload["sdk"]["version"] == SDK_VERSION
        [exception] = payload["exception"]["values"]
        assert exception["mechanism"]["handled"] is handled
        assert payload["request"]["url"].startswith(sent.page_origin + "/?scenario=main")
        # The page's one trace: the span's, which outside it is the propagation context's.
        assert latest["trace_id"] == sent.main.sent["trace_id"]
    in_span = sent.wait(f"/issues/{issues['Error: browser error in span']['id']}/events/latest")
    assert in_span["span_id"] == sent.main.sent["child_span_id"]


def test_logs_as_sent(sent: Sent):
    stored = sent.logs()
    for run in (sent.main, sent.preflight):
        wire = {log["body"]: log for item in run.items("log") for log in item["items"]}
        assert set(wire) == {log["body"] for log in run.sent["logs"]}
        for log in run.sent["logs"]:
            item, sent_log = stored[log["body"]], wire[log["body"]]
            assert item["level"] == sent_log["level"] == log["level"]
            assert item["severity_number"] == sent_log["severity_number"] == SEVERITY[log["level"]]
            # Every attribute, the SDK's own too, with the type it was sent with.
            assert item["attributes"] == sent_log["attributes"]
            assert {k: item["attributes"][k] for k in ATTRIBUTES} == ATTRIBUTES
            assert item["attributes"]["sentry.sdk.name"]["value"] == "sentry.javascript.browser"
            timestamp = dt.datetime.fromisoformat(item["timestamp"]).timestamp()
            assert abs(timestamp - sent_log["timestamp"]) < 2e-6
            # The SDK sends its propagation trace id outside a span too; only a log
            # emitted in a span keeps it, with that span's id (sent as an attribute).
            assert (item["trace_id"], item["span_id"]) == (log["trace_id"], log["span_id"])
    in_span = [b for b, item in stored.items() if item["span_id"]]
    assert sorted(in_span) == ["in child span", "in span error", "in span info", "in span warn"]
    assert stored["in child span"]["span_id"] == sent.main.sent["child_span_id"]
    assert stored["in span warn"]["span_id"] == sent.main.sent["root_span_id"]


def test_spans_logs_and_events_share_the_trace(sent: Sent):
    main = sent.main.sent
    trace = sent.wait(
        f"/traces/{main['trace_id']}",
        done=lambda t: t["span_count"] >= 2 and len(t["logs"]) >= 4 and len(t["events"]) >= 4,
    )
    assert trace["span_count"] == 2
    [root] = trace["spans"]
    assert (root["span_id"], root["parent_span_id"], root["is_segment"]) == (
        main["root_span_id"],
        None,
        True,
    )
    assert (root["op"], root["segment_name"], root["status"]) == (
        "ui.action",
        "browser-e2e-txn",
        "ok",
    )
    [child] = root["children"]
    assert (child["span_id"], child["parent_span_id"], child["segment_id"]) == (
        main["child_span_id"],
        main["root_span_id"],
        main["root_span_id"],
    )
    assert (child["op"], child["description"], child["is_segment"]) == (
        "db.query",
        "browser-e2e-child",
        False,
    )
    assert child["attributes"]["sentry.sdk.name"]["value"] == "sentry.javascript.browser"
    # Oldest first; the browser's clock (100 us steps) may give two logs one timestamp.
    assert sorted(log["body"] for log in trace["logs"]) == [
        "in child span",
        "in span error",
        "in span info",
        "in span warn",
    ]
    assert {e["title"] for e in trace["events"]} == set(ISSUES)


# Last in this module: it stops the server to read its chDB.
def test_typed_attribute_columns_in_clickhouse(sent: Sent):
    count = len(sent.logs())
    sent.server.stop()  # flushes the spool into ClickHouse and releases chDB
    rows = stored_logs(sent.data_dir, sent.project_id)
    assert len(rows) == count
    for row in rows:
        assert row["severity_number"] == SEVERITY[row["level"]]
        assert row["attr_int"]["i"] == 42 and row["attr_int"]["big"] == 9007199254740991
        assert row["attr_float"]["d"] == 2.5 and row["attr_bool"]["b"] is True
        assert row["attr_string"]["s"] == "text" and row["attr_string"]["o"] == '{"k":1}'
        assert row["attr_string"]["a"] == '["x","y"]' and row["attr_string"]["n"] == "[1,2,3]"
        assert orjson.loads(row["attributes"])["n"] == ATTRIBUTES["n"]
