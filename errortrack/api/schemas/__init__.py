"""Marshmallow schemas, and the convention that ties them to the resources using them.

Convention (read by the OpenAPI generator):
every responder that takes a JSON body, a query string, or returns JSON is decorated with
:func:`api_doc`, which stores an :class:`ApiDoc` on the function as ``__api_doc__``::

    class Tokens:
        @api_doc(request=TokenCreateIn, response=NewTokenOut, status=201,
                 summary="Create an API token", tags=("tokens",))
        def on_post(self, req, resp):
            body = load(req, TokenCreateIn)          # 400 with the field named
            ...
            resp.media = NewTokenOut().dump(new)

``request`` is the body schema (also used by :func:`load`; the document marks the body
required only when the schema has a required field, since no body is read as ``{}``),
``query`` the query-string schema (a responder without one takes no query parameter:
``api.middleware.RefuseUndeclaredQuery`` answers 400), ``path`` a schema stating the
rules of path parameters no converter types (``{trace_id}``), ``response`` the schema of
the success body (``many=True`` for a JSON array;
None with ``status=204`` for an empty response). ``auth=False`` marks endpoints that need
no credentials. :func:`operations` walks a ``falcon.App``'s routes and yields
``(path, method, ApiDoc)`` for every decorated responder, which is all an apispec plugin
needs: path templates come from the router (``/api/projects/{project_id:int}``), the
schemas from the record. Responders without a record are simply not documented.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, TypeVar

import falcon
import marshmallow
import orjson

from errortrack.errors import (
    BadRequest,
    PayloadTooLarge,
    UnsupportedContentEncoding,
    UnsupportedMediaType,
    ValidationError,
)

F = TypeVar("F", bound=Callable[..., Any])
SchemaClass = type[marshmallow.Schema]


@dataclasses.dataclass(frozen=True)
class ApiDoc:
    summary: str
    request: SchemaClass | None = None
    query: SchemaClass | None = None
    # Path parameters that are no converter's ({trace_id}): their rules for the document.
    path: SchemaClass | None = None
    response: SchemaClass | None = None
    many: bool = False
    status: int = 200
    auth: bool = True
    tags: tuple[str, ...] = ()


def api_doc(summary: str, **fields: Any) -> Callable[[F], F]:
    record = ApiDoc(summary=summary, **fields)

    def attach(responder: F) -> F:
        responder.__api_doc__ = record  # type: ignore[attr-defined]
        return responder

    return attach


# No management body comes near this (the largest is an invitation or a login); a larger
# one is refused before it is read, rather than read whole into memory and, for a login,
# hashed and kept as the throttle's key. SDK ingest has its own cap (MAX_BODY_BYTES).
MAX_BODY_BYTES = 1 << 20


def load(req: falcon.Request, schema: SchemaClass, *, typed: bool = False) -> dict[str, Any]:
    """The request's JSON body validated by ``schema``; 400 naming the first bad field,
    413 over ``MAX_BODY_BYTES``, 415 for a body that is not sent as JSON or is sent in a
    content coding. ``typed``: a body without a Content-Type is a 415 too (the requests
    no credential guards: login, accepting an invitation)."""
    encoding = (req.get_header("Content-Encoding") or "").strip().lower()
    if encoding not in ("", "identity"):
        # Refused before the body is read. Bodies were read as they came whatever the
        # header said: gzip-compressed JSON was "not valid JSON", and a plain body
        # labelled gzip was acted on, when the sender meant something else. Management
        # bodies are small (a login, a name); SDK ingest decodes codings (docs/INGEST.md).
        raise UnsupportedContentEncoding(
            f"request bodies are taken without a content coding, not {encoding}",
            field="Content-Encoding",
        )
    if (req.content_length or 0) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"request body is larger than {MAX_BODY_BYTES} bytes")
    if req.content_length is None and req.get_header("Transfer-Encoding"):
        # A chunked body (curl -T, requests/httpx with a generator, re-chunking proxies)
        # has no length, and Falcon's bounded_stream reads no bytes then: the body was
        # taken for {} and a PATCH answered 200 having changed nothing. a2wsgi's stream
        # ends with the ASGI body, so read it, to one byte past the cap.
        raw = req.stream.read(MAX_BODY_BYTES + 1)
    else:
        raw = req.bounded_stream.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"request body is larger than {MAX_BODY_BYTES} bytes")
    if not raw.strip():
        return _validated({}, schema)
    # JSON only, as documented: an HTML form (urlencoded or multipart) or text/plain is
    # what another site can send without a CORS preflight, and a login or an accepted
    # invitation from such a form would sign the visitor's browser into someone else's
    # account. No Content-Type at all is read as JSON, but not where ``typed``: a page's
    # fetch(url, {mode: "no-cors", body: new Blob([json])}) sends none and needs no
    # preflight, and Chromium's requests so made reached the login: six of them locked a
    # user out from their own browser (security review, thirtieth session). A cookie or
    # token write needs a header such a request cannot carry (X-CSRF-Token,
    # Authorization), so elsewhere a body without a Content-Type stays JSON.
    default = "" if typed else falcon.MEDIA_JSON
    media_type = (req.content_type or default).partition(";")[0].strip().lower()
    if media_type != falcon.MEDIA_JSON:
        raise UnsupportedMediaType(
            f"request body must be sent as {falcon.MEDIA_JSON}, not {media_type or 'nothing'}"
        )
    try:
        media = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BadRequest("request body is not valid JSON") from None
    if not isinstance(media, dict):
        raise BadRequest("request body must be a JSON object")  # before the second read
    twice = _key_twice(raw)
    if twice is not None:
        raise BadRequest(
            f"request body names {orjson.dumps(twice).decode()} twice in one object; "
            "each key may appear once"
        )
    return _validated(media, schema)


class _KeyTwice(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _KeyTwice(key)
            seen.add(key)
    return found


def _key_twice(raw: bytes) -> str | None:
    """The first key some object of ``raw`` (JSON that orjson read) holds twice, at any
    depth; None when there is none. orjson keeps the last value, and another parser on
    the way (a proxy, an audit log) may take the first: ``{"role": "member", "role":
    "admin"}`` read as a member there invited an admin here (found in review). Read a
    second time by Python's parser, which shows every pair: a few microseconds for a
    login, 2 to 3 times orjson's own time for a 1 MiB body, flat or 1,000 deep (measured)."""
    text = raw.decode()  # orjson took it, so it is UTF-8
    try:
        json.loads(text, object_pairs_hook=_unique)
    except _KeyTwice as found:
        return found.key
    except RecursionError:
        # Deeper than Python's stack (orjson reads 1024 levels): walked without recursion.
        return _key_twice_deep(text)
    return None


