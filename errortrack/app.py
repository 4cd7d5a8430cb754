"""Composition root of the management API (WSGI): builds the stores and services and
lists every route but SDK ingest, which ``server.py`` serves beside this app."""

from __future__ import annotations

import re
from typing import Any, ClassVar

import falcon
import falcon.asgi
import orjson

from errortrack import db
from errortrack.api import account, docs, errors, health, projects, team, tokens
from errortrack.api import issues as issues_api
from errortrack.api import logs as logs_api
from errortrack.api import storage as storage_api
from errortrack.api import traces as traces_api
from errortrack.api.auth import Authentication
from errortrack.api.middleware import (
    AuthChallenge,
    DatabaseSessions,
    HeadAsGet,
    RefuseUndeclaredQuery,
    RenderJSON,
    SecurityHeaders,
    UnknownMethods,
)
from errortrack.auth.throttle import LoginThrottle
from errortrack.config import Settings
from errortrack.state import AppState
from errortrack.storage import retention


class RelationalId(falcon.routing.BaseConverter):
    """``int`` as an id the relational store can hold (1 to ``db.MAX_ID``, as the OpenAPI
    description says: ``api/openapi.py``), spelled one way only: ASCII digits without a
    sign or a leading zero. Falcon's IntConverter reads with ``int()``, which also takes
    other scripts' digits (``/api/projects/٢٦``), ``+26``, ``026`` and ``2_6``: one
    project answered at many URLs (found in the twentieth session). Any other spelling
    matches no route, a 404 like an id that does not exist."""

    # At most 10 digits: MAX_ID has 10, and int() never sees a long string.
    _CANONICAL = re.compile(r"[1-9][0-9]{0,9}")

    def convert(self, value: str) -> int | None:
        if self._CANONICAL.fullmatch(value) is None:
            return None
        number = int(value)
        return number if number <= db.MAX_ID else None


# Falcon refuses its meta method WEBSOCKET over HTTP before any middleware runs, a 400
# "400 Bad Request" where every other method a route does not serve is a 405 (found in
# review). Both apps let it through to UnknownMethods, which answers it as it answers
# FOO. Websocket connections reach neither app (server.ServerApp closes them).
class App(falcon.App):
    """The management app (WSGI)."""

    __slots__ = ()
    _META_METHODS: ClassVar[frozenset[str]] = frozenset()


class AsgiApp(falcon.asgi.App):
    """The ingest app (ASGI, ``server.py``)."""

    __slots__ = ()
    _META_METHODS: ClassVar[frozenset[str]] = frozenset()


def configure(app: falcon.App) -> None:
    """What the management app and the ingest app (server.py) share: orjson for JSON
    bodies, /x and /x/ as one route, one error shape, path ids that are relational ids,
    and unknown methods answered 405."""
    handler = falcon.media.JSONHandler(
        dumps=lambda obj: orjson.dumps(obj).decode(),
        loads=orjson.loads,
    )
    app.req_options.media_handlers[falcon.MEDIA_JSON] = handler
    app.resp_options.media_handlers[falcon.MEDIA_JSON] = handler
    # Trailing slashes are part of Sentry's ingest URLs; treat /x and /x/ alike everywhere.
    app.req_options.strip_url_path_trailing_slash = True
    # Every {x:int} in either app is a relational id, the ingest app's project ids too
    # (0, -1, 2^31 or an Arabic-Indic digit went on to ingest's key check, a 403). Set
    # before the routes, which compile it in.
    app.router_options.converters["int"] = RelationalId
    app.add_middleware(UnknownMethods())
    errors.install(app)


