"""Every setting of the service, in one pydantic-settings class read from ``LABELDIST_*`` environment variables.

    LABELDIST_STORES=/data/stores LABELDIST_API_KEY=secret labeldist serve

Tests build a ``Settings(...)`` and pass it to ``create_app``; the server process uses :func:`get_settings`.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Settings of the HTTP service (environment variables ``LABELDIST_<NAME>``, case-insensitive)."""

    model_config = SettingsConfigDict(env_prefix="LABELDIST_", extra="ignore")

    # where and how to serve
    stores: Path = Field(Path("stores"), description="folder whose subfolders are labeldist stores")
    host: str = Field("127.0.0.1", description="bind address")
    port: int = Field(8000, ge=0, le=65535, description="port")
    workers: int = Field(1, ge=1, description="uvicorn worker processes (each opens every store)")
    access_log: bool = Field(True, description="log one line per request")
    worker_healthcheck_s: int = Field(
        120,
        ge=1,
        description="with several workers: seconds a worker may not answer uvicorn's ping before it is "
        "killed and restarted (the first on-demand request of a store may hold the GIL for seconds while torch is "
        "imported or a numba kernel compiled; with uvicorn's 5 s default such a worker is killed mid-request)",
    )
    fast_path: bool = Field(
        True,
        description="answer well-formed neighbour and batch requests past FastAPI's routing (api/routers/fastpath.py): "
        "the same answers for a third (neighbours) to a half (batches) of the server CPU",
    )
    warm: bool = Field(
        True,
        description="at start-up, load every store's labels and distance, and for a searchable store what its first "
        "search needs (a sentence model: seconds), in the background: GET /readyz answers 503 until it is done, "
        "GET /healthz 200 as soon as the stores are open; false (labeldist serve --no-warm): each store's on first "
        "need, and GET /readyz 200 at once",
    )
    api_key: SecretStr | None = Field(
        None,
        description="if set, requests that compute distances on demand must send it as X-API-Key; if not set, "
        "computing on demand is allowed on a loopback host only (disabled when serving on any other address)",
    )

    # caches
    dense_cache_mb: int = Field(
        512, ge=0, description="memory for dense-matrix row blocks, per store (least recently used go first)"
    )
    knn_cache_mb: int = Field(
        128,
        ge=0,
        description="memory for kNN-list row blocks, per store (least recently used go first): the lists are read "
        "from disk a row block at a time, so a worker's memory does not grow with the store's items",
    )
    pair_cache_entries: int = Field(
        1 << 20, ge=0, description="distances computed on demand kept per store (12 bytes an entry)"
    )

    # request limits (a request over one is answered 413)
    max_body_bytes: int = Field(2_000_000, ge=1024, description="largest request body accepted")
    max_items: int = Field(10_000, ge=1, description="most items or pairs in one distances request")
    max_batches: int = Field(256, ge=1, description="most batches (anchors) in one batches request")
    max_batch_size: int = Field(1024, ge=2, description="largest batch size (anchor included)")
    max_pairwise_values: int = Field(
        4_000_000, ge=1, description="most pairwise-matrix entries in one batches response (batches x size^2)"
    )
    max_k: int = Field(1000, ge=1, description="most neighbours in one neighbours request")
    max_label_bytes: int = Field(
        1_000_000,
        ge=1024,
        description="most bytes of labels in one answer with include_labels, estimated before any work from the "
        "store's largest label in a sample (a layout is about 33 kB, a pose 0.5 kB): over it, 413",
    )

    # on-demand computation (api/serving/compute.py): distances a store does not hold, computed from its labels
    compute_budget_s: float = Field(
        10.0, gt=0, description="most estimated seconds of on-demand computation in one request (over it: 413)"
    )
    compute_workers: int = Field(
        2, ge=1, description="on-demand computations running at once, over every store (more wait, then 503)"
    )
    compute_queue_s: float = Field(
        2.0, ge=0, description="seconds a request waits for a computation slot before it is answered 503"
    )
    body_timeout_s: float = Field(
        10.0,
        gt=0,
        description="seconds a request body may take to arrive, from the request's headers to its last byte; a "
        "later one is answered 408 and its connection closed (a body that never ends would hold it forever)",
    )

    @property
    def on_loopback(self) -> bool:
        """Whether ``host`` is a loopback address (127.0.0.0/8, ::1, ``localhost``): only this machine can reach
        the service. Any other host, a name other than ``localhost`` included, may be reachable from elsewhere."""
        host = self.host.strip().strip("[]")
        if host.lower() == "localhost":
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1 (Python < 3.13 calls it not loopback)
        return address.is_loopback or (mapped is not None and mapped.is_loopback)

    @property
    def compute_disabled(self) -> bool:
        """Whether computing distances on demand is off: served off loopback with no API key, anyone who
        reaches the port could otherwise make the service spend its CPU. Stored distances are served all the
        same; setting ``LABELDIST_API_KEY`` enables computing for the clients that send it."""
        return self.api_key is None and not self.on_loopback


@lru_cache
def get_settings() -> Settings:
    """The process's settings, read once from the environment (clear with ``get_settings.cache_clear()``)."""
    return Settings()
