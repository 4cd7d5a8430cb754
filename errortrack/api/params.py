"""Query strings through marshmallow schemas, with the domain's 400 naming the parameter.

The body counterpart is ``errortrack.api.schemas.load``; query strings differ in that a
repeated parameter arrives as a list and unknown parameters are refused too (a typo such
as ``levle=error`` would otherwise silently list everything).
"""

from __future__ import annotations

from typing import Any

import falcon
import marshmallow

from errortrack.errors import ValidationError


class NoQuery(marshmallow.Schema):
    """The query of a route that takes none: every parameter is unknown, a 400 naming it
    (``api.middleware.RefuseUndeclaredQuery`` loads it for such routes)."""


def load_query(req: falcon.Request, schema: type[marshmallow.Schema]) -> dict[str, Any]:
    try:
        data: dict[str, Any] = schema().load(dict(req.params))
    except marshmallow.ValidationError as exc:
        raise first_error(exc) from None
    return data


def first_error(exc: marshmallow.ValidationError) -> ValidationError:
    messages = exc.messages if isinstance(exc.messages, dict) else {"_schema": exc.messages}
    field, problems = sorted(messages.items())[0]
    text = _first_text(problems)
    if text == "Unknown field.":
        text = "unknown query parameter"
    if field != "_schema" and not text.startswith(field):
        text = f"{field}: {text}"
    return ValidationError(text, field=None if field == "_schema" else field)


def _first_text(problems: Any) -> str:
    # List fields report {index: [messages]}; dig to the first message.
    while isinstance(problems, dict) and problems:
        problems = next(iter(problems.values()))
    if isinstance(problems, list) and problems:
        return _first_text(problems[0]) if not isinstance(problems[0], str) else problems[0]
    return str(problems)
