"""What an issue list shows for an event: its title, its culprit and its level."""

from __future__ import annotations

import re
from typing import Any

from errortrack import nested
from errortrack.issues.fingerprint import exceptions, frames_of, main_exception, message_text

TITLE_MAX = 200
CULPRIT_MAX = 200
# Spellings some SDKs use for the same levels.
_LEVEL_ALIASES = {"warn": "warning", "critical": "fatal", "log": "info"}
UNLABELED = "<unlabeled event>"


def _clip(text: str, limit: int) -> str:
    line = _storable(text).strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"


def _storable(text: str) -> str:
    """NUL shown as U+FFFD. These strings become the issue's row in the relational store,
    and PostgreSQL text cannot hold NUL: one event with a NUL in its exception or its
    culprit failed the writer's grouping hook on every retry, which held back every
    segment after it, logs included. The event's own row in ClickHouse gets the same
    text, so that the two stores agree; its payload keeps what was sent."""
    return text.replace("\x00", "\ufffd")


def _formatted_message(event: dict[str, Any]) -> str:
    # The title shows the message as people read it (formatted), not its template.
    for key in ("logentry", "message"):
        value = event.get(key)
        if isinstance(value, dict):
            value = value.get("formatted") or _with_params(
                value.get("message"), value.get("params")
            )
        if isinstance(value, str) and value.strip():
            return value
    return message_text(event)


# A printf-style placeholder as Python's logging writes them: %s, %d, %(name)s, %5.2f, %%.
# Possessive, and a name holds no "(" or "%": "%(" repeated (nothing closing it) made
# every "%(" scan to the end, and "%" before a run of zeros tried every split of the run
# between flags and width; both quadratic, 128 KB of "%(" took 34 s on the loop (DoS
# review, twenty-ninth session). A name with "(" or "%" in it stays literal text.
_PLACEHOLDER = re.compile(
    r"%(?:\(([^()%]*+)\))?([#0 +-]*+)(\d*+)(?:\.(\d++))?([diouxXeEfFgGcrsa%])"
)
_MAX_WIDTH = 100  # "%999999999d" must not make a gigabyte title
# Filled in no further than this: a title is the first line of it, clipped to 200, and a
# name used again and again ("%(a)s" x 100,000 with a long "a") wrote each copy, GBs.
FORMATTED_MAX = 64 * 1024


def _with_params(template: Any, params: Any) -> Any:
    """``logentry.message`` with its ``params`` filled in, as Relay does for an event sent
    without ``formatted`` (sentry-python's older logging integration sends only the
    template and ``record.args``): the title read "user %s failed" for "user bob failed".
    The template as it is when the params do not fit it (as Python would fail); filled
    in, its first ``FORMATTED_MAX`` characters."""
    if not isinstance(template, str) or not isinstance(params, (list, dict)) or not params:
        return template
    positional = iter(params) if isinstance(params, list) else iter(())
    out: list[str] = []
    size = end = 0
    for match in _PLACEHOLDER.finditer(template):
        if size > FORMATTED_MAX:
            return "".join(out)[:FORMATTED_MAX]
        name, flags, width, precision, conversion = match.groups()
        out.append(template[end : match.start()])
        size += match.start() - end
        end = match.end()
        if conversion == "%" and name is None:
            out.append("%")
            size += 1
            continue
        if name is not None:
            if not isinstance(params, dict) or name not in params:
                return template
            value = params[name]
        else:
            value = next(positional, _MISSING)
            if value is _MISSING:
                return template
        shown = _placeholder(value, flags, width, precision, conversion)
        out.append(shown)
        size += len(shown)
    out.append(template[end:])
    return "".join(out)[:FORMATTED_MAX]


_MISSING = object()


def _placeholder(value: Any, flags: str, width: str, precision: str | None, conv: str) -> str:
    if isinstance(value, (list, dict)):
        # As %s and %r show them (the same for both), at any depth (``_shown``).
        return _shown(value)
    if conv in "sra" or isinstance(value, str) or value is None:
        # Strings as Python's %s shows them; JSON null was Python's None.
        return str(value) if conv != "r" else repr(value)
    spec = "%" + flags
    if width and int(width) <= _MAX_WIDTH:
        spec += width
    if precision is not None and int(precision) <= _MAX_WIDTH:
        spec += "." + precision
    try:
        return (spec + conv) % value
    except (TypeError, ValueError, OverflowError):
        return str(value)


def _shown(value: list[Any] | dict[str, Any]) -> str:
    """``str(value)`` of a decoded JSON array or object, at any depth (``nested``).
    orjson's writer is no way out: it stops at 255 levels and writes JSON (``null``,
    ``"q"``), not what Python's logging shows (``None``, ``'q'``)."""
    return nested.write(value, key=repr, leaf=repr, comma=", ", colon=": ")


def title(event: dict[str, Any]) -> str:
    """``Type: value`` of the raised exception (of the one failure an exception group of
    identical ones holds, as it is grouped), else the message."""
    raised = main_exception(event)
    if raised is not None and isinstance(raised.get("type"), str) and raised["type"]:
        value = raised.get("value")
        if isinstance(value, str) and value.strip():
            return _clip(f"{raised['type']}: {value}", TITLE_MAX)
        return _clip(raised["type"], TITLE_MAX)
    message = _formatted_message(event)
    return _clip(message, TITLE_MAX) if message else UNLABELED


# Sentry spells a frame per platform (Frame.get_culprit_string): JavaScript as
# ``function(module)``, native code by its function alone, the rest ``module in function``;
# a frame's own platform wins over the event's.
_CALL_SPELLING = frozenset({"javascript", "node"})
_FUNCTION_ONLY = frozenset({"objc", "cocoa", "native"})


def culprit(event: dict[str, Any]) -> str:
    """The crashing frame: the innermost in-app frame of the raised exception (frames are
    oldest first), else its innermost frame, spelled as Sentry spells it for the frame's
    platform; else the transaction."""
    chain = exceptions(event)
    frames = frames_of(chain[-1]) if chain else []
    in_app = [f for f in frames if f.get("in_app") is True]
    if in_app or frames:
        frame = (in_app or frames)[-1]
        platform = frame.get("platform") or event.get("platform")
        platform = platform if isinstance(platform, str) else None
        function = frame.get("function") or "?"
        if platform in _FUNCTION_ONLY:
            return _clip(str(function), CULPRIT_MAX)
        where = frame.get("module") or frame.get("filename") or frame.get("abs_path") or "?"
        if platform in _CALL_SPELLING:
            return _clip(f"{function}({where})", CULPRIT_MAX)
        return _clip(f"{where} in {function}", CULPRIT_MAX)
    transaction = event.get("transaction") or event.get("culprit")
    return _clip(transaction, CULPRIT_MAX) if isinstance(transaction, str) else ""


# Python's logging levels, which raven-python sends as numbers (``record.levelno``);
# Relay reads these five (Level::from_python_level) and no other number.
_PYTHON_LEVELS = {10: "debug", 20: "info", 30: "warning", 40: "error", 50: "fatal"}


def level(event: dict[str, Any]) -> str:
    raw = event.get("level")
    if isinstance(raw, int) and not isinstance(raw, bool):
        return _PYTHON_LEVELS.get(raw, "error")
    if not isinstance(raw, str) or not raw.strip():
        return "error"
    value = raw.strip().lower()
    value = _LEVEL_ALIASES.get(value, value)
    # Unknown levels are kept (clipped to the column) rather than guessed at.
    return _storable(value)[:16]
