"""The background prefetch queue, now :mod:`labeldist.client.prefetch`; re-exported here for existing imports."""

from labeldist.client.prefetch import Prefetcher

__all__ = ["Prefetcher"]
