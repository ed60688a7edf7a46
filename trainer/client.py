"""The HTTP client of labeldist's service, now :mod:`labeldist.client.http`; re-exported here for the trainer's
modules and existing imports."""

import time  # noqa: F401  (kept: callers patch labeldist.trainer.client.time.sleep, the client's wait between retries)

from labeldist.client.http import (
    RETRY_STATUS,
    Batches,
    LabelDistClient,
    RequestRejected,
    ServiceError,
    ServiceUnavailable,
    StoreNotFound,
)

__all__ = [
    "RETRY_STATUS",
    "Batches",
    "LabelDistClient",
    "RequestRejected",
    "ServiceError",
    "ServiceUnavailable",
    "StoreNotFound",
]
