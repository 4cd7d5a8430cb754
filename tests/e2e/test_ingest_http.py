"""The ingest endpoints in-process: real relational store, real chDB, real spool."""

from __future__ import annotations

import datetime as dt
import json
import time

import falcon.testing
import orjson
import pytest

from errortrack.ingest import auth, runtime
from errortrack.ingest.items import DROPPED
from errortrack.server import create_server_app
from tests.ingest_support import ENCODERS, log_envelope, make_project, sentry_auth

# Real time, not the frozen clock's fixed day: a log dated outside Sentry's window (30 days
# past, 60 s future) gets its arrival time, and ClickHouse's TTL, which runs on the real
# clock, drops rows a fixed day old once their retention is over (7 days below).
NOW = int(time.time())
T = NOW - 60 + 0.1752334  # the logs' own time, a minute before they arrive
T_US = (NOW - 60) * 1_000_000 + 175233


@pytest.fixture(autouse=True)
def _arrive_now(clock):
    clock.now = dt.datetime.fromtimestamp(NOW, dt.UTC)


def _logs(clickhouse, project_id):
    return clickhouse.query_rows(
        "SELECT body, level, severity_number, trace_id, span_id, attributes, retention_days, "
        "toUnixTimestamp64Micro(timestamp), toUnixTimestamp64Micro(ingested_at) "
        "FROM logs WHERE project_id = {p:UInt64} ORDER BY timestamp",
        parameters={"p": project_id},
    )


def _post(client, project_id, body, headers=None, *, path="envelope/", query=None):
    return client.simulate_post(
        f"/api/{project_id}/{path}", body=body, headers=headers or {}, query_string=query
    )


def _log(body, level="info", **extra):
    return {
        "timestamp": T,
        "level": level,
        "body": body,
        "trace_id": "e5b61031519245ccaea3fd1be4e59ce7",
        **extra,
    }


def test_logs_reach_clickhouse_with_the_seed_rules(state, ingest_client, project, clickhouse):
    pid, key = project
    attrs = {
        "n": {"value": "12", "type": "integer"},
        "ok": {"value": True, "type": "boolean"},
        "xs": {"value": [1, "a"], "type": "array"},
        "d": {"value": 1.5, "type": "double"},
    }
    logs = [
        _log("in span", "warn", span_id="96af6e9076d708e9", attributes=attrs),
        _log(
            "node in span",
            "error",
            attributes={
                "sentry.trace.parent_span_id": {"value": "a17ad1e8085dc132", "type": "string"}
            },
        ),
        _log("outside", "notice"),
    ]
    resp = _post(ingest_client, pid, log_envelope(logs), sentry_auth(key))
    assert resp.status_code == 200, resp.text
    assert resp.json == {}
    state.ingest.writer.drain()
    rows = {r[0]: r for r in _logs(clickhouse, pid)}
    assert set(rows) == {"in span", "node in span", "outside"}
    assert rows["in span"][1:5] == (
        "warn",
        13,
        "e5b61031519245ccaea3fd1be4e59ce7",
        "96af6e9076d708e9",
    )
    assert orjson.loads(rows["in span"][5]) == attrs
    assert rows["node in span"][1:5] == (
        "error",
        17,
        "e5b61031519245ccaea3fd1be4e59ce7",
        "a17ad1e8085dc132",
    )
    assert rows["outside"][1:5] == ("notice", None, "", "")
    assert rows["outside"][6] == 90
    assert rows["outside"][7] == T_US
    assert rows["outside"][8] == NOW * 1_000_000
    typed = clickhouse.query_rows(
        "SELECT attr_int, attr_bool, attr_float, attr_string FROM logs WHERE body = 'in span'"
    )
    assert typed[0] == ({"n": 12}, {"ok": True}, {"d": 1.5}, {"xs": '[1,"a"]'})


def test_attributes_are_stored_byte_for_byte_and_ids_are_made_by_the_table(
    state, ingest_client, project, clickhouse
):
    """The row carries the attributes as sent and no id; the stored text is the bytes
    the SDK sent (here orjson's), escapes and all, and every log gets its own UUID from
    the column default (clickhouse/0010)."""
    pid, key = project
    attrs = {
        'q"uote': {"value": 'say "hi"\n\tand \\ \u0000 \u00e9 \U0001f600', "type": "string"},
        "big": {"value": "9223372036854775808", "type": "integer"},
        "neg": {"value": -9223372036854775808, "type": "integer"},
        "tiny": {"value": 5e-324, "type": "double"},
        "nested": {"value": [{"a": [1.0, None, False]}, "x"], "type": "array"},
        "empty": {"value": "", "type": "string", "unit": None},
    }
    logs = [_log(f"log {i}", attributes=attrs if i else {}) for i in range(50)]
    resp = _post(ingest_client, pid, log_envelope(logs), sentry_auth(key))
    assert resp.status_code == 200, resp.text
    state.ingest.writer.drain()
    rows = clickhouse.query_rows(
        "SELECT body, attributes, toString(id) FROM logs WHERE project_id = {p:UInt64}",
        parameters={"p": pid},
    )
    assert len(rows) == 50
    by_body = {r[0]: r for r in rows}
    assert by_body["log 0"][1] == "{}"
    assert by_body["log 7"][1] == orjson.dumps(attrs).decode()
    assert orjson.loads(by_body["log 7"][1]) == attrs
    ids = {r[2] for r in rows}
    assert len(ids) == 50 and all(len(i) == 36 and i[14] == "4" for i in ids)


