"""A distributed file write's staging and commit: each task attempt writes into a hidden
folder of its own inside the destination, and only when the whole query succeeded are the
files of each task's successful attempt moved into place.

Layout, inside the destination folder (hidden: DataFusion, like Spark and Hive, skips files
and folders whose names start with '.' or '_' when it lists a table)::

    <destination>/.datafusion-distributed-staging/<query id>/task-<t>-attempt-<a>/[<col>=<v>/]<file>

The commit renames every file of the successful attempt of each task to
`<destination>/[<col>=<v>/]<query id>-<t>-<file>`: a rename on the same file system, so each
file appears whole, and names unique per query and task, so two queries or two tasks never
overwrite each other and files already in the destination stay. A failed query deletes its
staging folder and leaves the destination as it found it.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

from ..codec.sink import FileSink, with_csv_formats, with_table_path
from ..execution_plans.stage import TaskPlan

log = logging.getLogger("datafusion_distributed.coordinator")

STAGING_FOLDER = ".datafusion-distributed-staging"


def local_folder(url: str) -> Path:
    """The local folder a `file://` URL names (ValueError for any other scheme)."""
    parsed = urlparse(url)
    if parsed.scheme != "file":
        raise ValueError(f"a distributed write needs a local folder, not {url}")
    return Path(url2pathname(parsed.path))


class StagedWrite:
    """One query's write into a local folder: the staging folder each task attempt writes
    to, then the commit (or the clean-up after a failure).

    Attempts are counted here, in the thread that sends tasks, so a task's last attempt sent
    is the one whose result the query keeps: its folder is the one committed."""

    def __init__(self, sink: FileSink, query_id: str) -> None:
        self.sink = sink
        self.query_id = query_id
        self.destination = local_folder(sink.destination)
        self.staging = self.destination / STAGING_FOLDER / query_id
        self._destination_existed = self.destination.exists()
        self._attempts: dict[int, int] = {}
        self._current: dict[int, Path] = {}
        self.committed = False

    def task_plan(self, task: TaskPlan) -> bytes:
        """Task `task`'s plan for its next attempt: its sink writes to a new staging folder."""
        attempt = self._attempts.get(task.index, -1) + 1
        self._attempts[task.index] = attempt
        previous = self._current.get(task.index)
        if previous is not None:  # a failed attempt: what it wrote is never committed
            shutil.rmtree(previous, ignore_errors=True)
        folder = self.staging / f"task-{task.index}-attempt-{attempt}"
        self._current[task.index] = folder
        return with_csv_formats(with_table_path(task.plan, folder.as_uri() + "/"))

    def commit(self, tasks: Iterable[int]) -> int:
        """Move the files of the current attempt of each of `tasks` into the destination,
        keeping their hive folders; then delete the staging folder. Returns the files moved."""
        moved = 0
        for task in tasks:
            folder = self._current.get(task)
            if folder is None or not folder.exists():
                continue  # a task with no rows may write no file
            for root, _, files in os.walk(folder):
                sub = Path(root).relative_to(folder)
                target = self.destination / sub
                target.mkdir(parents=True, exist_ok=True)
                for name in sorted(files):
                    os.rename(Path(root) / name, target / f"{self.query_id}-{task}-{name}")
                    moved += 1
        self.committed = True
        self._remove_staging()
        log.info("write of query %s: %d file(s) committed to %s", self.query_id, moved, self.destination)
        return moved

    def abort(self) -> None:
        """Delete what the query staged (nothing after a commit); a destination folder the
        query made is removed again when nothing else is in it."""
        self._remove_staging()
        if not self.committed and not self._destination_existed:
            try:
                self.destination.rmdir()
            except OSError:
                pass  # not empty, or gone: either way not ours to remove

    def _remove_staging(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)
        try:
            self.staging.parent.rmdir()  # the shared staging root, once no query uses it
        except OSError:
            pass
