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

import contextvars
import re
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# A \u escape of a UTF-16 surrogate (U+D800-U+DFFF) that is an escape: preceded by an
# even run of backslashes (escaped backslashes are text). A high half directly followed
# by a low half is a pair, one character, matched whole and kept.
_SURROGATE = re.compile(
    rb"(?<!\\)((?:\\\\)*)\\u"
    rb"([dD][89aAbB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|[dD][89a-fA-F][0-9a-fA-F]{2})"
)
# Any surrogate escape at all; most refused payloads hold none, and this answers that
# at C speed (a walk over every backslash of a 20 MB body took 3 s on the event loop).
_ANY = re.compile(rb"\\u[dD][89a-fA-F]")
# Larger payloads are not repaired (they stay a 400): the rewrite runs on the event
# loop, and 20 MB of lone halves took 1.4 s there; 2 MiB (Relay's cap on a log item,
# twice its cap on an event) takes at most ~0.15 s.
MAX_REPAIR = 2 << 20
# What the current request may still repair, in bytes: MAX_REPAIR for all its payloads
# together (``start_request``). Per payload alone, eight item headers of 2 MiB each took
# 1.3 s of the event loop (DoS review, thirtieth session). A context variable rather than
# an argument: the envelope header, item headers (``envelope``, ``skim``) and payloads
# (``service``) are repaired in three modules, all in the request's one task. None
# outside a request (tests, tools): each payload is held to MAX_REPAIR alone.
_LEFT: contextvars.ContextVar[int | None] = contextvars.ContextVar("repair_left", default=None)


def start_request() -> None:
    """Give the request now being handled its repair budget (``api/ingest.py``)."""
    _LEFT.set(MAX_REPAIR)


def replace_lone_surrogates(data: bytes) -> bytes | None:
    """``data`` with each escaped lone surrogate written as ``\\ufffd``; None when it
    holds none (the payload was refused for something else) or is over ``MAX_REPAIR``,
    or over what is left of the request's budget."""
    if len(data) > MAX_REPAIR or _ANY.search(data) is None:
        return None
    left = _LEFT.get()
    if left is not None:
        if len(data) > left:
            return None
        _LEFT.set(left - len(data))
    changed = False

    def fix(match: re.Match[bytes]) -> bytes:
        nonlocal changed
        if len(match.group(2)) > 4:
            return match.group(0)  # a pair
        changed = True
        return match.group(1) + b"\\ufffd"

    fixed = _SURROGATE.sub(fix, data)
    return fixed if changed else None


def read_repaired(
    read: Callable[[bytes], T], data: bytes, refused: type[Exception]
) -> tuple[T, bytes]:
    """``read(data)`` and the bytes it read. When it raises ``refused`` and ``data`` holds
    lone surrogate escapes, ``read`` runs again on the repaired bytes (whatever that
    raises propagates); otherwise the first refusal does."""
    try:
        return read(data), data
    except refused:
        repaired = replace_lone_surrogates(data)
        if repaired is None:
            raise
    return read(repaired), repaired