def test_attributes_written_otherwise_are_stored_verbatim_and_insert(
    state, ingest_client, project, clickhouse
):
    """Bytes no JSON library here would write (spaces, escapes, 1.50, integers beyond
    64 bits, which orjson cannot even read) are stored as sent; the typed maps keep what
    fits their column, so the batch inserts. A pretty-printed item (with `length`) is
    re-encoded instead, since a spooled row must stay on one line."""
    pid, key = project
    attrs = (
        b'{"s": {"value": "caf\\u00e9", "type": "string"},'
        b' "d": {"value": 1.50, "type": "double", "unit": "ms"},'
        b' "huge_i": {"value": 123456789012345678901234567890, "type": "integer"},'
        b' "huge_d": {"value": 123456789012345678901234567890, "type": "double"}}'
    )
    one_line = b'{"items":[{"timestamp":%d.5,"level":"info","body":"flat","attributes":' % NOW
    pretty = b'{\n "items": [\n  {"timestamp": %d.5, "level": "info", "body": "pretty",' % (NOW + 1)
    items = [one_line + attrs + b"}]}", pretty + b'\n   "attributes": ' + attrs + b"}]}"]
    body = b"{}\n" + b"".join(
        orjson.dumps({"type": "log", "length": len(item)}) + b"\n" + item + b"\n" for item in items
    )
    resp = _post(ingest_client, pid, body, sentry_auth(key))
    assert resp.status_code == 200, resp.text
    state.ingest.writer.drain()
    rows = clickhouse.query_rows(
        "SELECT body, attributes, attr_string, attr_int, attr_float FROM logs "
        "WHERE project_id = {p:UInt64} ORDER BY timestamp",
        parameters={"p": pid},
    )
    assert [r[0] for r in rows] == ["flat", "pretty"]
    assert rows[0][1].encode() == attrs
    assert "\n" not in rows[1][1] and json.loads(rows[1][1]) == json.loads(attrs)
    for row in rows:
        assert (row[2], row[3]) == ({"s": "caf\u00e9"}, {})
        assert row[4]["d"] == 1.5 and row[4]["huge_d"] == pytest.approx(1.2345678901234568e29)


def test_timestamps_no_column_can_hold_do_not_stop_the_writer(
    state, ingest_client, project, clickhouse
):
    """A log, a transaction's child span or a v2 span dated 1e30 once got its 200 and
    then failed its batch's insert on every retry, which stopped every later insert.
    Such times are replaced like missing ones; everything inserts."""
    pid, key = project
    now = state.clock().timestamp()
    absurd = 1e30
    logs = [_log("absurd", timestamp=absurd), _log("before 1970", timestamp=-5.0), _log("ok")]
    transaction = {
        "type": "transaction",
        "transaction": "GET /",
        "start_timestamp": now,
        "timestamp": now + 1,
        "contexts": {"trace": {"trace_id": "a" * 32, "span_id": "b" * 16}},
        "spans": [{"span_id": "c" * 16, "start_timestamp": absurd, "timestamp": absurd * 10}],
    }
    spans = {
        "version": 2,
        "items": [
            {
                "trace_id": "d" * 32,
                "span_id": "e" * 16,
                "name": "root",
                "is_segment": True,
                "start_timestamp": now,
                "end_timestamp": now + 1,
            },
            {
                "trace_id": "d" * 32,
                "span_id": "f" * 16,
                "name": "child",
                "start_timestamp": absurd,
                "end_timestamp": absurd,
            },
        ],
    }
    body = log_envelope(logs) + b"".join(
        orjson.dumps({"type": kind}) + b"\n" + orjson.dumps(payload) + b"\n"
        for kind, payload in (("transaction", transaction), ("span", spans))
    )
    resp = _post(ingest_client, pid, body, sentry_auth(key))
    assert resp.status_code == 200, resp.text
    state.ingest.writer.drain()  # raised here, and retried forever when served
    stored = dict(
        clickhouse.query_rows(
            "SELECT body, toUnixTimestamp64Micro(timestamp) FROM logs "
            "WHERE project_id = {p:UInt64}",
            parameters={"p": pid},
        )
    )
    received = round(now * 1e6)
    assert stored == {"absurd": received, "before 1970": received, "ok": T_US}
    spans_stored = clickhouse.query_rows(
        "SELECT span_id, toUnixTimestamp64Micro(start_timestamp), duration_us FROM spans "
        "WHERE project_id = {p:UInt64} ORDER BY span_id",
        parameters={"p": pid},
    )
    assert [r[0] for r in spans_stored] == ["b" * 16, "c" * 16, "e" * 16, "f" * 16]
    for _, start, duration in spans_stored:
        assert abs(start - received) <= 1_000_000 and duration <= 1_000_000


def test_both_url_shapes_and_project_retention(state, ingest_client, clickhouse):
    with state.sessions() as session:
        pid, key = make_project(session, retention_days=7)
    for path in ("envelope/", "envelope"):
        resp = _post(
            ingest_client,
            pid,
            log_envelope([_log(path)], with_length=False),
            sentry_auth(key),
            path=path,
        )
        assert resp.status_code == 200, resp.text
    state.ingest.writer.drain()
    assert sorted((r[0], r[6]) for r in _logs(clickhouse, pid)) == [
        ("envelope", 7),
        ("envelope/", 7),
    ]


@pytest.mark.parametrize("encoding", sorted(ENCODERS))
def test_each_content_encoding(state, ingest_client, project, clickhouse, encoding):
    pid, key = project
    body = ENCODERS[encoding](log_envelope([_log(f"enc {encoding}")]))
    headers = {**sentry_auth(key), "Content-Encoding": encoding}
    assert _post(ingest_client, pid, body, headers).status_code == 200
    state.ingest.writer.drain()
    assert [r[0] for r in _logs(clickhouse, pid)] == [f"enc {encoding}"]


def test_a_compressed_body_cut_short_is_400_and_stores_nothing(
    state, ingest_client, project, clickhouse
):
    import zlib

    pid, key = project
    first, second = log_envelope([_log("first")]), b'{"type":"log"}\n{"items":[]}\n'
    # Flushed after the first item, then cut: whole blocks of it, no end of stream.
    zipper = zlib.compressobj(wbits=31)
    cut = zipper.compress(first) + zipper.flush(zlib.Z_SYNC_FLUSH)
    zipper.compress(second)
    resp = _post(ingest_client, pid, cut, {**sentry_auth(key), "Content-Encoding": "gzip"})
    _error(resp, 400, "bad_request", "body is not valid gzip: it ends before")
    assert resp.json["error"]["field"] == "Content-Encoding"
    state.ingest.writer.drain()
    assert _logs(clickhouse, pid) == []


