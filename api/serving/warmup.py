"""Warming up: unless ``LABELDIST_WARM=false`` (``labeldist serve --no-warm``), a background thread loads at start-up
what each store's first search or computed distance would load (:meth:`~labeldist.view.storeview.StoreView.warm`:
labels, distance, and a sentence store's model and embeddings, seconds each), one store after another, logging
each. ``GET /readyz`` answers from its state: ready once every store is warmed (or at once with ``--no-warm``),
else 503 saying how far it is; ``GET /healthz`` only says that the process is up and its stores open."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass
class Warmup:
    """How far the warm-up is: the stores to warm, those done (name -> seconds), those that failed (name -> why),
    the one loading now; ``done`` once the thread has been through them all (at once when nothing is warmed)."""

    names: list[str] = field(default_factory=list)
    warmed: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    current: str | None = None
    done: bool = True
    started: float = field(default_factory=time.perf_counter)

    def progress(self) -> str:
        """``warming up: 1 of 3 stores loaded (12.3 s); loading 'coco-sentences'``."""
        count = len(self.warmed) + len(self.failed)
        now = f"; loading {self.current!r}" if self.current else ""
        return (
            f"warming up: {count} of {len(self.names)} stores loaded ({time.perf_counter() - self.started:.1f} s){now}"
        )


def start_warmup(registry) -> Warmup:
    """Warm every available store of ``registry`` (a :class:`~labeldist.api.serving.registry.StoreRegistry`, its stores
    open) in a daemon thread; returns the state the thread updates. A store that fails to warm is logged and
    counted: its requests then answer what they would have (a 503 naming what cannot be loaded)."""
    stores = [s for s in registry.refresh_all() if s.available]
    state = Warmup(names=[s.name for s in stores], done=not stores)

    def run() -> None:
        try:
            for store in stores:
                state.current = store.name
                try:
                    state.warmed[store.name] = store.warm()
                except Exception as e:  # noqa: BLE001 - any failure is the store's, reported, never the server's
                    log.warning("%s: could not be warmed up: %s", store.name, e)
                    state.failed[store.name] = str(e)
        finally:  # whatever happens, /readyz stops answering 503 (a store that failed is listed as failed)
            state.current = None
            state.done = True
        log.info(
            "warm-up done: %d stores ready in %.1f s%s",
            len(state.warmed),
            time.perf_counter() - state.started,
            f", {len(state.failed)} failed" if state.failed else "",
        )

    if stores:
        log.info("warming up %d stores in the background: GET /readyz answers 503 until done", len(stores))
        threading.Thread(target=run, name="labeldist-warmup", daemon=True).start()
    return state
