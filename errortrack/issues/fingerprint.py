"""Grouping: which events are "the same error". Pure functions over the event JSON.

Rules, first match wins (docs/ARCHITECTURE.md "Grouping"):
1. the SDK's ``fingerprint`` list, with ``{{ default }}`` replaced by the default parts;
2. exceptions with a ``type``: each type in the chain plus the frames' module (or file)
   and function, in-app frames only unless none is in-app. Line numbers and variable
   values are left out so that an edit above the crash or a different input does not
   split an issue. A chain without any frame adds the normalised exception value;
3. the message template: ``logentry.message``, else the message (or the value of a
   typeless exception, as Node's ``captureMessage`` sends) with numbers and ids
   normalised.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

import orjson

# Sentry's fingerprint variable syntax, any spacing inside the braces ("{{ default}}"
# too); only two spellings were recognised, and any other became a literal part, merging
# unrelated errors that shared it.
_DEFAULT_VARIABLE = re.compile(r"\{\{\s*default\s*\}\}")


def is_default_variable(item: Any) -> bool:
    return _DEFAULT_VARIABLE.fullmatch(str(item).strip()) is not None


_UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}\b"
)
_HEX = re.compile(r"\b(?:0x[0-9a-fA-F]+|(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,})\b")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def normalise_message(text: str) -> str:
    """The message with the parts that vary per occurrence replaced by placeholders."""
    text = _UUID.sub("<uuid>", text)
    text = _HEX.sub("<hex>", text)
    return _NUMBER.sub("<num>", text).strip()


def exceptions(event: dict[str, Any]) -> list[dict[str, Any]]:
    """The exception chain, oldest first (the last value is the one that was raised)."""
    exc = event.get("exception")
    values = exc.get("values") if isinstance(exc, dict) else exc
    if not isinstance(values, list):
        return []
    return [v for v in values if isinstance(v, dict)]


def frames_of(exception: dict[str, Any]) -> list[dict[str, Any]]:
    stacktrace = exception.get("stacktrace")
    frames = stacktrace.get("frames") if isinstance(stacktrace, dict) else None
    if not isinstance(frames, list):
        return []
    return [f for f in frames if isinstance(f, dict)]


def message_text(event: dict[str, Any]) -> str:
    """The message as a template when the SDK sent one (logentry), else as sent."""
    for key in ("logentry", "message"):
        value = event.get(key)
        if isinstance(value, dict):
            value = value.get("message") or value.get("formatted")
        if isinstance(value, str) and value.strip():
            return value
    # Node's captureMessage sends a typeless (synthetic) exception holding the message.
    for exc in reversed(exceptions(event)):
        value = exc.get("value")
        if isinstance(value, str) and value.strip():
            return value
    return ""


def _frame_part(frame: dict[str, Any]) -> str:
    where = frame.get("module") or frame.get("filename") or frame.get("abs_path") or "?"
    return f"{where}:{frame.get('function') or '?'}"


def default_parts(event: dict[str, Any]) -> list[str]:
    """The components that the default fingerprint hashes."""
    typed = [e for e in exceptions(event) if isinstance(e.get("type"), str) and e["type"]]
    if typed:
        return _exception_parts(typed)
    message = message_text(event)
    if message:
        return ["message", normalise_message(message)]
    return ["fallback"]


def _exception_parts(chain: list[dict[str, Any]]) -> list[str]:
    all_frames = [frames_of(e) for e in chain]
    any_in_app = any(f.get("in_app") is True for frames in all_frames for f in frames)
    parts: list[str] = ["exception"]
    for exc, frames in zip(chain, all_frames, strict=True):
        parts.append(f"type:{exc['type']}")
        kept = [f for f in frames if f.get("in_app") is True] if any_in_app else frames
        parts.extend(_frame_part(f) for f in kept)
    if not any(all_frames):
        # Without any frame, the type alone would merge every KeyError of a project.
        value = chain[-1].get("value")
        parts.append(normalise_message(value) if isinstance(value, str) else "")
    return parts


def expand(custom: Iterable[Any], event: dict[str, Any]) -> list[str]:
    parts: list[str] = ["custom"]
    for item in custom:
        if is_default_variable(item):
            parts.extend(default_parts(event))
        else:
            parts.append(str(item))
    return parts


def fingerprint_parts(event: dict[str, Any]) -> list[str]:
    custom = event.get("fingerprint")
    if isinstance(custom, list) and custom:
        if all(is_default_variable(item) for item in custom):
            return default_parts(event)
        return expand(custom, event)
    return default_parts(event)


def hash_parts(parts: Iterable[str]) -> str:
    # Hashing the JSON list keeps part boundaries: ["a b"] and ["a", "b"] differ.
    return hashlib.blake2b(orjson.dumps(list(parts)), digest_size=16).hexdigest()


def fingerprint(event: dict[str, Any]) -> str:
    """32 hex characters; same value for events that belong to the same issue."""
    return hash_parts(fingerprint_parts(event))
