"""The issue filters' parsers (``errortrack.issues.read``), which the HTTP schemas use."""

from __future__ import annotations

import pytest

from errortrack.errors import ValidationError
from errortrack.issues import read


def test_levels_take_repeats_commas_case_and_ingests_aliases():
    assert read.parse_levels(["error,FATAL", "warn", " error "]) == ("error", "fatal", "warning")
    assert read.parse_levels(["critical,log"]) == ("fatal", "info")
    for bad in (["bogus"], ["error,"], [""]):
        with pytest.raises(ValidationError) as exc:
            read.parse_levels(bad)
        assert exc.value.field == "level"


def test_text_is_trimmed_blank_is_none_and_nul_or_long_is_refused():
    assert read.parse_text("  Boom ") == "Boom"
    assert read.parse_text("   ") is None
    assert read.parse_text("x" * read.MAX_TEXT) == "x" * read.MAX_TEXT
    assert read.parse_text(" " + "x" * read.MAX_TEXT + " ") == "x" * read.MAX_TEXT
    for bad in ("x" * (read.MAX_TEXT + 1), "a\x00b", "\x00"):
        with pytest.raises(ValidationError) as exc:
            read.parse_text(bad)
        assert exc.value.field == "q"


def test_values_are_exact_trimmed_and_bounded():
    assert read.parse_values(["prod, staging", "prod", "Prod"], field="environment") == (
        "prod",
        "staging",
        "Prod",
    )
    many = [f"v{i}" for i in range(read.MAX_VALUES)]
    assert read.parse_values([",".join(many)], field="release") == tuple(many)
    for bad in (
        [""],
        [" "],
        ["a,,b"],
        ["a,"],
        ["x" * (read.MAX_VALUE_LENGTH + 1)],
        [*many, "one more"],
    ):
        with pytest.raises(ValidationError) as exc:
            read.parse_values(bad, field="release")
        assert exc.value.field == "release"


@pytest.mark.parametrize(
    "raw",
    [
        "0123456789abcdef0123456789abcdef",
        "0123456789ABCDEF0123456789ABCDEF",
        "01234567-89ab-cdef-0123-456789abcdef",
        " 01234567-89AB-CDEF-0123-456789ABCDEF ",
    ],
)
def test_event_ids_in_hex_or_uuid_form(raw):
    assert read.parse_event_id(raw) == "01234567-89ab-cdef-0123-456789abcdef"


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "latest",
        "0123456789abcdef0123456789abcde",
        "0123456789abcdef0123456789abcdef0",
        "0123456789abcdef0123456789abcdeg",
        "01234567-89ab-cdef-0123456789abcdef",  # dashes in some places only
        "{01234567-89ab-cdef-0123-456789abcdef}",
        "urn:uuid:01234567-89ab-cdef-0123-456789abcdef",
        "0123456789abcdef\n0123456789abcdef",
        "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669abcdef0123456789abcdef",
    ],
)
def test_other_event_ids_are_400_naming_event_id(raw):
    with pytest.raises(ValidationError) as exc:
        read.parse_event_id(raw)
    assert exc.value.field == "event_id"
