"""The HTTP service (API v1, docs/http-api.md) over a folder of labeldist stores.

``create_app(settings)`` builds the FastAPI app, ``serve()`` runs it with uvicorn (``labeldist serve``), and
``Settings`` holds every setting (``LABELDIST_*`` environment variables).
"""

from labeldist.api.main import create_app
from labeldist.api.server import serve
from labeldist.api.settings import Settings, get_settings

__all__ = ["Settings", "create_app", "get_settings", "serve"]
