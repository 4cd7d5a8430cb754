"""Envelope parsing: every captured SDK request, framing variants and malformed cases."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from errortrack.errors import BadRequest
from errortrack.ingest.envelope import parse

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sdk-envelopes"

# What each captured request holds: item types in order (read off the files by hand).
LOGS, SESSION, EVENT, SPAN, TXN = ["log"], ["session"], ["event"], ["span"], ["transaction"]
EXPECTED = {
    **dict.fromkeys(
        ["0001", "0002", "0003", "0005", "0010", "0015", "0016", "0017", "0018", "0022", "0057"],
        LOGS,
    ),
    **dict.fromkeys(["0006", "0007", "0008", "0011", "0012", "0013", "0019", "0020"], EVENT),
    **dict.fromkeys(["0004", "0009", "0014", "0021", "0048", "0051"], TXN),
    **dict.fromkeys(
        ["0023", "0025", "0028", "0038", "0043", "0050", "0053", "0054", "0055", "0058", "0059"],
        LOGS,
    ),
    **dict.fromkeys(
        [
            "0024",
            "0026",
            "0029",
            "0030",
            "0033",
            "0034",
            "0037",
            "0039",
            "0041",
            "0044",
            "0047",
            "0049",
            "0052",
            "0056",
            "0060",
        ],
        SESSION,
    ),
    **dict.fromkeys(["0031", "0032", "0035", "0040", "0045", "0046"], EVENT),
    **dict.fromkeys(["0027", "0036", "0042"], SPAN),
}
LOG_COUNTS = {"0057": 150, "0058": 100, "0059": 50, "0001": 7, "0023": 7, "0015": 6}


def _fixtures() -> list[Path]:
    return sorted(FIXTURES.glob("*/*.envelope"))


def test_every_fixture_is_listed():
    assert {p.name[:4] for p in _fixtures()} == set(EXPECTED)


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_fixture_parses_into_expected_items(path: Path):
    env = parse(path.read_bytes())
    assert [h["type"] for h, _ in env.items] == EXPECTED[path.name[:4]]
    meta = json.loads(path.with_name(path.name.replace(".envelope", ".request.json")).read_text())
    assert meta["path"] == "/api/42/envelope/"
    for header, payload in env.items:
        if "length" in header:
            assert len(payload) == header["length"]
        body = orjson.loads(payload)  # each payload is exactly one JSON document
        if header["type"] == "log":
            assert len(body["items"]) == header["item_count"]
            expected = LOG_COUNTS.get(path.name[:4])
            if expected is not None:
                assert len(body["items"]) == expected
    if path.name[:4] in {"0031", "0004"}:
        assert len(env.header["event_id"]) == 32


def test_length_lets_payload_hold_newlines_and_last_item_may_lack_newline():
    payload = b'{"a":\n1}'
    body = b'{}\n{"type":"attachment","length":8}\n' + payload + b'\n{"type":"log"}\n{"items":[]}'
    env = parse(body)
    assert env.items == [
        ({"type": "attachment", "length": 8}, payload),
        ({"type": "log"}, b'{"items":[]}'),
    ]


def test_with_length_and_no_trailing_newline():
    env = parse(b'{}\n{"type":"log","length":12}\n{"items":[]}')
    assert env.items[0][1] == b'{"items":[]}'


def test_header_only_envelope_has_no_items():
    assert parse(b'{"event_id":"9ec79c33ec9942ab8353589fcb2e04dc"}\n').items == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "empty envelope"),
        (b"not json\n", "envelope header (line 1) is not valid JSON"),
        (b"[1]\n", "envelope header (line 1) must be a JSON object"),
        (b'{}\n{"type":"log"\n{}', "item 1 header is not valid JSON"),
        (b'{}\n{"length":2}\n{}', "item 1 header has no type"),
        (
            b'{}\n{"type":"log","length":500}\n{"items":[]}',
            "item 1 (log) is truncated: its header says length 500, but only 12 bytes follow",
        ),
        (
            b'{}\n{"type":"log","length":5}\n{"items":[]}\n',
            "item 1 (log): the payload of length 5 is not followed by a newline; is the length wrong?",
        ),
        (
            b'{}\n{"type":"log","length":-1}\n{}',
            "item 1 (log): length must be a whole number of bytes, got -1",
        ),
        (b'{}\n{"type":"log","length":"3"}\n{}', "length must be a whole number"),
    ],
)
def test_malformed_envelopes_say_what_is_wrong(body: bytes, message: str):
    with pytest.raises(BadRequest) as info:
        parse(body)
    assert message in info.value.message
    assert info.value.status == 400