def create_app(settings: Settings | None = None, *, state: AppState | None = None) -> falcon.App:
    if state is None:
        state = AppState.build(settings or Settings.from_env())
    # Authentication only records the clock; principal(req) authenticates lazily.
    # Answers are processed in reverse: RenderJSON first, so a 500 it makes still rolls
    # the request's transaction back.
    middleware: list[Any] = [
        # First, so that everything after it routes and answers a HEAD as a GET.
        HeadAsGet(),
        DatabaseSessions(state.api_sessions),
        Authentication(state.clock),
        RenderJSON(),
        # Every 401 here names the scheme to use (RFC 9110 11.6.1); ingest's are Sentry's.
        AuthChallenge(),
        SecurityHeaders(),
        # A query parameter on a route that declares no query schema is a 400, as on the
        # lists (health checks and the docs declare nothing and take any).
        RefuseUndeclaredQuery(),
    ]
    app = App(middleware=middleware)
    configure(app)

    app.add_route("/healthz", health.Healthz())
    app.add_route("/readyz", health.Readyz(state))

    # SDK ingest is not here: it runs on the event loop (server.py, docs/INGEST.md).

    # Access: login sessions, team, invitations, projects, members, tokens (docs/API.md).
    # One lockout for logins and password changes: guesses through either count alike.
    throttle = LoginThrottle(state.clock)
    app.add_route("/auth/login", account.Login(state, throttle))
    app.add_route("/auth/logout", account.Logout(state))
    app.add_route("/auth/register", account.Register())
    app.add_route("/auth/invitations/{token}", account.InvitationByToken(state))
    app.add_route("/auth/invitations/{token}/accept", account.AcceptInvitation(state))
    app.add_route("/api/me", account.Me())
    app.add_route("/api/me/password", account.MyPassword(state, throttle))
    app.add_route("/api/team", team.Team())
    app.add_route("/api/team/{user_id:int}", team.TeamUser(state))
    app.add_route("/api/invitations", team.Invitations(state))
    app.add_route("/api/invitations/{invitation_id:int}", team.InvitationItem(state))
    app.add_route("/api/projects", projects.Projects(state))
    app.add_route("/api/projects/{project_id:int}", projects.ProjectItem(state))
    app.add_route("/api/projects/{project_id:int}/members", projects.Members())
    app.add_route("/api/projects/{project_id:int}/members/{user_id:int}", projects.Member())
    app.add_route("/api/projects/{project_id:int}/keys", projects.Keys(state))
    app.add_route("/api/projects/{project_id:int}/keys/{key_id:int}", projects.KeyItem(state))
    app.add_route("/api/tokens", tokens.Tokens(state))
    app.add_route("/api/tokens/{token_id:int}", tokens.TokenItem())

    # Storage usage and cleanup (global admins), and the periodic retention pass
    # (docs/RETENTION.md), started after fork with the rest of state.background.
    app.add_route("/api/storage", storage_api.Storage(state))
    app.add_route("/api/storage/cleanup", storage_api.StorageCleanup(state))
    if not any(isinstance(task, retention.RetentionJob) for task in state.background):
        state.background.append(retention.build_job(state))

    # Management API: logs (read-only), issues, traces (docs/API.md).
    app.add_route("/api/projects/{project_id:int}/logs", logs_api.ProjectLogs(state))
    app.add_route("/api/projects/{project_id:int}/logs/tail", logs_api.ProjectLogsTail(state))
    issue = "/api/projects/{project_id:int}/issues/{issue_id:int}"
    app.add_route("/api/projects/{project_id:int}/issues", issues_api.ProjectIssues(state))
    app.add_route(issue, issues_api.IssueItem(state))
    app.add_route(f"{issue}/events", issues_api.IssueEvents(state))
    # The literal "latest" is matched before the {event_id} field (Falcon tries literals first).
    app.add_route(f"{issue}/events/latest", issues_api.LatestIssueEvent(state))
    app.add_route(f"{issue}/events/{{event_id}}", issues_api.IssueEvent(state))
    app.add_route(f"{issue}/resolve", issues_api.ResolveIssue())
    app.add_route(f"{issue}/mute", issues_api.MuteIssue())
    app.add_route(f"{issue}/unresolve", issues_api.UnresolveIssue())
    events = "/api/projects/{project_id:int}/events"
    app.add_route(events, issues_api.ProjectEvents(state))
    app.add_route(f"{events}/{{event_id}}", issues_api.ProjectEvent(state))
    trace = "/api/projects/{project_id:int}/traces/{trace_id}"
    app.add_route(trace, traces_api.ProjectTrace(state))
    app.add_route(f"{trace}/spans", traces_api.TraceSpans(state))

    # The OpenAPI document and Swagger UI, public, only with the openapi feature (else 404).
    if docs.enabled(state.settings):
        app.add_route(docs.DOCUMENT_PATH, docs.OpenApiDocument(app))
        app.add_route("/docs", docs.SwaggerPage())
        app.add_route("/docs/init.js", docs.SwaggerInit())
        app.add_static_route(docs.ASSETS_PATH, str(docs.assets_dir()))
        app.add_middleware(docs.AssetMethods())
    return app
