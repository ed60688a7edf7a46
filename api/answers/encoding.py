"""Response bodies: JSON (orjson when installed, else pydantic-core) and the binary ``.npz`` option.

Both JSON encoders send float32 values as numbers, and +inf/NaN as ``null``; orjson writes a float32's
shortest decimal (``457.75241``), pydantic-core its float64 one (``457.7524108886719``): parsed and rounded to
float32, both give the stored value exactly. The ``.npz`` encoding
(``Accept: application/x-npz`` or ``?format=npz``) is a NumPy archive of the answer's arrays
(``numpy.load(io.BytesIO(body))``): float32 distances with +inf kept, about a third of the JSON's size and no
text formatting on either side, which pays for pairwise matrices.
"""

from __future__ import annotations

import io
from typing import Any, Literal

import numpy as np
import pydantic_core
from fastapi import Request, Response

try:  # optional: about 2-5x faster for large float arrays
    import orjson
except ImportError:  # pragma: no cover - depends on the environment
    orjson = None

NPZ = "application/x-npz"
Format = Literal["json", "npz"]


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def json_bytes(payload: Any) -> bytes:
    """``payload`` (dicts, lists, NumPy arrays of numbers, strings) as JSON; non-finite floats as null."""
    if orjson is not None:
        return orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)
    return pydantic_core.to_json(_plain(payload), inf_nan_mode="null")


def json_response(payload: Any, status_code: int = 200) -> Response:
    return Response(json_bytes(payload), status_code=status_code, media_type="application/json")


def npz_response(arrays: dict[str, np.ndarray]) -> Response:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return Response(buf.getvalue(), media_type=NPZ)


def wants_npz(request: Request, fmt: Format | None) -> bool:
    """True when the client asked for ``.npz``: ``?format=npz``, or an Accept header naming it (and no
    ``?format=json``)."""
    if fmt is not None:
        return fmt == "npz"
    return NPZ in request.headers.get("accept", "")


#: OpenAPI ``responses=`` entry documenting the .npz alternative of a 200 answer
NPZ_RESPONSE: dict[str, Any] = {
    "content": {NPZ: {"schema": {"type": "string", "format": "binary"}}},
    "description": "JSON by default; a NumPy .npz archive of the same arrays with ?format=npz or "
    "Accept: application/x-npz",
}
