"""A client for labeldist's HTTP API v1 (docs/http-api.md), with timeouts and retries.

    with LabelDistClient("http://127.0.0.1:8000") as client:
        batches = client.batches("mpii-pose", count=4, size=150, neighbors=5, seed=0)
        batches.items.shape        # (4, 149): each anchor's 5 nearest first, then random others

Connection errors, timeouts and 5xx answers are retried with exponential backoff (``backoff * 2**attempt``
seconds); a service that stays unreachable raises :class:`ServiceUnavailable` naming the URL. A 404 (unknown
store or item) raises :class:`StoreNotFound` and any other 4xx :class:`RequestRejected`, each carrying the
service's ``detail``. Distances and batches travel as ``.npz`` (float32, +inf kept, no text formatting).

A training loop without a server reads a store in its own process with :class:`labeldist.client.LocalSource`,
which has the same methods and answers the same :class:`~labeldist.client.minibatch.Minibatch`.
"""

from __future__ import annotations

import io
import time
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from labeldist.client.answers import (
    Hits,
    Neighbors,
    RequestRejected,
    ServiceUnavailable,
    StoreNotFound,
)
from labeldist.client.minibatch import Minibatch
from labeldist.errors import UsageError

if TYPE_CHECKING:
    from labeldist.client.store import Store

RETRY_STATUS = frozenset({500, 502, 503, 504})


def _detail(response: httpx.Response) -> Any:
    try:
        return response.json().get("detail", response.text)
    except ValueError:
        return response.text


def _npz(response: httpx.Response) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(response.content), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


