"""Nested JSON values written as text at any depth, without recursion.

``str``, ``repr`` and msgspec's encoder recurse on Python's stack, and orjson's writer
stops at 255 levels, while orjson reads documents up to 1,024 levels deep: values nested
~1,000 deep raised RecursionError, a 500 that lost the whole envelope (twentieth
session). One walk serves both forms in use: Python's (``str`` of a list, as a log
message's ``%s`` shows it) and JSON (a span attribute holding what lies too deep).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class _Text(str):
    """Text written as it is (a bracket, a separator with a key), not as a value."""


def write(
    value: Any,
    *,
    key: Callable[[Any], str],
    leaf: Callable[[Any], str],
    comma: str,
    colon: str,
) -> str:
    """``value`` with every non-empty dict as ``{key(k) colon v comma ...}`` and list as
    ``[v comma ...]``; anything else (a scalar, ``{}``, ``[]``) is ``leaf(item)``."""
    out: list[str] = []
    todo: list[Any] = [value]
    while todo:
        item = todo.pop()
        if type(item) is _Text:
            out.append(item)
        elif isinstance(item, dict) and item:
            todo.append(_Text("}"))
            for i, (name, child) in reversed(list(enumerate(item.items()))):
                todo.append(child)
                todo.append(_Text((comma if i else "{") + key(name) + colon))
        elif isinstance(item, list) and item:
            todo.append(_Text("]"))
            for i, child in reversed(list(enumerate(item))):
                todo.append(child)
                if i:
                    todo.append(_Text(comma))
            todo.append(_Text("["))
        else:
            out.append(leaf(item))
    return "".join(out)
