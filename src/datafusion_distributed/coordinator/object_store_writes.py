"""A distributed file write into an S3 bucket: staged under a hidden prefix, committed by copying.

An object store has no rename, so the commit of `writes.StagedWrite` does not carry over. Each
task attempt writes under its own hidden prefix of the destination instead (the same layout as
a local write), and the commit copies each object of each task's successful attempt to its
final key (a copy inside the store: the bytes do not pass through the coordinator), then
deletes the staging objects. An object appears whole (each write of one is atomic), but the
objects of one query appear one by one during the commit, and a coordinator that dies during
it leaves some copied and the rest staged.

The coordinator reaches the bucket with pyarrow's S3 file system, built from the same
`S3Store` the tasks carry (its own `AWS_*` environment for what the store leaves out).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from urllib.parse import urlparse

import pyarrow.fs as pafs

from ..codec.sink import FileSink, with_csv_formats, with_table_path
from ..execution_plans.object_stores import S3Store, bucket_of
from ..execution_plans.stage import TaskPlan
from .writes import STAGING_FOLDER, StagedWrite

log = logging.getLogger("datafusion_distributed.coordinator")


def s3_filesystem(store: S3Store) -> pafs.S3FileSystem:
    """pyarrow's file system for the bucket of `store`, with its region, endpoint and keys."""
    options: dict = {"region": store.region} if store.region else {}
    if store.access_key_id is not None:
        options.update(access_key=store.access_key_id, secret_key=store.secret_access_key)
        if store.session_token is not None:
            options["session_token"] = store.session_token
    if store.endpoint is not None:
        endpoint = urlparse(store.endpoint)
        options.update(endpoint_override=endpoint.netloc + endpoint.path.rstrip("/"), scheme=endpoint.scheme)
    return pafs.S3FileSystem(**options)


class S3StagedWrite:
    """One query's write into an S3 prefix (the `StagedWrite` of a bucket): each task attempt
    writes under a staging prefix of its own, then the commit (or the clean-up after a failure).

    Attempts are counted here, in the thread that sends tasks, so a task's last attempt sent
    is the one whose result the query keeps: its objects are the ones committed."""

    def __init__(self, sink: FileSink, query_id: str, store: S3Store) -> None:
        self.sink = sink
        self.query_id = query_id
        self.destination = sink.destination.rstrip("/")  # s3://bucket/prefix
        self._fs = s3_filesystem(store)
        self._staging = f"{self.destination}/{STAGING_FOLDER}/{query_id}"
        self._attempts: dict[int, int] = {}
        self._current: dict[int, str] = {}
        self.committed = False

    @staticmethod
    def _path(url: str) -> str:
        """`bucket/key` of an `s3://bucket/key` URL, as pyarrow names objects."""
        return url.removeprefix("s3://")

    def task_plan(self, task: TaskPlan) -> bytes:
        """Task `task`'s plan for its next attempt: its sink writes under a new staging prefix."""
        attempt = self._attempts.get(task.index, -1) + 1
        self._attempts[task.index] = attempt
        previous = self._current.get(task.index)
        if previous is not None:  # a failed attempt: what it wrote is never committed
            self._delete(previous)
        folder = f"{self._staging}/task-{task.index}-attempt-{attempt}"
        self._current[task.index] = folder
        return with_csv_formats(with_table_path(task.plan, folder + "/"))

    def commit(self, tasks: Iterable[int]) -> int:
        """Copy the objects of the current attempt of each of `tasks` to the destination,
        keeping their hive prefixes, as `<query id>-<task>-<name>`; then delete the staging
        objects. Returns the objects copied."""
        copied = 0
        for task in tasks:
            folder = self._current.get(task)
            if folder is None:
                continue
            root = self._path(folder)
            selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
            for info in sorted(self._fs.get_file_info(selector), key=lambda i: i.path):
                if info.type != pafs.FileType.File:
                    continue
                sub, _, name = info.path[len(root) + 1 :].rpartition("/")
                target = "/".join(part for part in (self._path(self.destination), sub) if part)
                self._fs.copy_file(info.path, f"{target}/{self.query_id}-{task}-{name}")
                copied += 1
        self.committed = True
        self._delete(self._staging)
        log.info("write of query %s: %d object(s) committed to %s", self.query_id, copied, self.destination)
        return copied

    def abort(self) -> None:
        """Delete what the query staged (nothing is left after a commit)."""
        self._delete(self._staging)

    def _delete(self, url: str) -> None:
        """Delete every object under `url`; a failure is logged, never raised (clean-up must not
        hide the error that led to it)."""
        try:
            self._fs.delete_dir(self._path(url))
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not delete the staged objects under %s: %s", url, exc)


def staged_write(sink: FileSink, query_id: str, stores: Iterable[S3Store]) -> StagedWrite | S3StagedWrite:
    """The staging and commit of a write split over tasks: into a local folder, or into an S3
    bucket through the store of `stores` that serves it (ValueError if none does: such a write
    is planned on one node, see `DistributedContext.distributed_plan`)."""
    bucket = bucket_of(sink.destination)
    if bucket is None:
        return StagedWrite(sink, query_id)
    for store in stores:
        if store.bucket == bucket:
            return S3StagedWrite(sink, query_id, store)
    raise ValueError(f"no S3Store registered for {sink.destination}: the write cannot be staged")
