"""File-system helpers."""

from __future__ import annotations

import os


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
