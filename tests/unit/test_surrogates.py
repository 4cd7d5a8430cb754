"""Lone UTF-16 surrogate escapes in JSON text become U+FFFD (errortrack.ingest.surrogates)."""

import json

import orjson
import pytest

from errortrack.ingest.surrogates import replace_lone_surrogates


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"a\\ud800b"', '"a\\ufffdb"'),  # a lone high half
        ('"a\\udc00b"', '"a\\ufffdb"'),  # a lone low half
        ('"\\ud800"', '"\\ufffd"'),  # at the ends
        ('"\\ud800\\ud83d\\ude00"', '"\\ufffd\\ud83d\\ude00"'),  # lone, then a pair
        ('"\\ude00\\ud83d"', '"\\ufffd\\ufffd"'),  # halves in the wrong order
        ('"\\uD800x"', '"\\ufffdx"'),  # upper-case hex digits
        # An escaped backslash then "ud800" is the text \ud800, not an escape: kept;
        # the escape after it is one.
        ('"\\\\ud800\\ud800"', '"\\\\ud800\\ufffd"'),
    ],
)
def test_lone_halves_become_the_replacement_character(text, expected):
    fixed = replace_lone_surrogates(text.encode())
    assert fixed == expected.encode()
    orjson.loads(fixed)  # now readable


@pytest.mark.parametrize(
    "text",
    [
        '"plain"',
        '"\\u00e9 and a pair \\ud83d\\ude00"',
        '"\\\\ud800 is text here"',
        '"\\ud83d\\ude00\\ud83d\\ude00"',
        '{"bad json": ',  # refused for something else: nothing to repair
    ],
)
def test_nothing_to_repair_is_none(text):
    assert replace_lone_surrogates(text.encode()) is None


def test_what_pythons_json_writes_for_surrogateescape_text_is_repaired():
    # sentry-sdk serialises with json.dumps: a file name decoded with surrogateescape.
    name = b"report-\xe9.csv".decode("utf-8", "surrogateescape")
    sent = json.dumps({"body": f"cannot open {name}", "emoji": "\U0001f389"}).encode()
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(sent)
    fixed = orjson.loads(replace_lone_surrogates(sent))
    assert fixed == {"body": "cannot open report-\ufffd.csv", "emoji": "\U0001f389"}


def test_payloads_over_the_repair_cap_are_left_refused():
    from errortrack.ingest.surrogates import MAX_REPAIR

    big = b'"' + b"x" * MAX_REPAIR + b'\\ud800"'
    assert replace_lone_surrogates(big) is None
    assert replace_lone_surrogates(big[-100:]) is not None
