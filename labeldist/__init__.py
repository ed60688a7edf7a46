"""labeldist: pairwise label distances computed with Dask into Zarr stores, served over HTTP."""

__version__ = "0.2.0"

__all__ = ["__version__"]
