"""``/api-docs/openapi.json`` and ``/docs`` (Swagger UI), both public, both optional.

They exist only when the openapi feature is on: ``ERRORTRACK_OPENAPI=1`` and the
``openapi`` extra (apispec, swagger-ui-bundle) importable. Otherwise the routes are not
added at all, so both paths answer the standard 404 body like any unknown URL. Swagger
UI's files come from the swagger-ui-bundle wheel and are served by the app itself (no CDN).
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import falcon

from errortrack.config import Settings

log = logging.getLogger(__name__)
DOCUMENT_PATH = "/api-docs/openapi.json"
ASSETS_PATH = "/docs/assets"

_PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>errortrack API reference</title>
  <link rel="stylesheet" href="{assets}/swagger-ui.css">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="{assets}/swagger-ui-bundle.js"></script>
  <script src="/docs/init.js"></script>
</body>
</html>
"""
# A separate file rather than an inline script, so a strict Content-Security-Policy works.
_INIT = f"""window.ui = SwaggerUIBundle({{
  url: "{DOCUMENT_PATH}", dom_id: "#swagger-ui", deepLinking: true
}});
"""


def extra_installed() -> bool:
    return all(importlib.util.find_spec(name) for name in ("apispec", "swagger_ui_bundle"))


def enabled(settings: Settings, *, installed: Callable[[], bool] = extra_installed) -> bool:
    if not settings.openapi:
        return False
    if not installed():
        log.warning("ERRORTRACK_OPENAPI=1 but the openapi extra is not installed: docs are off")
        return False
    return True


def assets_dir() -> Path:
    import swagger_ui_bundle  # the optional extra; only called when enabled()

    return Path(swagger_ui_bundle.swagger_ui_path)


class OpenApiDocument:
    """Built on first request (all routes are in place by then), then served as is."""

    def __init__(self, app: falcon.App) -> None:
        self._app = app
        self._document: dict[str, Any] | None = None

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        if self._document is None:
            from errortrack.api import openapi

            self._document = openapi.build(self._app)
        resp.media = self._document


class SwaggerPage:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = falcon.MEDIA_HTML
        resp.text = _PAGE.format(assets=ASSETS_PATH)


class SwaggerInit:
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = "text/javascript; charset=utf-8"
        resp.text = _INIT


class AssetMethods:
    """405 for a method other than GET, HEAD or OPTIONS under ``ASSETS_PATH``: Falcon's
    static route serves the file whatever the method (``DELETE /docs/assets/x.css`` was
    a 200 with the file), and its route is not a resource the 405 logic sees."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        if req.path.startswith(f"{ASSETS_PATH}/") and req.method not in _ASSET_METHODS:
            raise falcon.HTTPMethodNotAllowed(list(_ASSET_METHODS))


_ASSET_METHODS = ("GET", "HEAD", "OPTIONS")