def test_a_gzip_body_of_several_members_is_stored_whole(state, ingest_client, project, clickhouse):
    pid, key = project
    whole = (
        log_envelope([_log("one")]) + b'{"type":"log"}\n' + orjson.dumps({"items": [_log("two")]})
    )
    cut = len(whole) // 2
    members = ENCODERS["gzip"](whole[:cut]) + ENCODERS["gzip"](whole[cut:])
    resp = _post(ingest_client, pid, members, {**sentry_auth(key), "Content-Encoding": "gzip"})
    assert resp.status_code == 200, resp.text
    garbage = _post(
        ingest_client, pid, members + b"\n", {**sentry_auth(key), "Content-Encoding": "gzip"}
    )
    _error(garbage, 400, "bad_request", "not valid gzip")
    utf8 = {**sentry_auth(key), "Content-Encoding": "UTF-8"}  # sentry.java.android 2.0.0
    assert _post(ingest_client, pid, log_envelope([_log("three")]), utf8).status_code == 200
    state.ingest.writer.drain()
    assert sorted(r[0] for r in _logs(clickhouse, pid)) == ["one", "three", "two"]


def test_each_auth_place(state, ingest_client, project, clickhouse):
    pid, key = project
    body = log_envelope([_log("x")])
    assert _post(ingest_client, pid, body, sentry_auth(key)).status_code == 200
    assert (
        _post(ingest_client, pid, body, {"Authorization": f"Sentry sentry_key={key}"}).status_code
        == 200
    )
    assert (
        _post(ingest_client, pid, body, query=f"sentry_version=7&sentry_key={key}").status_code
        == 200
    )
    dsn_body = log_envelope([_log("x")], header={"dsn": f"http://{key}@127.0.0.1:8000/{pid}"})
    assert _post(ingest_client, pid, dsn_body).status_code == 200
    state.ingest.writer.drain()
    assert len(_logs(clickhouse, pid)) == 4


def _error(resp, status, code, text=""):
    assert resp.status_code == status, resp.text
    assert resp.json["error"]["code"] == code
    assert text in resp.json["error"]["message"]


def test_auth_failures(state, ingest_client, project, clickhouse):
    pid, key = project
    with state.sessions() as session:
        other_pid, other_key = make_project(session, name="other")
    body = log_envelope([_log("x")])
    missing = _post(ingest_client, pid, body)
    _error(missing, 401, "unauthorized", "no sentry_key")
    assert missing.headers["Access-Control-Allow-Origin"] == "*"  # browsers can read it
    assert "retry-after" in missing.headers["Access-Control-Expose-Headers"]
    _error(_post(ingest_client, pid, b"{}", path="store/"), 401, "unauthorized", "no sentry_key")
    _error(
        _post(ingest_client, pid, body, {"X-Sentry-Auth": "Basic abc"}),
        401,
        "unauthorized",
        "must start with 'Sentry '",
    )
    _error(
        _post(ingest_client, pid, body, {"X-Sentry-Auth": "Sentry sentry_version=7"}),
        401,
        "unauthorized",
        "has no sentry_key",
    )
    _error(
        _post(ingest_client, pid, body, {"X-Sentry-Auth": "Sentry sentry_key=bad-key!"}),
        401,
        "unauthorized",
        "malformed",
    )
    _error(_post(ingest_client, pid, body, sentry_auth(other_key)), 403, "forbidden")
    _error(_post(ingest_client, pid, body, sentry_auth("f" * 32)), 403, "forbidden")
    _error(_post(ingest_client, 999999, body, sentry_auth(key)), 403, "forbidden")
    state.ingest.writer.drain()
    assert _logs(clickhouse, pid) == [] and _logs(clickhouse, other_pid) == []


def test_a_key_with_a_trailing_newline_is_malformed_not_someone_elses(
    state, ingest_client, project
):
    # "$" matched before the newline: the key was looked up, cached and answered 403.
    pid, key = project
    body = log_envelope([_log("x")])
    resp = _post(ingest_client, pid, body, query=f"sentry_key={key}%0A")
    _error(resp, 401, "unauthorized", "malformed")


def test_a_key_that_cannot_be_read_while_the_database_is_down_is_503(state, project, clickhouse):
    # A key not in the cache was a 500 (and a traceback per request) with the relational
    # store down: SDKs must be told to come back.
    from errortrack import db
    from errortrack.state import AppState
    from tests.support import free_port

    pid, key = project
    dead = db.make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/x")
    st = AppState.build(state.settings, engine=dead, clickhouse=clickhouse, clock=state.clock)
    client = falcon.testing.TestClient(create_server_app(state=st))
    try:
        resp = _post(client, pid, log_envelope([_log("x")]), sentry_auth(key))
        _error(resp, 503, "unavailable", "project keys cannot be read")
        assert resp.headers["Retry-After"] == "5"
    finally:
        st.ingest.writer.spool.close()
        dead.dispose()


def test_a_key_that_cannot_be_read_while_the_pool_is_busy_is_503(state, project, clickhouse):
    # An exhausted pool raises SQLAlchemy's TimeoutError, which is no DBAPIError: a 500.
    import sqlalchemy as sa

    from errortrack.state import AppState

    pid, key = project
    busy = sa.create_engine(state.engine.url, pool_size=1, max_overflow=0, pool_timeout=0.2)
    st = AppState.build(state.settings, engine=busy, clickhouse=clickhouse, clock=state.clock)
    client = falcon.testing.TestClient(create_server_app(state=st))
    held = busy.connect()  # the one connection, taken
    try:
        resp = _post(client, pid, log_envelope([_log("x")]), sentry_auth(key))
        _error(resp, 503, "unavailable", "project keys cannot be read")
    finally:
        held.close()
        st.ingest.writer.spool.close()
        busy.dispose()


def test_a_dsn_that_is_no_url_is_401_like_any_malformed_auth(state, ingest_client, project):
    pid, key = project
    for dsn in ("http://[oops@127.0.0.1/1", f"http://{key}@[::1/{pid}"):  # urlsplit refuses
        resp = _post(ingest_client, pid, log_envelope([_log("x")], header={"dsn": dsn}))
        _error(resp, 401, "unauthorized", "malformed dsn")
        assert resp.json["error"]["field"] == "dsn"


