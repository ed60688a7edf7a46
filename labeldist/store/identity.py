"""Which store is at a local path now (:data:`StoreIdentity`: one ``stat`` of its root ``zarr.json``), and whether one
is being replaced there: what the service compares to notice that a store changed on disk."""

from __future__ import annotations

import os

from labeldist.store.layout import sibling

#: which store is at a local path now (:func:`store_identity`): inode, device, change and modification times in ns,
#: and size of its root ``zarr.json``
StoreIdentity = tuple[int, int, int, int, int]


def root_metadata_path(path: str | os.PathLike[str]) -> str:
    """The root ``zarr.json`` of the store folder ``path``: where the manifest lives."""
    return os.path.join(os.fspath(path), "zarr.json")


def store_identity(path: str | os.PathLike[str]) -> StoreIdentity | None:
    """Which store is at the local folder ``path`` now, or None when there is none (no folder, no root metadata,
    or between the two renames of a replacement). See :func:`metadata_identity`."""
    return metadata_identity(root_metadata_path(path))


def metadata_identity(metadata_path: str) -> StoreIdentity | None:
    """The identity of a store by its root ``zarr.json`` (``metadata_path``): one ``stat``, cheap enough for a server
    to compare on every request (:mod:`labeldist.api.serving.registry`).

    Every way a store changes changes it: ``--overwrite`` and creation rename a whole new folder into place, whose
    ``zarr.json`` is another file (another inode, and another change time should the number be reused), and
    publishing, the one write to a store in place, rewrites ``zarr.json`` (where the manifest lives). Nothing
    writes into a complete store in place, so the same identity means the same store."""
    try:
        st = os.stat(metadata_path)
    except (OSError, ValueError):  # absent, a link loop, unreadable; ValueError: a NUL in the path
        return None
    return (st.st_ino, st.st_dev, st.st_ctime_ns, st.st_mtime_ns, st.st_size)


def replacement_under_way(path: str | os.PathLike[str]) -> bool:
    """Whether a store at ``path`` is being replaced right now: the old one renamed aside and the new one not yet
    renamed in (``--overwrite``'s swap, an appended generation's, or a store created over an unfinished one)."""
    return any(os.path.exists(sibling(str(path), what)) for what in ("replaced", "previous", "discarded"))
