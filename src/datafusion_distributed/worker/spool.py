"""A worker's spool: the folder holding task outputs and fetched inputs, one folder per query.

Paths are always built from validated integers and query ids, never from message text, so a
ticket cannot name a file outside the spool. Each query holds a lease, renewed by its
coordinator's heartbeats and by its tasks' activity (every batch written, every input fetched);
`sweep` removes a query only once neither its lease nor its folder has been touched for the
TTL, so it never deletes a running query, only those a dead coordinator left behind. A released query's folder leaves the spool at once
(renamed into `.released/`) and is deleted on a background thread, so the coordinator's
release call does not wait for the disk. A new spool deletes, the same way, what a previous
worker left in its folder: the query folders and `.released/` (no coordinator can read them
any more: they were served by that worker, which is gone).

With a quota, every byte a task writes (outputs) or fetches (inputs) is charged to its query
before it lands on disk, and given back when the query is released or swept (or, for fetched
inputs, when the task that read them ends). A write that would pass the quota fails its task
with `SpoolQuotaExceeded`.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterable

from ..common.threads import kept_threads
from ..protocol.messages import ProtocolError, TaskKey, check_query_id

RELEASED = ".released"  # folders of released queries, being deleted


def query_files(root: str) -> list[str]:
    """Every file of the queries in the spools under `root`; released queries' files, still
    being deleted, are not counted."""
    found: list[str] = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [name for name in subfolders if name != RELEASED]
        found.extend(os.path.join(folder, name) for name in names)
    return found


def _is_query_id(name: str) -> bool:
    try:
        check_query_id(name)
    except ProtocolError:
        return False
    return True


def _size(path: str) -> int:
    """The size of a file, 0 when it is gone already."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


class SpoolQuotaExceeded(RuntimeError):
    """Writing would take a worker's spool past its quota."""