class LabelDistClient:
    """One connection pool to a labeldist service; thread-safe (the prefetch threads share it).

    Parameters
    ----------
    url : str
        Base URL, e.g. ``http://127.0.0.1:8000``.
    timeout : float
        Seconds for connecting and for each read.
    retries : int
        Extra attempts after a connection error, timeout or 5xx answer.
    backoff : float
        First wait in seconds between attempts; doubled after each.
    api_key : str or None
        Sent as ``X-API-Key`` (needed when the service has one and must compute distances on demand).
    transport : httpx.BaseTransport or None
        An httpx transport (tests pass ``httpx.MockTransport``).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 30.0,
        retries: int = 4,
        backoff: float = 0.25,
        api_key: str | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if retries < 0 or backoff < 0:
            raise UsageError(f"retries and backoff must be >= 0, got {retries}, {backoff}")
        self.url = url.rstrip("/")
        self.retries, self.backoff = retries, backoff
        self._settings = {"timeout": timeout, "retries": retries, "backoff": backoff, "api_key": api_key}
        headers = {"X-API-Key": api_key} if api_key else {}
        self._http = httpx.Client(base_url=self.url, timeout=timeout, headers=headers, transport=transport)

    def fresh(self) -> LabelDistClient:
        """A new client with the same settings and its own connections: what a forked worker process uses (a
        connection pool must not be shared between processes)."""
        return LabelDistClient(self.url, **self._settings)

    def __enter__(self) -> LabelDistClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError as e:  # connection refused, reset, timeout
                last = f"{type(e).__name__}: {e}"
                continue
            if response.status_code in RETRY_STATUS:
                last = f"HTTP {response.status_code}: {_detail(response)}"
                continue
            if response.status_code == 404:
                detail = _detail(response)
                raise StoreNotFound(f"{method} {self.url}{path}: {detail}", 404, detail)
            if response.status_code >= 400:
                detail = _detail(response)
                raise RequestRejected(
                    f"{method} {self.url}{path}: HTTP {response.status_code}: {detail}", response.status_code, detail
                )
            return response
        raise ServiceUnavailable(
            f"labeldist service at {self.url} did not answer {method} {path} after {self.retries + 1} attempts "
            f"(last: {last}); is `labeldist serve` running there?"
        )

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/healthz").json()

    def open(self, name: str) -> Store:
        """Store ``name`` of the service as one object (:class:`~labeldist.client.store.Store`), read through this
        client.

        Parameters
        ----------
        name : str
            The store's name, as ``GET /v1/stores`` lists it.

        Returns
        -------
        Store
        """
        from labeldist.client.store import Store

        return Store(self, name)

    def stores(self) -> list[dict[str, Any]]:
        """Every store the service knows: manifest + ``name`` (+ ``available``)."""
        return self._request("GET", "/v1/stores").json()["stores"]

    def store(self, name: str) -> dict[str, Any]:
        """One store's manifest + ``name``."""
        return self._request("GET", f"/v1/stores/{name}").json()

    def ids(self, name: str) -> list[str]:
        """The id of every item of a store, in index order."""
        return self._request("GET", f"/v1/stores/{name}/ids").json()["ids"]

    def neighbors(self, store: str, index: int, k: int | None = None) -> Neighbors:
        """The item's ``k`` nearest (all the store has when None): :class:`Neighbors`, ``indices`` int64 and
        ``distances`` float32 (unpacks as that pair)."""
        params = {} if k is None else {"k": k}
        body = self._request("GET", f"/v1/stores/{store}/items/{index}/neighbors", params=params).json()
        dist = [np.inf if d is None else d for d in body["distances"]]
        return Neighbors(np.asarray(body["indices"], dtype=np.int64), np.asarray(dist, dtype=np.float32))

    def search(self, store: str, label: Any, k: int = 10, *, include_labels: bool = False) -> Hits:
        """The exact ``k`` nearest items of ``store`` to a new ``label`` in its kind's JSON form (a sentence, a list
        of captions, a vector's numbers, a pose's joints: docs/http-api.md, "Search by a new label"), nearest
        first, computed by the service on demand; with ``include_labels`` each hit's label too."""
        body = {"label": label, "k": int(k), "include_labels": bool(include_labels)}
        answer = self._request("POST", f"/v1/stores/{store}/search", json=body).json()
        return Hits(
            np.asarray(answer["indices"], dtype=np.int64),
            [str(i) for i in answer["ids"]],
            np.asarray([np.inf if d is None else d for d in answer["distances"]], dtype=np.float32),
            int(answer["computed"]),
            answer.get("labels"),
        )

    def distances(self, store: str, anchor: int, items: np.ndarray | list[int]) -> np.ndarray:
        """Label distances from ``anchor`` to each of ``items``, in that order (float32)."""
        body = {"anchor": int(anchor), "items": np.asarray(items, dtype=np.int64).tolist()}
        response = self._request("POST", f"/v1/stores/{store}/distances", params={"format": "npz"}, json=body)
        return _npz(response)["distances"].astype(np.float32, copy=False)

    def pair_distances(self, store: str, pairs: np.ndarray | list[list[int]]) -> np.ndarray:
        """Label distances of index pairs ``(P, 2)``, in that order (float32)."""
        body = {"pairs": np.asarray(pairs, dtype=np.int64).reshape(-1, 2).tolist()}
        response = self._request("POST", f"/v1/stores/{store}/distances", params={"format": "npz"}, json=body)
        return _npz(response)["distances"].astype(np.float32, copy=False)

    def batches(
        self,
        store: str,
        *,
        anchors: np.ndarray | list[int] | None = None,
        count: int | None = None,
        size: int = 32,
        neighbors: int = 0,
        pairwise: bool = False,
        seed: int | None = None,
        pool: np.ndarray | list[int] | None = None,
        exclude: np.ndarray | list[int] | None = None,
    ) -> Minibatch:
        """One minibatch per anchor (given, or ``count`` drawn by the service): POST .../batches. With ``pool``
        (the items every member is drawn from) or ``exclude`` (the items no minibatch contains), anchors,
        nearest (within the pool) and random others are all items of the pool."""
        if (anchors is None) == (count is None):
            raise UsageError("give exactly one of anchors= and count=")
        body: dict[str, Any] = {"size": int(size), "neighbors": int(neighbors), "pairwise": bool(pairwise)}
        if anchors is not None:
            body["anchors"] = np.asarray(anchors, dtype=np.int64).tolist()
        else:
            body["count"] = int(count)  # type: ignore[arg-type]
        if seed is not None:
            body["seed"] = int(seed)
        if pool is not None:
            body["pool"] = np.asarray(pool, dtype=np.int64).reshape(-1).tolist()
        if exclude is not None:
            body["exclude"] = np.asarray(exclude, dtype=np.int64).reshape(-1).tolist()
        arrays = _npz(self._request("POST", f"/v1/stores/{store}/batches", params={"format": "npz"}, json=body))
        return Minibatch.from_parts(
            arrays["anchors"], arrays["items"], arrays["distances"], arrays.get("pairwise"), int(arrays["seed"])
        )
