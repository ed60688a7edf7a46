"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) that work offline: their JavaScript, CSS and favicon are served
by this app from the installed package ``fastapi-offline``, not fetched from a CDN.

FastAPI's own pages load ``swagger-ui-bundle.js``, ``swagger-ui.css`` and ``redoc.standalone.js`` from a CDN (and
a favicon and, for ReDoc, Google Fonts), so they are blank without the internet. This follows FastAPI's "Custom
Docs UI Static Assets (Self-Hosting)": the app is made with ``docs_url=None, redoc_url=None``, the package's
``static/`` folder is mounted at :data:`STATIC_URL`, and the two pages are FastAPI's HTML helpers pointed at it.
The OAuth2 redirect page Swagger UI needs stays at ``app.swagger_ui_oauth2_redirect_url``. ``/openapi.json`` is
FastAPI's, unchanged.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_URL, REDOC_URL = "/docs", "/redoc"
STATIC_URL = "/static-docs"
PACKAGE = "fastapi_offline"  # PyPI: fastapi-offline (MIT); ships Swagger UI 5 and ReDoc 2's standalone bundle
NO_CDN_DOCS = {"docs_url": None, "redoc_url": None}  # FastAPI's own pages, which load from a CDN: turned off
FILES = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")
#: images only from this server or inline: ReDoc 2's menu shows Redocly's logo from its CDN (hidden when it fails
#: to load), which this keeps the browser from requesting at all; scripts, styles and fetches are left as they are
CSP = {"Content-Security-Policy": "img-src 'self' data: blob:"}


def assets_dir() -> Path:
    """The installed package's folder of Swagger UI and ReDoc files; a one-line error where it is missing."""
    try:
        folder = Path(str(importlib.resources.files(PACKAGE) / "static"))
    except ModuleNotFoundError:
        raise RuntimeError("/docs needs the package fastapi-offline: pip install 'fastapi-offline>=1.7.7'") from None
    missing = [name for name in FILES if not (folder / name).is_file()]
    if missing:
        raise RuntimeError(f"fastapi-offline at {folder} lacks {', '.join(missing)}: reinstall fastapi-offline>=1.7.7")
    return folder


def add_offline_docs(app: FastAPI) -> None:
    """Mount the assets and add ``/docs``, its OAuth2 redirect and ``/redoc`` to ``app`` (made with
    ``docs_url=None, redoc_url=None``). URLs are prefixed with the request's root path, as FastAPI's own pages."""
    assert app.docs_url is None and app.redoc_url is None and app.openapi_url, "FastAPI's CDN pages are turned off"
    openapi_url, oauth2_redirect_url = app.openapi_url, app.swagger_ui_oauth2_redirect_url
    app.mount(STATIC_URL, StaticFiles(directory=assets_dir()), name="static-docs")

    @app.get(DOCS_URL, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        page = get_swagger_ui_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=root + oauth2_redirect_url if oauth2_redirect_url else None,
            swagger_js_url=f"{root}{STATIC_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{STATIC_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{STATIC_URL}/favicon.png",
            init_oauth=app.swagger_ui_init_oauth,
            swagger_ui_parameters=app.swagger_ui_parameters,
        )
        page.headers.update(CSP)
        return page

    if oauth2_redirect_url:

        @app.get(oauth2_redirect_url, include_in_schema=False)
        async def swagger_ui_redirect() -> HTMLResponse:
            return get_swagger_ui_oauth2_redirect_html()

    @app.get(REDOC_URL, include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        page = get_redoc_html(
            openapi_url=root + openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{STATIC_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{STATIC_URL}/favicon.png",
            with_google_fonts=False,  # ReDoc falls back to the system's fonts
        )
        page.headers.update(CSP)
        return page