def test_disabled_key_is_403_once_the_cache_expires(state, project):
    from errortrack.models import ProjectKey

    pid, key = project
    seconds = [0.0]
    ingest = runtime.build(state).ingest
    ingest.keys.clock = lambda: seconds[0]
    assert auth.authorize(ingest.key_info(key), pid).project_id == pid
    with state.sessions() as session:
        session.query(ProjectKey).filter_by(public_key=key).update({"is_active": False})
        session.commit()
    assert (
        auth.authorize(ingest.key_info(key), pid).project_id == pid
    )  # cached: no store hit per request
    seconds[0] += ingest.keys.ttl + 1
    with pytest.raises(Exception) as info:
        auth.authorize(ingest.key_info(key), pid)
    assert getattr(info.value, "status", None) == 403


def test_malformed_bodies_are_400_and_store_nothing(state, ingest_client, project, clickhouse):
    pid, key = project
    auth = sentry_auth(key)
    good = log_envelope([_log("fine")])
    cases = [
        (good[:-20], "truncated"),
        (b'{}\n{"type":"log","length":3}\n{"items":[]}\n', "not followed by a newline"),
        (b'{}\n{"type":"log"}\n{"items": [1,}\n', "log item payload is not valid JSON"),
        (b'{}\n{"type":"log"}\n{"items": 3}\n', "must be an object"),
        (good + b'{"type":"log"}\n{"items":[1]}', "log 0 is not a JSON object"),
    ]
    for body, text in cases:
        _error(_post(ingest_client, pid, body, auth), 400, "bad_request", text)
    _error(
        _post(ingest_client, pid, b"\x00garbage", {**auth, "Content-Encoding": "gzip"}),
        400,
        "bad_request",
        "not valid gzip",
    )
    # Not malformed: a coding this server does not read (RFC 9110 15.5.16), as the
    # management API answers it, with the codings it takes.
    lz4 = _post(ingest_client, pid, good, {**auth, "Content-Encoding": "lz4"})
    _error(lz4, 415, "unsupported_media_type", "unsupported Content-Encoding")
    assert lz4.json["error"]["field"] == "Content-Encoding"
    assert lz4.headers["Accept-Encoding"] == "gzip, x-gzip, deflate, br, zstd, identity"
    assert lz4.headers["Access-Control-Allow-Origin"] == "*"
    state.ingest.writer.drain()
    assert _logs(clickhouse, pid) == []


def test_oversize_body_is_413(ingest_client_with, project):
    _, client = ingest_client_with(max_body_bytes=10_000)
    pid, key = project
    big = log_envelope([_log("y" * 20_000)])
    _error(_post(client, pid, big, sentry_auth(key)), 413, "payload_too_large")
    bomb = ENCODERS["gzip"](b"{}\n" + b" " * 10_000_000)
    assert len(bomb) < 20_000
    _error(
        _post(client, pid, bomb, {**sentry_auth(key), "Content-Encoding": "gzip"}),
        413,
        "payload_too_large",
    )


def test_unknown_items_are_dropped_and_counted(state, ingest_client, project, clickhouse):
    pid, key = project
    before = DROPPED.snapshot().get("check_in", 0)
    body = b'{"event_id":"9ec79c33ec9942ab8353589fcb2e04dc"}\n{"type":"check_in"}\n{"x":1}\n{"type":"client_report","length":2}\n{}'
    resp = _post(ingest_client, pid, body, sentry_auth(key))
    assert resp.status_code == 200 and resp.json == {}
    assert DROPPED.snapshot()["check_in"] == before + 1


def test_a_refused_envelope_counts_no_dropped_items(state, ingest_client, project):
    pid, key = project
    before = DROPPED.snapshot().get("check_in", 0)
    body = b'{}\n{"type":"check_in"}\n{"x":1}\n{"type":"log"}\n{"items":[1]}\n'
    _error(_post(ingest_client, pid, body, sentry_auth(key)), 400, "bad_request")
    assert DROPPED.snapshot().get("check_in", 0) == before


def test_event_id_is_answered_for_events(state, ingest_client, project):
    pid, key = project
    body = b'{"event_id":"9ec79c33ec9942ab8353589fcb2e04dc"}\n{"type":"event"}\n{"event_id":"9ec79c33ec9942ab8353589fcb2e04dc","message":"boom"}\n'
    resp = _post(ingest_client, pid, body, sentry_auth(key))
    assert resp.status_code == 200 and resp.json == {"id": "9ec79c33ec9942ab8353589fcb2e04dc"}
    store = _post(
        ingest_client,
        pid,
        b'{"event_id":"0123456789abcdef0123456789abcdef","message":"x"}',
        sentry_auth(key),
        path="store/",
    )
    assert store.status_code == 200 and store.json == {"id": "0123456789abcdef0123456789abcdef"}
    _error(
        _post(ingest_client, pid, b"{nope", sentry_auth(key), path="store/"),
        400,
        "bad_request",
        "not valid JSON",
    )


def test_store_reads_the_legacy_body_forms_as_relay_does(state, ingest_client, project, clickhouse):
    """raven clients post base64 of zlib-compressed JSON (or of plain JSON) to /store/,
    with no Content-Encoding; an envelope posted there with its content type is read as
    one. Each is stored; a body that is base64 of neither, or inflates past the cap, is
    refused and stores nothing."""
    import base64
    import zlib

    pid, key = project
    ids = [f"{n:032x}" for n in range(1, 5)]

    def event(n):
        return orjson.dumps({"event_id": ids[n], "message": f"legacy {n}", "level": "error"})

    forms = [
        base64.b64encode(zlib.compress(event(0))),
        base64.b64encode(event(1)) + b"\n",
        ENCODERS["gzip"](base64.b64encode(zlib.compress(event(2)))),  # and an HTTP encoding
    ]
    for n, body in enumerate(forms):
        headers = {**sentry_auth(key), **({"Content-Encoding": "gzip"} if n == 2 else {})}
        resp = _post(ingest_client, pid, body, headers, path="store/")
        assert resp.status_code == 200 and resp.json == {"id": ids[n]}, resp.text
    envelope = orjson.dumps({"event_id": ids[3]}) + b'\n{"type":"event"}\n' + event(3) + b"\n"
    resp = _post(
        ingest_client,
        pid,
        envelope,
        {**sentry_auth(key), "Content-Type": "application/x-sentry-envelope"},
        path="store/",
    )
    assert resp.status_code == 200 and resp.json == {"id": ids[3]}, resp.text

    not_zlib = base64.b64encode(b"\x00\x01 neither JSON nor zlib \xff")
    _error(
        _post(ingest_client, pid, not_zlib, sentry_auth(key), path="store/"),
        400,
        "bad_request",
        "body is base64, but neither of JSON nor of zlib-compressed JSON",
    )
    # JSON that is also valid base64 is still refused for what it is.
    _error(
        _post(ingest_client, pid, b"null", sentry_auth(key), path="store/"),
        400,
        "bad_request",
        "must be a JSON object",
    )
    bomb = base64.b64encode(zlib.compress(b"{" + b" " * (state.settings.max_body_bytes + 1)))
    assert len(bomb) < state.settings.max_body_bytes
    _error(
        _post(ingest_client, pid, bomb, sentry_auth(key), path="store/"),
        413,
        "payload_too_large",
    )
    state.ingest.writer.drain()
    stored = clickhouse.query_rows(
        "SELECT event_id FROM events WHERE project_id = {p:UInt64} ORDER BY event_id",
        parameters={"p": pid},
    )
    assert [str(r[0]).replace("-", "") for r in stored] == ids