class Spool:
    """A worker's spool folder: where task outputs and fetched inputs live, with their quota and clean-up."""

    def __init__(self, root: str, ttl_seconds: float = 3600.0, quota_bytes: int | None = None) -> None:
        if quota_bytes is not None and quota_bytes < 0:
            raise ValueError("the spool quota must be a positive number of bytes")
        self.root = os.path.abspath(root)
        self.ttl_seconds = ttl_seconds
        self.quota_bytes = quota_bytes
        self._used: dict[str, int] = {}
        self._inputs: dict[TaskKey, int] = {}  # fetched bytes per task attempt
        self._served: dict[tuple[str, int, int], int] = {}  # (query, stage, task) -> attempt served
        self._leases: dict[str, float] = {}  # query id -> time.time() of its last renewal
        self._lock = threading.Lock()
        self._released = os.path.join(self.root, RELEASED)
        os.makedirs(self.root, exist_ok=True)
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        """Delete what an earlier worker on this folder left (it stopped, or was killed, before
        its queries were released): its queries' folders, and those it was deleting."""
        if os.path.isdir(self._released):
            for name in os.listdir(self._released):
                kept_threads.submit(shutil.rmtree, os.path.join(self._released, name), ignore_errors=True)
        for name in os.listdir(self.root):
            path = os.path.join(self.root, name)
            if _is_query_id(name) and os.path.isdir(path):
                self._discard(path)

    def query_dir(self, query_id: str) -> str:
        """The folder of one query's data (the query id is validated first)."""
        return os.path.join(self.root, check_query_id(query_id))

    def attempt_dir(self, key: TaskKey) -> str:
        """The folder of one task attempt's outputs: two attempts of a task never share files."""
        return os.path.join(
            self.query_dir(key.query_id),
            f"stage-{int(key.stage)}",
            f"task-{int(key.task)}",
            f"attempt-{int(key.attempt)}",
        )

    def attempt_output_path(self, key: TaskKey, partition: int) -> str:
        """The Arrow IPC file of one output partition of a task attempt."""
        return os.path.join(self.attempt_dir(key), f"part-{int(partition)}.arrow")

    def output_path(self, query_id: str, stage: int, task: int, partition: int) -> str:
        """The file of one output partition of a task as served (a ticket names no attempt): the
        attempt that last finished here, attempt 0 (a shipped memory table) when none did."""
        with self._lock:
            attempt = self._served.get((query_id, int(stage), int(task)), 0)
        return self.attempt_output_path(TaskKey(query_id, stage, task, attempt), partition)

    def finish_attempt(self, key: TaskKey) -> None:
        """Serve the outputs of attempt `key` as its task's from now on (it succeeded)."""
        with self._lock:
            self._served[key.query_id, key.stage, key.task] = key.attempt

    def inputs_dir(self, key: TaskKey) -> str:
        """The folder of the inputs one task attempt fetched from other workers."""
        return os.path.join(
            self.query_dir(key.query_id),
            "inputs",
            f"stage-{int(key.stage)}-task-{int(key.task)}-attempt-{int(key.attempt)}",
        )

    # -- quota --------------------------------------------------------------------------------
    def used_bytes(self) -> int:
        """Bytes charged against the quota now, over all queries."""
        with self._lock:
            return sum(self._used.values())

    def charge(self, query_id: str, nbytes: int) -> None:
        """Count `nbytes` more against the quota for `query_id`, or raise SpoolQuotaExceeded."""
        with self._lock:  # called for every batch a task writes: add up only under a quota
            self._leases[query_id] = time.time()  # a task of the query is at work
            if self.quota_bytes is not None and nbytes > 0:
                used = sum(self._used.values())
                if used + nbytes > self.quota_bytes:
                    raise SpoolQuotaExceeded(
                        f"spool quota exceeded: writing {nbytes} more bytes would take the spool to "
                        f"{used + nbytes} bytes, past its quota of {self.quota_bytes} (spool_quota_bytes)"
                    )
            self._used[query_id] = max(0, self._used.get(query_id, 0) + nbytes)

    def charge_input(self, key: TaskKey, nbytes: int) -> None:
        """Charge an input a task attempt is about to fetch (refunded by `remove_inputs`)."""
        self.charge(key.query_id, nbytes)
        with self._lock:
            self._inputs[key] = self._inputs.get(key, 0) + nbytes

    # -- leases -------------------------------------------------------------------------------
    def renew(self, query_ids: Iterable[str]) -> None:
        """Renew the leases of running queries (named by their coordinator's heartbeat): `sweep`
        keeps their folders for another TTL from now."""
        now = time.time()
        with self._lock:
            for query_id in query_ids:
                self._leases[check_query_id(query_id)] = now

    # -- clean-up -----------------------------------------------------------------------------
    def release(self, query_id: str) -> None:
        """Take a query's data out of the spool now; its files are deleted in the background."""
        self._discard(self.query_dir(query_id))
        with self._lock:
            self._used.pop(query_id, None)
            self._leases.pop(query_id, None)
            self._forget_tasks({query_id})

    def _forget_tasks(self, query_ids: set[str]) -> None:
        """Forget the fetched inputs and served attempts of `query_ids` (under the lock)."""
        for key in [k for k in self._inputs if k.query_id in query_ids]:
            del self._inputs[key]
        for task in [t for t in self._served if t[0] in query_ids]:
            del self._served[task]

    def discard_attempt(self, key: TaskKey) -> None:
        """Delete the outputs of one task attempt (it lost to another, or was stopped) and
        refund them; the task's other attempts here keep theirs."""
        folder = self.attempt_dir(key)
        try:
            names = os.listdir(folder)
        except OSError:  # it wrote nothing here, or its folder went with its query
            names = []
        nbytes = sum(_size(os.path.join(folder, name)) for name in names)
        shutil.rmtree(folder, ignore_errors=True)
        with self._lock:
            if self._served.get((key.query_id, key.stage, key.task)) == key.attempt:
                del self._served[key.query_id, key.stage, key.task]
            if key.query_id in self._used:
                self._used[key.query_id] = max(0, self._used[key.query_id] - nbytes)

    def _discard(self, folder: str) -> None:
        """Move `folder` out of the spool (one rename) and delete it on a background thread."""
        target = os.path.join(self._released, f"{os.path.basename(folder)}-{uuid.uuid4().hex[:8]}")
        try:
            os.makedirs(self._released, exist_ok=True)
            os.rename(folder, target)
        except OSError:  # nothing there (the query wrote nothing here), or it cannot be moved
            shutil.rmtree(folder, ignore_errors=True)
            return
        kept_threads.submit(shutil.rmtree, target, ignore_errors=True)

    def remove_inputs(self, key: TaskKey) -> None:
        """Delete the inputs one task attempt fetched (read by that attempt only) and refund them.

        The query's `inputs` folder and the query's folder go too when that leaves them empty,
        so a task that failed before writing anything leaves nothing behind."""
        query_id = key.query_id
        folder = self.inputs_dir(key)
        shutil.rmtree(folder, ignore_errors=True)
        for empty in (os.path.dirname(folder), self.query_dir(query_id)):
            try:
                os.rmdir(empty)  # only ever removes an empty folder
            except OSError:
                break
        with self._lock:
            nbytes = self._inputs.pop(key, 0)
            if query_id in self._used:
                self._used[query_id] = max(0, self._used[query_id] - nbytes)

    def sweep(self, now: float | None = None) -> list[str]:
        """Remove the query folders whose lease and folder were both untouched for longer than
        the TTL; return their ids. Leases that ran out are forgotten."""
        now = time.time() if now is None else now
        removed = []
        for name in os.listdir(self.root):
            if name == RELEASED:
                continue
            path = os.path.join(self.root, name)
            with self._lock:  # a renewal cannot slip in between the decision and the removal
                try:
                    touched = max(os.path.getmtime(path), self._leases.get(name, 0.0))
                except FileNotFoundError:
                    continue
                if now - touched > self.ttl_seconds:
                    self._discard(path)
                    removed.append(name)
        with self._lock:
            for name in removed:
                self._used.pop(name, None)
            self._forget_tasks(set(removed))
            for query_id in [q for q, at in self._leases.items() if now - at > self.ttl_seconds]:
                del self._leases[query_id]
        return removed

    def held_queries(self) -> list[str]:
        """The queries whose data this spool holds now (released ones are out already)."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        return [n for n in names if _is_query_id(n) and os.path.isdir(os.path.join(self.root, n))]

    def files(self) -> list[str]:
        """Every file of the spool's queries (used by health checks and tests)."""
        return query_files(self.root)

    def deleting(self) -> bool:
        """Whether released queries' files are still being deleted."""
        try:
            return bool(os.listdir(self._released))
        except FileNotFoundError:
            return False
