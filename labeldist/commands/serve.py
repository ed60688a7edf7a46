"""The ``labeldist serve`` command (wired in :mod:`labeldist.cli`): the stores of a folder served over HTTP (API v1)
with uvicorn.

labeldist serve --stores stores --port 8000
"""

from __future__ import annotations

import argparse
from typing import Any

from labeldist.core.extras import require
from labeldist.core.options import check_folder, port_number, positive_int


def _serve(args: argparse.Namespace) -> int:
    require("labeldist serve", "serve")
    from labeldist.api.server import serve

    if args.stores is not None:  # named on the command line: a typo must not serve an empty folder
        check_folder(args.stores)
    return serve(stores_dir=args.stores, host=args.host, port=args.port, workers=args.workers, warm=args.warm)


def add_serve_parser(sub: Any) -> None:
    """``serve``, on the sub-parsers ``sub`` of ``labeldist``."""
    serve = sub.add_parser("serve", help="serve the stores of a folder over HTTP (API v1) with uvicorn")
    serve.add_argument("--stores", help="folder of stores (default: LABELDIST_STORES or ./stores)")
    serve.add_argument("--host", help="bind address (default: 127.0.0.1)")
    serve.add_argument("--port", type=port_number, help="port, 1-65535 (default: 8000)")
    serve.add_argument(
        "--workers", type=positive_int, help="uvicorn worker processes, each loading every store (default: 1)"
    )
    warm = serve.add_mutually_exclusive_group()
    warm.add_argument(
        "--warm",
        action="store_const",
        const=True,
        dest="warm",
        help="load every store's labels, and a sentence store's model and embeddings, at start-up, in the "
        "background (GET /readyz answers 503 until done; GET /healthz 200 at once), so that no first request "
        "waits seconds for them (the default, unless LABELDIST_WARM=false)",
    )
    warm.add_argument(
        "--no-warm",
        action="store_const",
        const=False,
        dest="warm",
        help="load each store's labels and models on first need instead: GET /readyz answers 200 at once, and a "
        "store's first search or computed distance waits for them (seconds; a sentence store's model)",
    )
    serve.set_defaults(func=_serve)