def test_cors_preflight(ingest_client):
    resp = ingest_client.simulate_options(
        "/api/1/envelope/",
        headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"},
    )
    assert resp.status_code == 200
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    allowed = resp.headers["Access-Control-Allow-Headers"]
    for name in ("x-sentry-auth", "content-encoding", "content-type"):
        assert name in allowed


def test_every_ingest_answer_is_readable_by_a_browser(ingest_client):
    # A method the route does not serve and a malformed project id: without these
    # headers a browser SDK sees a CORS failure, not the status (the 405 had none).
    for method, path in (
        ("GET", "/api/1/envelope/"),
        ("PUT", "/api/1/store/"),
        ("FOO", "/api/1/envelope/"),
        ("POST", "/api/abc/envelope/"),
    ):
        resp = ingest_client.simulate_request(method, path)
        assert resp.status_code in (404, 405), (method, path, resp.status_code)
        assert resp.headers["Access-Control-Allow-Origin"] == "*", (method, path)
        assert "retry-after" in resp.headers["Access-Control-Expose-Headers"]
        assert set(resp.json["error"]) >= {"code", "message"}
    # The probe is no ingest path: no CORS there.
    assert "Access-Control-Allow-Origin" not in ingest_client.simulate_get("/readyz").headers


def test_rate_limit_answers_429_with_sentry_headers(ingest_client_with, project, clickhouse):
    st, client = ingest_client_with(rate_limit_per_second=5)
    pid, key = project
    assert (
        _post(
            client, pid, log_envelope([_log(str(i)) for i in range(5)]), sentry_auth(key)
        ).status_code
        == 200
    )
    assert _post(client, pid, log_envelope([_log("a")]), sentry_auth(key)).status_code == 200
    resp = _post(client, pid, log_envelope([_log("b")]), sentry_auth(key))
    _error(resp, 429, "rate_limited")
    assert int(resp.headers["Retry-After"]) >= 1
    # Named on the answer itself, or a browser SDK cannot read them.
    exposed = resp.headers["Access-Control-Expose-Headers"]
    assert "x-sentry-rate-limits" in exposed and "retry-after" in exposed
    assert resp.headers["X-Sentry-Rate-Limits"].endswith(":log_item:project:rate_limited")
    st.ingest.writer.drain()
    assert sorted(r[0] for r in _logs(clickhouse, pid)) == ["0", "1", "2", "3", "4", "a"]


def test_a_burst_of_logs_over_the_limit_does_not_stop_errors(
    ingest_client_with, project, clickhouse
):
    # One bucket for every item, answered "all categories", made SDKs stop sending a
    # project's errors for as long as a logs burst's debt lasted (49 s for this one).
    # And an envelope holding an error beside logs over the limit was refused whole, so
    # the error was lost: now only the logs go, as Relay drops only limited items.
    st, client = ingest_client_with(rate_limit_per_second=10)
    pid, key = project
    # More than a minute's debt at once: refused, and a smaller burst passes right after.
    huge = _post(client, pid, log_envelope([_log("huge")] * 1000), sentry_auth(key))
    _error(huge, 429, "rate_limited")
    assert huge.headers["X-Sentry-Rate-Limits"] == "1:log_item:project:rate_limited"
    burst = log_envelope([_log(str(i)) for i in range(500)])
    assert _post(client, pid, burst, sentry_auth(key)).status_code == 200
    more = _post(client, pid, log_envelope([_log("more")]), sentry_auth(key))
    _error(more, 429, "rate_limited")
    assert more.headers["X-Sentry-Rate-Limits"] == "49:log_item:project:rate_limited"
    event = b'{"event_id":"' + b"c" * 32 + b'"}\n{"type":"event"}\n{"message":"still here"}\n'
    resp = _post(client, pid, event, sentry_auth(key))
    assert resp.status_code == 200 and resp.json == {"id": "c" * 32}
    assert "X-Sentry-Rate-Limits" not in resp.headers

    before = DROPPED.snapshot()
    session = b'{"type":"session"}\n{"sid":"x"}\n'
    mixed = (
        b'{"event_id":"'
        + b"d" * 32
        + b'"}\n{"type":"event"}\n{"message":"beside logs"}\n'
        + log_envelope([_log("limited")]).split(b"\n", 1)[1]
        + session
    )
    resp = _post(client, pid, mixed, sentry_auth(key))
    assert resp.status_code == 200, resp.text
    assert resp.json == {"id": "d" * 32}
    assert resp.headers["X-Sentry-Rate-Limits"] == "49:log_item:project:rate_limited"
    exposed = resp.headers["Access-Control-Expose-Headers"]
    assert "x-sentry-rate-limits" in exposed
    after = DROPPED.snapshot()
    assert after.get("log:rate_limited", 0) == before.get("log:rate_limited", 0) + 1
    assert after.get("session", 0) == before.get("session", 0) + 1

    # Logs and an item that is dropped anyway: nothing to store, a 429 counting nothing.
    only_logs = log_envelope([_log("limited too")]) + session
    _error(_post(client, pid, only_logs, sentry_auth(key)), 429, "rate_limited")
    assert DROPPED.snapshot() == after

    st.ingest.writer.drain()
    stored = clickhouse.query_rows(
        "SELECT event_id FROM events WHERE project_id = {p:UInt64} ORDER BY event_id",
        parameters={"p": pid},
    )
    assert [r[0].hex for r in stored] == ["c" * 32, "d" * 32]
    bodies = {r[0] for r in _logs(clickhouse, pid)}
    assert len(bodies) == 500 and not bodies & {"huge", "more", "limited", "limited too"}


