"""/docs with Swagger UI's assets served by the service itself: FastAPI's default page loads them from a
CDN, so on an offline cluster it stays blank. The assets come from the swagger-ui-bundle package."""
from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_PATH = "/docs"
ASSETS_PATH = "/docs/assets"


def serve_docs_locally(app: FastAPI) -> None:
    """Adds /docs and its assets to an app built with docs_url=None and redoc_url=None (ReDoc has no local bundle)."""
    from swagger_ui_bundle import swagger_ui_path

    app.mount(ASSETS_PATH, StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")

    @app.get(DOCS_PATH, include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=app.openapi_url, title=f"{app.title} - API",
                                   swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
                                   swagger_favicon_url=f"{ASSETS_PATH}/favicon-32x32.png")
