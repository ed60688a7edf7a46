"""Staging and swapping: a complete store is never written over in place.

``--overwrite`` builds the new store in a hidden sibling (:func:`staging_url`), ``labeldist append`` builds the next
generation in another (:func:`append_url`); once complete, :func:`replace_with_staged` swaps it in by two renames
(the old store aside, the new one into place) and removes the old one. A job killed between the two renames is
completed by :func:`finish_replacement`, which every job runs first under the store's lock
(:mod:`labeldist.engine.lock`). The service skips folders whose name starts with a dot, and serves the old store
until the swap.
"""

from __future__ import annotations

import os
import shutil

from labeldist.store import is_local, read_manifest, remove_old_store, sibling


def occupied(url: str) -> bool:
    """True when a local ``url`` holds something (a file, or a non-empty folder) that is not a store."""
    if not is_local(url) or not os.path.exists(url):
        return False
    return not os.path.isdir(url) or bool(os.listdir(url))


def staging_url(url: str) -> str:
    """Where ``--overwrite`` builds the new store beside the old one: a hidden sibling (the service skips
    folders whose name starts with a dot)."""
    return sibling(url, "overwrite")


def append_url(url: str) -> str:
    """Where ``labeldist append`` builds a store's next generation: a hidden sibling, swapped in once complete."""
    return sibling(url, "append")


#: the two ways a complete store is replaced by one built beside it: (where the new one is built, where the old one
#: is moved while they swap) for ``--overwrite`` and for an appended generation
SWAPS = {"overwrite": ("overwrite", "replaced"), "append": ("append", "previous")}


def finish_replacement(url: str) -> None:
    """Complete a swap of a staged store into ``url`` (``--overwrite``'s or an appended generation's) that was
    interrupted between its two renames, and remove the replaced store once the new one is in place. Idempotent;
    nothing to do in the usual case."""
    if not is_local(url):
        return
    for staged_name, aside_name in SWAPS.values():
        staged, aside = sibling(url, staged_name), sibling(url, aside_name)
        if not os.path.exists(url) and os.path.exists(aside) and (read_manifest(staged) or {}).get("complete"):
            os.rename(staged, url)
        if os.path.exists(url) and os.path.lexists(aside):
            remove_old_store(aside, url)


def replace_with_staged(url: str, how: str = "overwrite") -> None:
    """Swap the complete staged store (``how``: ``"overwrite"`` or ``"append"``) into ``url``: the old store is
    renamed aside, the new one renamed into place, then the old one removed. At every moment one complete store
    is at ``url`` or recoverable by :func:`finish_replacement`."""
    staged_name, aside_name = SWAPS[how]
    remove_old_store(sibling(url, aside_name), url)
    os.rename(url, sibling(url, aside_name))
    os.rename(sibling(url, staged_name), url)
    shutil.rmtree(sibling(url, aside_name))