def test_a_cold_key_is_loaded_once_for_requests_arriving_together(state, project, clickhouse):
    # Drives the app as served (ASGI) on one event loop: 30 requests for a key that is
    # not cached, all in flight at once, must share one relational lookup; so must a
    # wrong key's requests, all refused.
    import asyncio

    import httpx
    import sqlalchemy as sa

    pid, key = project
    app = create_server_app(state=state)
    lookups: list[str] = []

    def count(conn, cursor, statement, *args):
        if "FROM project_keys" in statement:
            lookups.append(statement)

    sa.event.listen(state.engine, "before_cursor_execute", count)
    try:

        async def burst(auth_key: str) -> list[int]:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                body = log_envelope([_log("cold")])
                sends = [
                    c.post(f"/api/{pid}/envelope/", content=body, headers=sentry_auth(auth_key))
                    for _ in range(30)
                ]
                return [r.status_code for r in await asyncio.gather(*sends)]

        assert asyncio.run(burst(key)) == [200] * 30
        assert len(lookups) == 1
        assert asyncio.run(burst("e" * 32)) == [403] * 30
        assert len(lookups) == 2
    finally:
        sa.event.remove(state.engine, "before_cursor_execute", count)
        state.ingest.writer.spool.close()
    state.ingest.writer.drain()
    assert len(_logs(clickhouse, pid)) == 30


def test_a_request_refused_for_a_full_spool_is_not_charged_to_the_rate_limit(
    ingest_client_with, project
):
    st, client = ingest_client_with(rate_limit_per_second=10, spool_max_bytes=1)
    st.ingest.ingest.limiter.clock = lambda: 1000.0  # no refill: only charges move it
    pid, key = project
    # Spooled, and the spool over its 1-byte cap from then on.
    assert _post(client, pid, log_envelope([_log("first")]), sentry_auth(key)).status_code == 200
    refused = [  # 15 items against the 9 left: each 503, none charged
        _post(client, pid, log_envelope([_log(f"{n}-{i}") for i in range(5)]), sentry_auth(key))
        for n in range(3)
    ]
    assert [r.status_code for r in refused] == [503] * 3
    assert "retry-after" in refused[0].headers["Access-Control-Expose-Headers"]


