"""``labeldist serve``: run the app with uvicorn."""

from __future__ import annotations

import ipaddress
import logging
import os

from api.settings import get_settings

log = logging.getLogger("labeldist.api")


def serve(
    stores_dir: str | None = None, host: str | None = None, port: int | None = None, workers: int | None = None
) -> int:
    """Serve the stores of ``stores_dir`` on ``host:port`` until interrupted; arguments left None come from
    the ``LABELDIST_*`` settings. Returns the exit status."""
    import uvicorn

    # Through the environment, so that every worker process (LABELDIST_WORKERS > 1) gets the same settings.
    for name, value in (("STORES", stores_dir), ("HOST", host), ("PORT", port), ("WORKERS", workers)):
        if value is not None:
            os.environ[f"LABELDIST_{name}"] = str(value)
    get_settings.cache_clear()
    settings = get_settings()
    if not settings.stores.is_dir():
        log.warning("stores folder %s does not exist: no store will be served", settings.stores)
    try:
        loopback = ipaddress.ip_address(settings.host).is_loopback
    except ValueError:
        loopback = settings.host == "localhost"
    if not loopback and settings.api_key is None:
        log.warning("serving on %s with no API key: anyone who reaches it can make it compute distances",
                    settings.host)  # fmt: skip
    uvicorn.run(
        "api.main:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        timeout_worker_healthcheck=settings.worker_healthcheck_s,
        access_log=settings.access_log,
        log_level="info",
    )
    return 0