# In JSON already known valid: a string (and the colon after it, when it is a key), or
# a bracket. Strings are matched whole, so a bracket or quote inside one is not seen.
_JSON_TOKEN = re.compile(r'("[^"\\]*(?:\\.[^"\\]*)*")\s*(:)?|[{}\[\]]')


def _key_twice_deep(text: str) -> str | None:
    keys: list[set[str]] = []
    for token in _JSON_TOKEN.finditer(text):
        string, colon = token.group(1), token.group(2)
        if string is None:
            if token.group() in "{[":
                keys.append(set())
            else:
                keys.pop()
        elif colon:
            # Decoded only when escaped: json.loads per key made a deep 1 MiB body
            # cost ~9x orjson's time on the unauthenticated login.
            key = json.loads(string) if "\\" in string else string[1:-1]
            if key in keys[-1]:
                return str(key)
            keys[-1].add(key)
    return None


def _validated(media: Any, schema: SchemaClass) -> dict[str, Any]:
    if not isinstance(media, dict):
        raise BadRequest("request body must be a JSON object")
    bad = _field_with_nul(media)
    if bad is not None:
        # Postgres text cannot hold NUL: refuse it here rather than fail with a 500 there
        # (found by tests/e2e/test_schemathesis.py on Postgres).
        raise ValidationError(f"{bad}: text may not contain NUL characters", field=bad)
    try:
        data: dict[str, Any] = schema().load(media)
    except marshmallow.ValidationError as exc:
        raise _first_error(exc) from None
    return data


def _field_with_nul(media: dict[str, Any]) -> str | None:
    """The top-level field whose value (at any depth) holds a string with a NUL."""
    return next((str(k) for k, v in media.items() if _has_nul(k) or _has_nul(v)), None)


def _has_nul(value: Any) -> bool:
    # A loop, not recursion: orjson reads JSON nested 1024 deep, and a recursive walk
    # ran out of Python's stack at about 330 (a 500 for anyone, without credentials).
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def _first_error(exc: marshmallow.ValidationError) -> ValidationError:
    messages = exc.messages if isinstance(exc.messages, dict) else {"_schema": exc.messages}
    field, problems = sorted(messages.items())[0]
    text = problems[0] if isinstance(problems, list) and problems else str(problems)
    if text == "Unknown field.":
        text = "unknown field"
    return ValidationError(f"{field}: {text}", field=None if field == "_schema" else field)


def operations(app: falcon.App) -> Iterator[tuple[str, str, ApiDoc]]:
    """(path template, HTTP method, ApiDoc) for every documented responder of ``app``."""

    def walk(nodes: list[Any], parent: str) -> Iterator[tuple[str, str, ApiDoc]]:
        for node in nodes:
            path = f"{parent}/{node.raw_segment}"
            for method, func in sorted((node.method_map or {}).items()):
                real = func.func if isinstance(func, partial) else func
                record = getattr(real, "__api_doc__", None)
                if record is not None:
                    yield path, method, record
            yield from walk(node.children or [], path)

    yield from walk(app._router._roots, "")