@pytest.mark.parametrize("place", ["dsn", "header, expiring during the upload"])
def test_keys_are_loaded_off_the_event_loop(state, project, place):
    # Neither a key found only in the envelope's dsn nor a header key whose cache entry
    # expires while the body uploads may query the relational store on the loop.
    import asyncio
    import threading

    import httpx
    import sqlalchemy as sa

    pid, key = project
    app = create_server_app(state=state)
    seconds = [0.0]
    state.ingest.ingest.keys.clock = lambda: seconds[0]
    lookups: list[str] = []

    def record(conn, cursor, statement, *args):
        if "FROM project_keys" in statement:
            lookups.append(threading.current_thread().name)

    async def slow_body():
        body = log_envelope([_log("slow")])
        yield body[:10]
        seconds[0] += state.ingest.ingest.keys.ttl + 1
        await asyncio.sleep(0)
        yield body[10:]

    async def send() -> tuple[str, int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            if place == "dsn":
                dsn = log_envelope([_log("dsn")], header={"dsn": f"http://{key}@h/{pid}"})
                resp = await c.post(f"/api/{pid}/envelope/", content=dsn)
            else:
                resp = await c.post(
                    f"/api/{pid}/envelope/", content=slow_body(), headers=sentry_auth(key)
                )
        return threading.current_thread().name, resp.status_code

    sa.event.listen(state.engine, "before_cursor_execute", record)
    try:
        loop_thread, status = asyncio.run(send())
    finally:
        sa.event.remove(state.engine, "before_cursor_execute", record)
        state.ingest.writer.spool.close()
    assert status == 200
    assert len(lookups) == 1 and loop_thread not in lookups, (loop_thread, lookups)


def test_a_browser_standalone_span_is_stored(state, ingest_client, project, clickhouse):
    # @sentry/browser 8-10 send INP/CLS/LCP spans as [{"type":"span"}, spanJSON]: one bare
    # span, no {"items": [...]}. That was a 400, and the whole envelope was lost.
    pid, key = project
    span = {
        "data": {
            "sentry.origin": "auto.http.browser.inp",
            "sentry.op": "ui.interaction.click",
            "sentry.exclusive_time": 128,
            "transaction": "/checkout",
        },
        "description": "body > button.buy",
        "op": "ui.interaction.click",
        "parent_span_id": "9A1B2C3D4E5F6071",
        "span_id": "a1b2c3d4e5f60718",
        "start_timestamp": NOW - 2.5,
        "timestamp": NOW - 2.372,
        "trace_id": "e5b61031519245ccaea3fd1be4e59ce7",
        "origin": "auto.http.browser.inp",
        "exclusive_time": 128,
        "measurements": {"inp": {"value": 128, "unit": "millisecond"}},
        "segment_id": "a1b2c3d4e5f60718",
    }
    header = {"sent_at": dt.datetime.fromtimestamp(NOW, dt.UTC).isoformat()}
    body = orjson.dumps(header) + b'\n{"type":"span"}\n' + orjson.dumps(span)
    resp = _post(ingest_client, pid, body, query=f"sentry_version=7&sentry_key={key}")
    assert resp.status_code == 200, resp.text
    state.ingest.writer.drain()
    rows = clickhouse.query_rows(
        "SELECT trace_id, span_id, parent_span_id, segment_id, segment_name, is_segment, op, "
        "description, toUnixTimestamp64Micro(start_timestamp), duration_us, attr_string, "
        "attr_int FROM spans WHERE project_id = {p:UInt64}",
        parameters={"p": pid},
    )
    assert len(rows) == 1
    trace, span_id, parent, segment, name, is_segment, op, description, start, us, s, i = rows[0]
    assert (trace, span_id, parent, segment) == (
        "e5b61031519245ccaea3fd1be4e59ce7",
        "a1b2c3d4e5f60718",
        "9a1b2c3d4e5f6071",
        "a1b2c3d4e5f60718",
    )
    assert (name, is_segment, op, description) == (
        "/checkout",
        True,
        "ui.interaction.click",
        "body > button.buy",
    )
    assert (start, us) == ((NOW - 2.5) * 1_000_000, 128_000)
    assert s["sentry.origin"] == "auto.http.browser.inp" and i["sentry.exclusive_time"] == 128
    # Still a 400: a bare span without ids, and a payload that is neither form.
    bad = orjson.dumps({k: v for k, v in span.items() if k != "trace_id"})
    resp = _post(ingest_client, pid, b'{}\n{"type":"span"}\n' + bad, sentry_auth(key))
    _error(resp, 400, "bad_request", "trace_id")
    resp = _post(ingest_client, pid, b'{}\n{"type":"span"}\n[1]', sentry_auth(key))
    _error(resp, 400, "bad_request", "items")


def test_items_that_are_not_utf8_are_400_and_store_nothing(
    state, ingest_client, project, clickhouse
):
    # msgspec skips fields a struct does not name (an attribute's "unit") without checking
    # them, and log attributes are stored as sent: a log with a bad byte there got its 200
    # and then made every logs page holding it invalid JSON; pretty-printed, it was a 500.
    # A v2 span with a bad byte in a string was a 500 too.
    pid, key = project
    bad_log = (
        b'{"items": [\n {"timestamp": %d, "level": "info", "body": "x",\n'
        b'  "attributes": {"k": {"value": 1, "type": "integer", "unit": "\xe9"}}}\n]}' % (NOW - 1)
    )
    for payload in (bad_log.replace(b"\n", b""), bad_log):
        item = orjson.dumps({"type": "log", "length": len(payload)})
        resp = _post(ingest_client, pid, b"{}\n" + item + b"\n" + payload, sentry_auth(key))
        _error(resp, 400, "bad_request", "UTF-8")
    span = (
        b'{"version":2,"items":[{"trace_id":"e5b61031519245ccaea3fd1be4e59ce7",'
        b'"span_id":"a1b2c3d4e5f60718","name":"caf\xe9","start_timestamp":%d,'
        b'"end_timestamp":%d,"is_segment":true}]}' % (NOW - 2, NOW - 1)
    )
    item = orjson.dumps({"type": "span", "length": len(span)})
    _error(
        _post(ingest_client, pid, b"{}\n" + item + b"\n" + span, sentry_auth(key)),
        400,
        "bad_request",
        "UTF-8",
    )
    # Text that is UTF-8 goes through, byte for byte.
    good = bad_log.replace(b"\xe9", "é".encode()).replace(b"\n", b"")
    item = orjson.dumps({"type": "log", "length": len(good)})
    assert (
        _post(ingest_client, pid, b"{}\n" + item + b"\n" + good, sentry_auth(key)).status_code
        == 200
    )
    state.ingest.writer.drain()
    [row] = _logs(clickhouse, pid)
    assert orjson.loads(row[5]) == {"k": {"value": 1, "type": "integer", "unit": "é"}}
    assert clickhouse.query_rows("SELECT count() FROM spans")[0][0] == 0


def test_a_log_dated_with_an_rfc3339_string_keeps_its_time(
    state, ingest_client, project, clickhouse
):
    # sentry-go's first releases with logs write time.Time as RFC 3339 in the local zone;
    # such a log was dated at its arrival.
    pid, key = project
    zone = dt.timezone(dt.timedelta(hours=2))
    logged = dt.datetime.fromtimestamp(NOW - 4.25, zone).isoformat()
    logs = [
        _log("go", timestamp=logged),
        _log("nanoseconds", timestamp="2026-01-01T00:00:00.123456789Z"),  # outside the window
        _log("not a time", timestamp="yesterday"),
    ]
    header = {"sent_at": dt.datetime.fromtimestamp(NOW, dt.UTC).isoformat()}
    assert (
        _post(ingest_client, pid, log_envelope(logs, header=header), sentry_auth(key)).status_code
        == 200
    )
    state.ingest.writer.drain()
    stored = {r[0]: (r[7], r[8]) for r in _logs(clickhouse, pid)}
    assert stored["go"][0] == int((NOW - 4.25) * 1_000_000)
    assert stored["not a time"][0] == stored["not a time"][1] == NOW * 1_000_000
    assert stored["nanoseconds"][0] == stored["nanoseconds"][1]


def test_an_event_over_the_event_cap_is_413_and_stores_nothing(
    ingest_client_with, project, clickhouse
):
    # Sentry's 1 MiB per event (ERRORTRACK_MAX_EVENT_BYTES, here 10,000): an 18 MB event
    # was stored whole before (SDK review). The envelope is refused as Relay refuses it,
    # so its logs are not stored either, and the SDK is told.
    st, client = ingest_client_with(max_event_bytes=10_000)
    pid, key = project
    for kind, extra in (("event", {}), ("transaction", {"type": "transaction"})):
        payload = orjson.dumps({"message": "x" * 10_001, **extra})
        item = orjson.dumps({"type": kind, "length": len(payload)})
        logs = log_envelope([_log("beside the big event")]).split(b"\n", 1)[1]
        body = b"{}\n" + item + b"\n" + payload + b"\n" + logs
        resp = _post(client, pid, body, sentry_auth(key))
        _error(resp, 413, "payload_too_large")
        assert f"{kind} item is" in resp.json["error"]["message"]
    resp = client.simulate_post(
        f"/api/{pid}/store/",
        body=orjson.dumps({"message": "x" * 10_001}),
        headers=sentry_auth(key),
    )
    _error(resp, 413, "payload_too_large")
    # At the cap: stored.
    payload = orjson.dumps({"message": "x" * (10_000 - 14)})
    assert len(payload) == 10_000
    ok = _post(
        client,
        pid,
        b"{}\n" + orjson.dumps({"type": "event"}) + b"\n" + payload,
        sentry_auth(key),
    )
    assert ok.status_code == 200, ok.text
    st.ingest.writer.drain()
    assert _logs(clickhouse, pid) == []
    assert clickhouse.query_rows("SELECT count() FROM events")[0][0] == 1


def test_log_and_span_items_over_the_container_cap_are_413_and_store_nothing(
    ingest_client_with, project, clickhouse
):
    # Relay's max_container_size (12 MiB): an envelope's log items together, and its span
    # items together, at most ERRORTRACK_MAX_CONTAINER_BYTES (here 20,000). Before, only
    # the 20 MiB body cap held them, and one log item of 500,000 attributes took 0.4-0.8 s
    # and 350 MB to turn into rows. Refused before any item is read, as an event over its
    # cap is: the error event beside them is not stored either.
    st, client = ingest_client_with(max_container_bytes=20_000)
    pid, key = project
    event = b'{"type":"event"}\n{"message":"beside"}\n'

    def item(kind, payload):
        return orjson.dumps({"type": kind, "length": len(payload)}) + b"\n" + payload + b"\n"

    def logs_payload(size):
        payload = orjson.dumps({"items": [_log("x" * (size - 200))]})
        return payload + b" " * (size - len(payload))

    span = {"trace_id": "a" * 32, "span_id": "b" * 16, "start_timestamp": NOW, "timestamp": NOW}

    def spans_payload(size):
        payload = orjson.dumps({"items": [{**span, "name": "y" * (size - 300)}]})
        return payload + b" " * (size - len(payload))

    for kind, make in (("log", logs_payload), ("span", spans_payload)):
        # Over the cap in one item, and in two items each under it.
        for parts in ([make(20_001)], [make(10_000), make(10_001)]):
            body = b"{}\n" + event + b"".join(item(kind, p) for p in parts)
            resp = _post(client, pid, body, sentry_auth(key))
            _error(resp, 413, "payload_too_large", "ERRORTRACK_MAX_CONTAINER_BYTES")
            assert f"{kind} items" in resp.json["error"]["message"]
        # At the cap (the two kinds counted apart): stored.
    body = b"{}\n" + item("log", logs_payload(20_000)) + item("span", spans_payload(20_000))
    ok = _post(client, pid, body, sentry_auth(key))
    assert ok.status_code == 200, ok.text
    st.ingest.writer.drain()
    assert len(_logs(clickhouse, pid)) == 1
    assert clickhouse.query_rows("SELECT count() FROM spans")[0][0] == 1
    assert clickhouse.query_rows("SELECT count() FROM events")[0][0] == 0


def test_an_envelope_of_two_events_is_400_and_stores_nothing(
    state, ingest_client, project, clickhouse
):
    # The envelope format allows one event or transaction item per envelope (Relay
    # refuses a second); 100,000 one-line events in one envelope took ~2 s of the event
    # loop and ~9 s of grouping. Refused whole, before any item is read: the log beside
    # them is not stored either.
    pid, key = project
    event = b'{"type":"event"}\n{"message":"one"}\n'
    transaction = orjson.dumps(
        {
            "type": "transaction",
            "start_timestamp": NOW,
            "timestamp": NOW,
            "contexts": {"trace": {"trace_id": "a" * 32, "span_id": "b" * 16}},
            "spans": [],
        }
    )
    transaction = b'{"type":"transaction"}\n' + transaction + b"\n"
    logs = log_envelope([_log("beside")]).split(b"\n", 1)[1]
    for items in ((event, event), (event, transaction), (transaction, transaction)):
        body = b"{}\n" + logs + items[0] + items[1]
        resp = _post(ingest_client, pid, body, sentry_auth(key))
        _error(resp, 400, "bad_request", "at most one event or transaction item")
        assert resp.json["error"]["message"].startswith("item 3 (")
    # One of each kind apart: stored.
    for item in (event, transaction):
        assert _post(ingest_client, pid, b"{}\n" + logs + item, sentry_auth(key)).status_code == 200
    state.ingest.writer.drain()
    assert [r[0] for r in _logs(clickhouse, pid)] == ["beside", "beside"]
    assert clickhouse.query_rows("SELECT count() FROM events")[0][0] == 1
    assert clickhouse.query_rows("SELECT count() FROM spans")[0][0] == 1


def test_the_dropped_items_counter_keeps_no_sender_text(ingest_client, project):
    # Item types are the sender's to name, and each new one was a key kept for the
    # process's life: 20,000 items of distinct 1 KB types (20 MiB, a few KB gzipped)
    # kept 20 MB, for good (review, thirtieth session). Sentry's own types are counted
    # by name, any other as "<other>"; /readyz shows the counts.
    pid, key = project
    before = DROPPED.snapshot()
    names = [f"made-up-{i}" for i in range(300)] + ["x" * 1000, "log:junk", "nel"]
    body = b"{}\n" + b"".join(orjson.dumps({"type": n}) + b"\n{}\n" for n in names)
    assert _post(ingest_client, pid, body, sentry_auth(key)).status_code == 200
    after = DROPPED.snapshot()
    added = {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}
    assert added == {"<other>": 302, "nel": 1}
    ready = ingest_client.simulate_get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json["dropped_items"]["<other>"] == after["<other>"]


def test_a_refused_item_of_several_is_named_in_the_message(ingest_client, project, clickhouse):
    # Framing errors named the item; its payload's errors did not, so a sender could not
    # tell which of an envelope's items was wrong (ingest review).
    pid, key = project
    body = log_envelope([_log("fine")]) + b'{"type":"log"}\n{"items":5}\n'
    resp = _post(ingest_client, pid, body, sentry_auth(key))
    _error(resp, 400, "bad_request")
    assert resp.json["error"]["message"].startswith("item 2 (log): log item payload"), resp.text
    alone = _post(ingest_client, pid, b'{}\n{"type":"log"}\n{"items":5}\n', sentry_auth(key))
    assert alone.json["error"]["message"].startswith("log item payload"), alone.text
    assert _logs(clickhouse, pid) == []
