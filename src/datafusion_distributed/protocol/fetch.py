"""Fetching a task input: the one way both a worker and the coordinator's head stage get the
file of another task's output partition.

A file that lies in a spool of this host (a cluster the library started) is read where it is;
any other is copied from the worker that holds it, over Flight, into a local folder.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from ..codec import ScannedFile
from ..common.fs import lies_in
from ..runtime.inputs import local_file
from .flight import ClientPool, LocalWriteError
from .messages import FileLocation, Ticket


def readable_in_place(path: str | None, size: int, folders: Sequence[str]) -> bool:
    """Whether a task output at `path` can be read where it is rather than fetched: it lies in
    one of `folders` (spools on this host; links resolved) and has the size its producer
    reported."""
    if path is None:
        return False
    if not lies_in(os.path.realpath(path), folders):
        return False
    try:
        return os.path.getsize(path) == size
    except OSError:
        return False


def fetch_input(
    location: FileLocation,
    query_id: str,
    clients: ClientPool,
    folder: Callable[[], str],
    readable: Sequence[str] = (),
    before_copy: Callable[[FileLocation], None] | None = None,
    writer: str = "this process",
) -> tuple[ScannedFile, int]:
    """The local file of one task input and the bytes fetched for it (0 when read in place).

    `readable` lists the spools this process may read in place; otherwise the file is copied
    into `folder()` (made on demand), after `before_copy(location)` (a worker checks for a
    cancel and charges its spool quota there). Flight errors propagate: the caller decides
    what a lost worker means. A copy that cannot be written here (its folder or file: a full
    disk, no permission) raises `LocalWriteError` naming `writer` ("the coordinator",
    "worker <url>"), never a lost worker."""
    if readable_in_place(location.path, location.size, readable):
        return local_file(location.path, location.size), 0
    if before_copy is not None:
        before_copy(location)
    name = f"from-stage-{location.stage}-task-{location.task}-part-{location.partition}.arrow"
    try:
        dest = os.path.join(folder(), name)
    except OSError as exc:  # the folder could not be made
        raise LocalWriteError(exc.filename or name, exc, writer) from exc
    ticket = Ticket(query_id, location.stage, location.task, location.partition)
    try:
        size = clients.get(location.worker).fetch_to_file(ticket, dest, location.size)
    except LocalWriteError as exc:
        raise LocalWriteError(exc.path, exc.error, writer) from exc.error
    return local_file(dest, size), size
