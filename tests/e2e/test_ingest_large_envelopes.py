"""Envelopes over the body cap because of items that are not stored (ingest/skim.py): the
event is kept, the attachment's payload skipped as it arrives; what is kept stays capped."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import subprocess
import sys
import textwrap
import time

import falcon.testing
import orjson
import pytest

from errortrack.errors import PayloadTooLarge
from errortrack.ingest import envelope, skim
from errortrack.ingest.items import DROPPED, HANDLERS
from errortrack.projects.service import dsn
from errortrack.server import create_server_app
from errortrack.state import AppState
from tests.ingest_support import (
    ENCODERS,
    create_project_in,
    query_data_dir,
    sentry_auth,
)
from tests.support import Server, scratch_database, server_env

CAP = 10_000
ENVELOPE_CAP = 300_000
EVENT_ID = "9ec79c33ec9942ab8353589fcb2e04dc"


def _event(message: str = "with attachment") -> bytes:
    return orjson.dumps({"event_id": EVENT_ID, "message": message})


def _item(kind: str, payload: bytes, *, length: bool = True, **header: object) -> bytes:
    fields = {"type": kind, **header}
    if length:
        fields["length"] = len(payload)
    return orjson.dumps(fields) + b"\n" + payload + b"\n"


def _envelope(*items: bytes) -> bytes:
    return orjson.dumps({"event_id": EVENT_ID}) + b"\n" + b"".join(items)


def _noise(size: int) -> bytes:
    # Incompressible, with newlines in it as binary files have.
    return random.Random(size).randbytes(size)


@pytest.fixture
def capped(state, clickhouse):
    small = dataclasses.replace(state.settings, max_body_bytes=CAP, max_envelope_bytes=ENVELOPE_CAP)
    st = AppState.build(small, engine=state.engine, clickhouse=clickhouse, clock=state.clock)
    yield st, falcon.testing.TestClient(create_server_app(state=st))
    st.ingest.writer.spool.close()


def _post(client, pid, key, body, **headers):
    return client.simulate_post(
        f"/api/{pid}/envelope/", body=body, headers={**sentry_auth(key), **headers}
    )


def _events(clickhouse, pid):
    return clickhouse.query_rows(
        "SELECT toString(event_id), payload FROM events WHERE project_id = {p:UInt64}", {"p": pid}
    )


@pytest.mark.parametrize("encoding", ["identity", "gzip", "deflate", "br"])
def test_an_event_with_an_attachment_over_the_cap_is_stored(capped, project, clickhouse, encoding):
    st, client = capped
    pid, key = project
    before = DROPPED.snapshot().get("attachment", 0)
    body = _envelope(
        _item("attachment", _noise(120_000), filename="app.log"),
        _item("event", _event()),
        _item("attachment", _noise(50_000), filename="second.bin"),
    )
    wire = ENCODERS[encoding](body)
    assert len(wire) > CAP  # over the cap on the wire too: read as it arrives
    resp = _post(client, pid, key, wire, **{"Content-Encoding": encoding})
    assert resp.status_code == 200, resp.text
    assert resp.json == {"id": EVENT_ID}
    st.ingest.writer.drain()
    ((event_id, payload),) = _events(clickhouse, pid)
    assert event_id.replace("-", "") == EVENT_ID and orjson.loads(payload)["message"] == (
        "with attachment"
    )
    assert DROPPED.snapshot()["attachment"] == before + 2


def test_a_body_that_expands_past_the_cap_is_skimmed_from_memory(capped, project, clickhouse):
    """zstd included: compressed under the cap, over it once decompressed."""
    st, client = capped
    pid, key = project
    body = _envelope(_item("event", _event()), _item("attachment", b"\0" * 200_000))
    for encoding in ("zstd", "gzip"):
        wire = ENCODERS[encoding](body)
        assert len(wire) < CAP
        resp = _post(client, pid, key, wire, **{"Content-Encoding": encoding})
        assert resp.status_code == 200, (encoding, resp.text)
    st.ingest.writer.drain()
    assert len(_events(clickhouse, pid)) == 1  # the same event id twice: stored once


def test_what_is_kept_stays_capped_and_the_envelope_too(capped, project, clickhouse):
    st, client = capped
    pid, key = project
    cases = {
        # Items that are stored count, however many attachments come with them.
        "event over the cap": _envelope(
            _item("attachment", _noise(20_000)), _item("event", _event("x" * 12_000))
        ),
        # Without a length an item runs to the next newline: it is read, so it counts.
        "attachment without length": _envelope(
            _item("event", _event()), _item("attachment", b"a" * 20_000, length=False)
        ),
        "envelope over its cap": _envelope(
            _item("event", _event()), _item("attachment", _noise(ENVELOPE_CAP))
        ),
    }
    for name, body in cases.items():
        resp = _post(client, pid, key, body)
        assert resp.status_code == 413, (name, resp.text)
        assert resp.json["error"]["code"] == "payload_too_large", name
    # zstd is not read as it arrives: over the cap on the wire, it stays a 413.
    wire = ENCODERS["zstd"](
        _envelope(_item("event", _event()), _item("attachment", _noise(50_000)))
    )
    assert CAP < len(wire) < ENVELOPE_CAP
    resp = _post(client, pid, key, wire, **{"Content-Encoding": "zstd"})
    assert resp.status_code == 413 and "zstd" in resp.json["error"]["message"], resp.text
    st.ingest.writer.drain()
    assert _events(clickhouse, pid) == []


def test_an_attachment_named_with_a_lone_surrogate_is_skipped_too(capped, project, clickhouse):
    """sentry-sdk copies the file name into the item header; a lone surrogate escape
    there (a name decoded with surrogateescape) made the skimmer keep the attachment."""
    st, client = capped
    pid, key = project
    header = b'{"type":"attachment","length":%d,"filename":"core\\ud800.bin"}' % 50_000
    body = _envelope(_item("event", _event())) + header + b"\n" + _noise(50_000) + b"\n"
    resp = _post(client, pid, key, body)
    assert resp.status_code == 200, resp.text
    st.ingest.writer.drain()
    assert len(_events(clickhouse, pid)) == 1


def test_a_kept_header_is_repaired_once_on_the_skim_path(capped, project, clickhouse, monkeypatch):
    """The skimmer repaired a kept item's header and kept it as sent, so envelope.parse
    repaired it again, charging the request's repair budget twice: an envelope taken
    directly was refused once an attachment sent it down the skim path (diff review,
    thirtieth session)."""
    from errortrack.ingest import surrogates

    monkeypatch.setattr(surrogates, "MAX_REPAIR", 10_000)
    st, client = capped
    pid, key = project
    header = b'{"type":"event","length":%d,"note":"%s"}' % (len(_event()), b"\\ud800" * 1_000)
    kept = header + b"\n" + _event() + b"\n"
    assert len(header) > surrogates.MAX_REPAIR // 2
    resp = _post(client, pid, key, _envelope(kept, _item("attachment", _noise(30_000))))
    assert resp.status_code == 200, resp.text
    st.ingest.writer.drain()
    assert len(_events(clickhouse, pid)) == 1


def test_a_skipped_payload_must_be_whole(capped, project, clickhouse):
    st, client = capped
    pid, key = project
    attachment = _noise(30_000)
    header = orjson.dumps({"type": "attachment", "length": len(attachment) + 5})
    truncated = _envelope(_item("event", _event())) + header + b"\n" + attachment
    resp = _post(client, pid, key, truncated)
    assert resp.status_code == 400, resp.text
    assert "item 2 (attachment) is truncated" in resp.json["error"]["message"]
    short = orjson.dumps({"type": "attachment", "length": len(attachment) - 5})
    wrong = _envelope(short + b"\n" + attachment + b"\n", _item("event", _event()))
    resp = _post(client, pid, key, wrong)
    assert resp.status_code == 400, resp.text
    assert "item 1 (attachment)" in resp.json["error"]["message"]
    assert "is the length wrong" in resp.json["error"]["message"]
    # A kept item's errors are envelope.parse's own, numbered as sent.
    bad = _envelope(_item("attachment", _noise(30_000)), _item("event", b"{nope"))
    resp = _post(client, pid, key, bad)
    assert resp.status_code == 400 and "event" in resp.json["error"]["message"], resp.text
    st.ingest.writer.drain()
    assert _events(clickhouse, pid) == []


def test_a_declared_length_over_the_envelope_cap_is_refused_before_reading():
    class Unread:
        async def read(self, size: int | None = None, /) -> bytes:
            raise AssertionError("the body was read")

    with pytest.raises(PayloadTooLarge):
        asyncio.run(skim.read_envelope(Unread(), ENVELOPE_CAP + 1, None, bool, CAP, ENVELOPE_CAP))


def test_the_skimmer_gives_the_same_envelope_however_the_body_is_cut():
    """Fed in pieces of every size from 1 byte, the kept envelope parses into the items
    sent, each not stored left with its header and no payload."""
    items = [
        _item("event", _event()),
        _item("attachment", _noise(3_000), filename="a\nb.bin"),
        b"\n",  # a blank line between items
        _item("log", b'{"items":[{"body":"x"}]}', length=False),
        _item("attachment", b""),
        _item("replay_recording", _noise(500)),
        _item("transaction", b'{"x":1}'),
    ]
    body = _envelope(*items)[:-1]  # no final newline
    expected = envelope.parse(body)
    for size in (1, 2, 7, 64, 4096, len(body)):
        skimmer = skim.Skimmer(HANDLERS.__contains__, 1_000, 10_000)
        for i in range(0, len(body), size):
            skimmer.feed(body[i : i + size])
        kept = envelope.parse(skimmer.end())
        assert kept.header == expected.header
        assert len(kept.items) == len(expected.items)
        for (got_header, got), (sent_header, sent) in zip(kept.items, expected.items, strict=True):
            assert got_header["type"] == sent_header["type"]
            if sent_header["type"] in HANDLERS:
                assert (got_header, got) == (sent_header, sent)
            else:
                assert got == b"" and got_header["length"] == 0
                assert got_header.get("filename") == sent_header.get("filename")


_SDK_APP = textwrap.dedent(
    """
    import os, sys
    import sentry_sdk
    sentry_sdk.init(dsn=sys.argv[1], default_integrations=False)
    sentry_sdk.get_isolation_scope().add_attachment(
        bytes=os.urandom(int(sys.argv[2])), filename="core.bin"
    )
    print(sentry_sdk.capture_message("crashed with a large attachment"))
    sentry_sdk.flush()
    """
)


def test_the_python_sdk_event_with_a_large_attachment_is_stored(tmp_path):
    """The real sentry-sdk (brotli, over a socket) sends a 3 MB attachment to a server whose
    body cap is 1 MB: its event is stored."""
    data = tmp_path / "data"
    with scratch_database(tmp_path) as url:
        env = server_env(data, url, ERRORTRACK_MAX_BODY_BYTES="1000000")
        server = Server(env).start()
        try:
            pid, key = create_project_in(url)
            done = subprocess.run(
                [sys.executable, "-c", _SDK_APP, dsn(server.url, key, pid), "3000000"],
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, "SENTRY_DEBUG": "0"},
            )
            assert done.returncode == 0, done.stderr
        finally:
            server.stop()
        assert "Traceback" not in server.log(), server.log()
    event_id = done.stdout.strip()
    rows = query_data_dir(
        data, f"SELECT toString(event_id) AS id FROM events WHERE project_id = {pid}"
    )
    assert [r["id"].replace("-", "") for r in rows] == [event_id]


class _Memory:
    """A request body already in memory, read as the ASGI stream is (``skim``)."""

    def __init__(self, wire: bytes) -> None:
        self.wire = wire
        self.pos = 0

    async def read(self, size: int | None = None, /) -> bytes:
        chunk = self.wire[self.pos : self.pos + (size or len(self.wire))]
        self.pos += len(chunk)
        return chunk


def test_a_flood_of_newlines_does_not_hold_the_event_loop():
    """A 30 MB attachment of zeros and 2 MB of blank lines, gzipped to ~60 KB: decoded in
    one go, a Python step per newline, it held the loop for seconds (diff review)."""
    import gzip

    cap = 3_000_000
    body = _envelope(_item("event", _event()), _item("attachment", b"\0" * 30_000_000))
    wire = gzip.compress(body + b"\n" * 2_000_000)
    assert len(wire) < cap

    async def main() -> tuple[bytes, float]:
        gaps: list[float] = []
        done = asyncio.Event()

        async def tick() -> None:
            last = time.monotonic()
            while not done.is_set():
                await asyncio.sleep(0.005)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        ticker = asyncio.create_task(tick())
        await asyncio.sleep(0.02)  # the ticker runs before the work starts
        kept = await skim.read_envelope(
            _Memory(wire), len(wire), "gzip", HANDLERS.__contains__, cap, 50_000_000
        )
        done.set()
        await ticker
        return kept, max(gaps)

    kept, longest = asyncio.run(main())
    assert [h["type"] for h, _ in envelope.parse(kept).items] == ["event", "attachment"]
    assert longest < 0.5, longest


def _logs_item(count: int) -> bytes:
    return _item("log", b'{"items":[' + b",".join([b"{}"] * count) + b"]}")


def test_an_envelope_of_more_rows_than_the_cap_is_413_and_stores_nothing(
    state, ingest_client, project, clickhouse
):
    # Empty logs: three bytes each on the wire, a ~250-byte row each. 20 MiB of them
    # (20 KB gzipped) made 7 M rows, held the event loop for 21 s and took the worker to
    # 5 GB; an envelope now makes at most MAX_ENVELOPE_ROWS rows.
    from errortrack.ingest.items import MAX_ENVELOPE_ROWS

    pid, key = project
    for body in (
        _envelope(_logs_item(MAX_ENVELOPE_ROWS + 1)),
        # The cap is the envelope's: two items under it each, over it together.
        _envelope(_logs_item(MAX_ENVELOPE_ROWS // 2), _logs_item(MAX_ENVELOPE_ROWS // 2 + 1)),
        _envelope(
            _logs_item(MAX_ENVELOPE_ROWS),
            _item(
                "transaction",
                orjson.dumps(
                    {
                        "type": "transaction",
                        "contexts": {"trace": {"trace_id": "ab" * 16, "span_id": "1" * 16}},
                    }
                ),
            ),
        ),
    ):
        resp = _post(ingest_client, pid, key, body)
        assert resp.status_code == 413, resp.text
        assert "more than 100,000 logs, spans and events" in resp.json["error"]["message"]
    resp = _post(ingest_client, pid, key, _envelope(_logs_item(MAX_ENVELOPE_ROWS)))
    assert resp.status_code == 200, resp.text
    state.ingest.writer.drain()
    [(stored,)] = clickhouse.query_rows(
        "SELECT count() FROM logs WHERE project_id = {p:UInt64}", {"p": pid}
    )
    assert stored == MAX_ENVELOPE_ROWS


def test_an_envelope_of_more_items_than_the_cap_is_413_and_stores_nothing(
    state, ingest_client, project, clickhouse
):
    # Items that make no row were not counted: 20 MiB of '{"type":"x"}' items (20 KB
    # gzipped) held the event loop for 16 s and took 1.3 GB, for a 200 (DoS review,
    # twenty-ninth session). An envelope now holds at most MAX_ENVELOPE_ITEMS items.
    from errortrack.ingest.envelope import MAX_ENVELOPE_ITEMS

    pid, key = project
    log = _logs_item(1)
    dropped = b'{"type":"client_report"}\n{}\n'
    resp = _post(ingest_client, pid, key, _envelope(log, dropped * MAX_ENVELOPE_ITEMS))
    assert resp.status_code == 413, resp.text
    assert resp.json["error"]["message"] == (
        "the envelope holds more than 100,000 items; send fewer per envelope"
    )
    resp = _post(ingest_client, pid, key, _envelope(log, dropped * (MAX_ENVELOPE_ITEMS - 1)))
    assert resp.status_code == 200, resp.text
    state.ingest.writer.drain()
    [(stored,)] = clickhouse.query_rows(
        "SELECT count() FROM logs WHERE project_id = {p:UInt64}", {"p": pid}
    )
    assert stored == 1


def test_an_envelope_over_the_body_cap_is_refused_at_its_item_past_the_cap():
    # Over the body cap, the skimmer read every item header (a JSON read each) before
    # parse's 413: 1.3 M tiny items beside an attachment, 42 KB gzipped, held the loop
    # 3.5-4.4 s (diff review, twenty-ninth session). It refuses the item past the cap.
    import gzip

    from errortrack.errors import PayloadTooLarge

    dropped = b'{"type":"client_report"}\n{}\n'
    body = _envelope(
        _item("attachment", _noise(5_000_000)), dropped * (envelope.MAX_ENVELOPE_ITEMS + 5)
    )
    wire = gzip.compress(body)

    def read(wire: bytes) -> bytes:
        return asyncio.run(
            skim.read_envelope(
                _Memory(wire), len(wire), "gzip", HANDLERS.__contains__, 2**22, 2**24
            )
        )

    with pytest.raises(PayloadTooLarge, match="more than 100,000 items"):
        read(wire)
    # One fewer than the cap reads through (the attachment's payload skipped).
    body = _envelope(
        _item("attachment", _noise(5_000_000)), dropped * (envelope.MAX_ENVELOPE_ITEMS - 1)
    )
    wire = gzip.compress(body)
    assert len(envelope.parse(read(wire)).items) == envelope.MAX_ENVELOPE_ITEMS


def _nested_header(size: int, extra: bytes = b"") -> bytes:
    """A header line of ``size`` bytes: an object of nested empty arrays (each a Python
    object or two once read: what a header line over the cap costs is the reading), then
    ``extra`` fields."""
    head, fill, tail = b'{"a":[', b"[[]],", b"]" + extra + b"}"
    count = (size - len(head) - len(tail)) // len(fill)
    line = head + (fill * count)[:-1]
    return line + b" " * (size - len(line) - len(tail)) + tail


@pytest.mark.parametrize("where", ["envelope", "item"])
def test_a_header_line_over_its_cap_is_413_before_it_is_read(where, ingest_client, project):
    import gzip

    assert len(_nested_header(envelope.MAX_HEADER_BYTES, b',"x":1')) == envelope.MAX_HEADER_BYTES

    def body(size: int) -> bytes:
        if where == "envelope":
            return _nested_header(size) + b"\n" + _item("attachment", _noise(100))
        return b"{}\n" + _nested_header(size, b',"type":"session"') + b"\n{}\n"

    assert envelope.parse(body(envelope.MAX_HEADER_BYTES)).items
    with pytest.raises(PayloadTooLarge, match=r"header.* is over 65,536 bytes"):
        envelope.parse(body(envelope.MAX_HEADER_BYTES + 1))
    # The skim path (an envelope over the body cap) refuses it as it arrives, at the
    # header's cap, not at the body's.
    wire = gzip.compress(body(20 * 2**20) + _item("attachment", _noise(5_000)))
    with pytest.raises(PayloadTooLarge, match="is over 65,536 bytes"):
        asyncio.run(
            skim.read_envelope(
                _Memory(wire), len(wire), "gzip", HANDLERS.__contains__, 2**22, 2**26
            )
        )
    # Served, with no key anywhere but the envelope: a 413, nothing read past the cap.
    pid, _ = project
    answer = ingest_client.simulate_post(
        f"/api/{pid}/envelope/", body=body(envelope.MAX_HEADER_BYTES + 1)
    )
    assert answer.status_code == 413, answer.text
    assert "is over 65,536 bytes" in answer.json["error"]["message"]
