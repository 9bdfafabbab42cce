"""File-system helpers."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence


def makedirs(path: str, tries: int = 10) -> None:
    """`os.makedirs(path, exist_ok=True)`, retried when a concurrent clean-up removes an empty
    parent while the folders are being made (a worker drops empty query folders as tasks end)."""
    for _ in range(tries - 1):
        try:
            os.makedirs(path, exist_ok=True)
            return
        except FileNotFoundError:
            continue
    os.makedirs(path, exist_ok=True)


@functools.lru_cache(maxsize=64)
def _real_folder(folder: str) -> str:
    """`folder` with links resolved, once: it is asked for every file checked against it."""
    return os.path.realpath(folder) + os.sep


def lies_in(real_path: str, folders: Sequence[str]) -> bool:
    """Whether `real_path` (links already resolved) lies inside one of `folders` (links
    resolved too): a link planted in a folder cannot make a file outside it pass."""
    return any(real_path.startswith(_real_folder(folder)) for folder in folders)


_GLOB = ("*", "?", "[")


def missing_local_path(path: object) -> str | None:
    """The first of `path` (a local path, a `file://` URL, or a list of them) that names no
    file or folder, as given; None when all exist, or name another store or a glob pattern,
    whose failures only the store can explain."""
    paths = path if isinstance(path, (list, tuple)) else [path]
    for one in paths:
        if not isinstance(one, (str, os.PathLike)):
            continue
        text = os.fspath(one)
        if not isinstance(text, str):
            continue
        local = text[len("file://") :] if text.startswith("file://") else text
        if "://" in local or any(mark in local for mark in _GLOB):
            continue
        if not os.path.exists(local):
            return text
    return None
