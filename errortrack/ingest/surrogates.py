"""Lone UTF-16 surrogates in SDK JSON: written as U+FFFD instead of refusing the item.

Both SDKs write a string holding half of a surrogate pair as a JSON escape (``\\ud800``):
Python's ``json`` does so for text decoded with ``surrogateescape`` (file names, argv),
and ``@sentry/node``'s own truncation (``maxValueLength``) cuts an emoji in half.
Python's and JavaScript's parsers read such escapes; orjson and msgspec refuse them, so
one such value made the whole item a 400 and lost every other log of its batch (found in
the twenty-second session's SDK review). Such text cannot be stored as UTF-8 either, so
each lone surrogate becomes U+FFFD, as a UTF-8 decoder does with a bad byte, and the
item is read again. Only on the path where a parser has already refused the payload: the
accepted path costs nothing.
"""

from __future__ import annotations

_REPLACEMENT = b"\\ufffd"


def _code_unit(data: bytes, at: int) -> int | None:
    """The code unit of the ``\\uXXXX`` escape starting at ``at``, if one does."""
    digits = data[at + 2 : at + 6]
    if data[at + 1 : at + 2] != b"u" or len(digits) != 4:
        return None
    try:
        return int(digits, 16)
    except ValueError:
        return None


def replace_lone_surrogates(data: bytes) -> bytes | None:
    """``data`` with each escaped lone surrogate written as ``\\ufffd``; None when it
    holds none (the payload was refused for something else).

    Walks the escapes themselves (every backslash in valid JSON starts one), so an
    escaped backslash followed by ``ud800`` (the text ``\\ud800``) is left alone."""
    if b"\\u" not in data:
        return None
    out: list[bytes] = []
    start = 0
    at = data.find(b"\\")
    while at != -1:
        unit = _code_unit(data, at)
        step = 6 if unit is not None else 2
        if unit is not None and 0xD800 <= unit <= 0xDFFF:
            low = _code_unit(data, at + 6) if unit <= 0xDBFF else None
            if low is not None and 0xDC00 <= low <= 0xDFFF:
                step = 12  # a pair: one character, kept
            else:
                out += (data[start:at], _REPLACEMENT)
                start = at + 6
        at = data.find(b"\\", at + step)
    if not out:
        return None
    out.append(data[start:])
    return b"".join(out)
