"""A worker's spool: the folder holding task outputs and fetched inputs, one folder per query.

Paths are always built from validated integers and query ids, never from message text, so a
ticket cannot name a file outside the spool. Queries left behind by a dead coordinator are
removed by `sweep` once older than the TTL.
"""

from __future__ import annotations

import os
import shutil
import time

from ..protocol.messages import check_query_id


class Spool:
    def __init__(self, root: str, ttl_seconds: float = 3600.0):
        self.root = os.path.abspath(root)
        self.ttl_seconds = ttl_seconds
        os.makedirs(self.root, exist_ok=True)

    def query_dir(self, query_id: str) -> str:
        return os.path.join(self.root, check_query_id(query_id))

    def task_dir(self, query_id: str, stage: int, task: int) -> str:
        return os.path.join(self.query_dir(query_id), f"stage-{int(stage)}", f"task-{int(task)}")

    def output_path(self, query_id: str, stage: int, task: int, partition: int) -> str:
        return os.path.join(self.task_dir(query_id, stage, task), f"part-{int(partition)}.arrow")

    def inputs_dir(self, query_id: str, stage: int, task: int, attempt: int) -> str:
        return os.path.join(
            self.query_dir(query_id), "inputs", f"stage-{int(stage)}-task-{int(task)}-attempt-{int(attempt)}"
        )

    def owns(self, path: str) -> bool:
        """Whether `path` lies inside this spool (for inputs read in place)."""
        real = os.path.realpath(path)
        return real.startswith(os.path.realpath(self.root) + os.sep)

    def release(self, query_id: str) -> None:
        shutil.rmtree(self.query_dir(query_id), ignore_errors=True)

    def sweep(self, now: float | None = None) -> list[str]:
        """Remove query folders untouched for longer than the TTL; return their ids."""
        now = time.time() if now is None else now
        removed = []
        for name in os.listdir(self.root):
            path = os.path.join(self.root, name)
            try:
                if now - os.path.getmtime(path) > self.ttl_seconds:
                    shutil.rmtree(path, ignore_errors=True)
                    removed.append(name)
            except FileNotFoundError:
                continue
        return removed

    def files(self) -> list[str]:
        """Every file in the spool (used by health checks and tests)."""
        found = []
        for folder, _, names in os.walk(self.root):
            found.extend(os.path.join(folder, n) for n in names)
        return found
