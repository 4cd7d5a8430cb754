"""The OpenAPI 3 document, generated with apispec from the app's own routes and schemas.

Generic over the app: every responder carrying an ``ApiDoc`` record (see
``errortrack.api.schemas``) becomes an operation, with its path parameters read from the
route template (``{project_id:int}``), its query parameters and bodies from the
marshmallow schemas the responder itself loads and dumps, the bearer (or session
cookie) security, and the one error body for every refusal. A new endpoint is documented
the moment it is decorated, except for its operation id: generated clients name their
functions after it (``list_issues``, ``resolveIssue``), so ids are a contract chosen by
hand in ``OPERATION_IDS``, and building the document fails until a new endpoint has one.

Regenerate the snapshot after changing an endpoint (a test fails until you do)::

    .venv/bin/python -m errortrack.api.openapi > schemas/openapi.json    # or: make openapi

apispec is the optional ``openapi`` extra: import this module only when it is installed.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from importlib.metadata import version
from typing import Any

import falcon
from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from marshmallow import Schema, fields

from errortrack import db
from errortrack.api.auth import SAFE_METHODS
from errortrack.api.schemas import ApiDoc, operations

TITLE = "errortrack management API"
_PARAM = re.compile(r"\{(?P<name>\w+)(?::(?P<conv>\w+)(?:\((?P<args>[^)]*)\))?)?\}")
_ERRORS = {
    "400": "Invalid input; `field` names the parameter or body field",
    "401": "No credentials, or an unknown, expired or revoked token or session",
    "403": "Visible but not allowed (role too low, or a cookie write without X-CSRF-Token)",
    "404": "No such resource, or one the caller may not see",
}


# Every operation's id, by method and path: what generated clients call their functions
# (openapi-python-client turns listIssues into list_issues). Derived from the path, they
# read get_api_projects_project_id_issues_issue_id_events_event_id. Renaming one breaks
# the clients generated before, so ids only ever get added.
OPERATION_IDS = {
    ("GET", "/api/invitations"): "listInvitations",
    ("POST", "/api/invitations"): "createInvitation",
    ("DELETE", "/api/invitations/{invitation_id}"): "revokeInvitation",
    ("GET", "/api/me"): "getMe",
    ("POST", "/api/me/password"): "changeMyPassword",
    ("GET", "/api/projects"): "listProjects",
    ("POST", "/api/projects"): "createProject",
    ("GET", "/api/projects/{project_id}"): "getProject",
    ("PATCH", "/api/projects/{project_id}"): "updateProject",
    ("DELETE", "/api/projects/{project_id}"): "deleteProject",
    ("GET", "/api/projects/{project_id}/events"): "listProjectEvents",
    ("GET", "/api/projects/{project_id}/events/{event_id}"): "getProjectEvent",
    ("GET", "/api/projects/{project_id}/issues"): "listIssues",
    ("GET", "/api/projects/{project_id}/issues/{issue_id}"): "getIssue",
    ("DELETE", "/api/projects/{project_id}/issues/{issue_id}"): "deleteIssue",
    ("GET", "/api/projects/{project_id}/issues/{issue_id}/events"): "listIssueEvents",
    ("GET", "/api/projects/{project_id}/issues/{issue_id}/events/latest"): "getLatestIssueEvent",
    ("GET", "/api/projects/{project_id}/issues/{issue_id}/events/{event_id}"): "getIssueEvent",
    ("POST", "/api/projects/{project_id}/issues/{issue_id}/mute"): "muteIssue",
    ("POST", "/api/projects/{project_id}/issues/{issue_id}/resolve"): "resolveIssue",
    ("POST", "/api/projects/{project_id}/issues/{issue_id}/unresolve"): "unresolveIssue",
    ("GET", "/api/projects/{project_id}/keys"): "listKeys",
    ("POST", "/api/projects/{project_id}/keys"): "createKey",
    ("GET", "/api/projects/{project_id}/keys/{key_id}"): "getKey",
    ("PATCH", "/api/projects/{project_id}/keys/{key_id}"): "updateKey",
    ("DELETE", "/api/projects/{project_id}/keys/{key_id}"): "deleteKey",
    ("GET", "/api/projects/{project_id}/logs"): "listLogs",
    ("GET", "/api/projects/{project_id}/logs/tail"): "tailLogs",
    ("GET", "/api/projects/{project_id}/members"): "listMembers",
    ("PUT", "/api/projects/{project_id}/members"): "putMember",
    ("PATCH", "/api/projects/{project_id}/members/{user_id}"): "updateMember",
    ("DELETE", "/api/projects/{project_id}/members/{user_id}"): "removeMember",
    ("GET", "/api/projects/{project_id}/traces/{trace_id}"): "getTrace",
    ("GET", "/api/projects/{project_id}/traces/{trace_id}/spans"): "listTraceSpans",
    ("GET", "/api/storage"): "getStorage",
    ("POST", "/api/storage/cleanup"): "cleanupStorage",
    ("GET", "/api/team"): "listTeam",
    ("PATCH", "/api/team/{user_id}"): "updateUser",
    ("DELETE", "/api/team/{user_id}"): "removeUser",
    ("GET", "/api/tokens"): "listTokens",
    ("POST", "/api/tokens"): "createToken",
    ("DELETE", "/api/tokens/{token_id}"): "revokeToken",
    ("GET", "/auth/invitations/{token}"): "getInvitation",
    ("POST", "/auth/invitations/{token}/accept"): "acceptInvitation",
    ("POST", "/auth/login"): "login",
    ("POST", "/auth/logout"): "logout",
    ("POST", "/auth/register"): "register",
}
# Refused by gunicorn before the app sees the request (docs/API.md), hence not JSON.
_PLAIN = {
    "414": "Request line over 8190 bytes (answered by gunicorn in plain text)",
    "431": "A header line over 8190 bytes (answered by gunicorn in plain text)",
}


class ErrorDetail(Schema):
    code = fields.Str(required=True, metadata={"description": "Stable machine-readable word"})
    message = fields.Str(required=True, metadata={"description": "For people"})
    field = fields.Str(
        required=True, allow_none=True, metadata={"description": "The offending input, if any"}
    )


class Error(Schema):
    error = fields.Nested(ErrorDetail, required=True)


def _param_attributes(self: Any, field: fields.Field, **_: Any) -> dict[str, Any]:
    """Parameter-level OpenAPI keys (e.g. ``style: deepObject``) from field metadata."""
    return dict(field.metadata.get("param", {}))


def build(app: falcon.App) -> dict[str, Any]:
    plugin = MarshmallowPlugin()
    spec = APISpec(
        title=TITLE,
        version=version("errortrack"),
        openapi_version="3.0.3",
        plugins=[plugin],
        info={"description": "JSON API over logs, issues, traces, projects and the team."},
    )
    assert plugin.converter is not None
    plugin.converter.add_parameter_attribute_function(_param_attributes)
    spec.components.security_scheme("bearer", {"type": "http", "scheme": "bearer"})
    spec.components.security_scheme(
        "session", {"type": "apiKey", "in": "cookie", "name": "errortrack_session"}
    )
    spec.components.security_scheme(
        "csrf",
        {
            "type": "apiKey",
            "in": "header",
            "name": "X-CSRF-Token",
            "description": "With the session cookie on writes: the csrf_token of the login "
            "answer or of GET /api/me",
        },
    )
    spec.components.schema("Error", schema=Error)
    paths: dict[str, dict[str, Any]] = defaultdict(dict)
    for template, method, doc in operations(app):
        path, path_params = _path(template)
        paths[path][method.lower()] = _operation(path, method, doc, path_params)
    for path in sorted(paths):
        spec.path(path=path, operations=paths[path])
    document = spec.to_dict()
    # Relative to where the document is served, so generated clients get a base URL.
    document["servers"] = [{"url": "/"}]
    for operations_of_path in document["paths"].values():
        for op in operations_of_path.values():
            _for_generators(op["parameters"])
    return document


def _for_generators(parameters: list[dict[str, Any]]) -> None:
    """Shape query parameters for client generators, which send every default they see.

    With a cursor, ``page`` and ``sort`` must be left out (``page=1`` beside a cursor is a
    400; a sort other than the cursor's is a 400): a generated client sending their
    defaults on every call could not walk a list. The server's defaults stay, in words.
    Sort values get enum names: ``-timestamp`` became ``VALUE_0`` in Python clients.
    """
    names = {p["name"] for p in parameters}
    for param in parameters:
        schema = param.get("schema", {})
        if "cursor" in names and param["name"] in ("page", "sort") and "default" in schema:
            default = schema.pop("default")
            said = param.get("description", "").rstrip(".")
            param["description"] = (
                f"{said + '. ' if said else ''}Default without a cursor: {default}."
            )
        if param["name"] == "sort" and "enum" in schema:
            schema["x-enum-varnames"] = [
                value.lstrip("-").upper() + ("_DESC" if value.startswith("-") else "_ASC")
                for value in schema["enum"]
            ]


def _path(template: str) -> tuple[str, list[dict[str, Any]]]:
    """``/p/{project_id:int}`` -> ``/p/{project_id}`` and its parameter objects."""
    params = []
    for match in _PARAM.finditer(template):
        schema: dict[str, Any] = {"type": "string"}
        if match["conv"] == "int":
            schema = {"type": "integer", "minimum": 1, "maximum": db.MAX_ID}
        elif match["conv"] == "uuid":
            schema = {"type": "string", "format": "uuid"}
        params.append({"in": "path", "name": match["name"], "required": True, "schema": schema})
    return _PARAM.sub(lambda m: "{" + m["name"] + "}", template), params


def _operation(
    path: str, method: str, doc: ApiDoc, path_params: list[dict[str, Any]]
) -> dict[str, Any]:
    query = [{"in": "query", "schema": doc.query}] if doc.query else []
    # Path parameters the responder states rules for (ApiDoc.path) replace the template's.
    declared = [{"in": "path", "schema": doc.path}] if doc.path else []
    named = set(doc.path().fields) if doc.path else set()
    typed = [p for p in path_params if p["name"] not in named]
    try:
        operation_id = OPERATION_IDS[(method, path)]
    except KeyError:
        raise LookupError(
            f"{method} {path} has no operation id: name it in OPERATION_IDS"
        ) from None
    security: list[dict[str, list[str]]] = []
    if doc.auth:
        session: dict[str, list[str]] = (
            # The rule api.auth applies: a cookie write needs the X-CSRF-Token header.
            {"session": []} if method in SAFE_METHODS else {"session": [], "csrf": []}
        )
        security = [{"bearer": []}, session]
    op: dict[str, Any] = {
        "operationId": operation_id,
        "summary": doc.summary,
        "tags": list(doc.tags),
        "parameters": [*typed, *declared, *query],
        "responses": {str(doc.status): _success(doc), **_errors(doc, bool(path_params))},
        "security": security,
    }
    if doc.request is not None:
        op["requestBody"] = {
            # No body is read as {} (api.schemas.load): a schema with nothing required
            # takes none (PATCH /api/projects/{id} was documented as needing one).
            "required": any(f.required for f in doc.request().fields.values()),
            "content": {"application/json": {"schema": doc.request}},
        }
    return op


def _success(doc: ApiDoc) -> dict[str, Any]:
    if doc.status >= 400:
        # An endpoint that only refuses (POST /auth/register) answers with the error body.
        return {"description": "Refused", "content": {"application/json": {"schema": Error}}}
    if doc.response is None:
        return {"description": "Done; no body"}
    schema = doc.response(many=True) if doc.many else doc.response
    return {"description": "OK", "content": {"application/json": {"schema": schema}}}


def _errors(doc: ApiDoc, has_path_params: bool) -> dict[str, Any]:
    # Every documented operation checks its query (an unknown parameter is a 400, the
    # middleware's NoQuery where there is no query schema) and reads its own path
    # parameters (a malformed trace or event id is a 400 too).
    wanted = {"400"}
    if doc.auth:
        wanted |= {"401", "403"}
    if has_path_params:
        wanted.add("404")
    error = {"application/json": {"schema": Error}}
    responses = {code: {"description": _ERRORS[code], "content": error} for code in sorted(wanted)}
    plain = {"text/plain": {"schema": {"type": "string"}}}
    responses |= {code: {"description": said, "content": plain} for code, said in _PLAIN.items()}
    # Everything else (405, 408, 409, 410, 413, 429, 5xx) has the same body.
    responses["default"] = {"description": "Any other error", "content": error}
    return responses


def render(app: falcon.App) -> str:
    """The document as stored in ``schemas/openapi.json``: stable key order, 2 spaces."""
    return json.dumps(build(app), indent=2, sort_keys=True) + "\n"


def _snapshot_app() -> falcon.App:
    """The full app on throw-away embedded stores; nothing is opened to list routes."""
    import tempfile
    from pathlib import Path

    from errortrack.app import create_app
    from errortrack.config import Settings

    data_dir = Path(tempfile.mkdtemp(prefix="errortrack-openapi-"))
    return create_app(Settings.from_env({}, data_dir=data_dir, openapi=True))


if __name__ == "__main__":
    sys.stdout.write(render(_snapshot_app()))
