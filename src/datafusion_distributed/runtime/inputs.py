"""A task's inputs as local files, and the Arrow IPC scans that replace its input markers."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from datafusion import SessionContext

from ..codec import ScannedFile, replace_subtree, with_file_groups, with_output_names
from ..common.threads import map_concurrently
from ..execution_plans.stage import InputBoundary
from .streams import Channel, source_leaf

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResolvedInput:
    """A stage input (read at `where` in the task's plan) with the local files of each
    partition the task reads.

    `groups` is None when the whole exchange produced no rows: the task then runs the
    original boundary subtree instead (it yields the same empty result with the right schema).
    """

    where: InputBoundary
    groups: tuple[tuple[ScannedFile, ...], ...] | None
    schema: bytes | None  # IPC-serialised schema the producers wrote (None when all empty)
    streams: tuple[tuple[Channel, ...], ...] = ()  # a streamed input's channels, per partition
    query_id: str = ""  # the query whose channels `streams` are


def unique_names(schema: pa.Schema) -> pa.Schema:
    """The schema with duplicate column names made unique, so a scan can address columns.

    Plans refer to columns by position, so renaming inside an exchange is invisible to them.
    """
    names = schema.names
    if len(set(names)) == len(names):
        return schema
    return pa.schema([f.with_name(f"{f.name}#{i}") for i, f in enumerate(schema)], schema.metadata)


_template_lock = threading.Lock()
_templates: dict[bytes, bytes] = {}
# An Arrow IPC file of no columns and no rows, shipped with the package (never written)
EMPTY_ARROW_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "empty.arrow")


def _arrow_scan_template(schema: pa.Schema) -> bytes:
    """Plan bytes of a DataFusion Arrow IPC scan with `schema`, whose files are to be replaced.

    DataFusion plans a scan only over a file that exists: it is planned over `EMPTY_ARROW_FILE`
    with `schema` given (planning reads the file's first bytes, not its schema), so making a
    template writes nothing, and a process killed meanwhile leaves nothing behind."""
    key = schema.serialize().to_pybytes()
    with _template_lock:
        if key in _templates:
            return _templates[key]
    ctx = SessionContext()
    ctx.register_arrow("exchange_input", EMPTY_ARROW_FILE, schema=schema)
    template = ctx.table("exchange_input").execution_plan().to_bytes()
    with _template_lock:
        _templates[key] = template
    return template


def arrow_scan(schema: pa.Schema, groups: Sequence[Sequence[ScannedFile]]) -> bytes:
    """Plan bytes of an Arrow IPC scan of `groups` (one partition each), whose files hold `schema`."""
    return with_file_groups(_arrow_scan_template(schema), [list(g) for g in groups])


def input_leaf(resolved: ResolvedInput) -> bytes:
    """The plan bytes that replace an input marker in a task's plan: a scan of its files, or
    for a streamed input the data plane's leaf, standing where the scan would."""
    where = resolved.where
    if resolved.streams:  # its boundary travels as for files: the leaf takes the scan's place
        assert resolved.schema is not None  # a streamed input declares its schema
        leaf = source_leaf(resolved.query_id, resolved.schema, resolved.streams)
        return replace_subtree(where.boundary, where.boundary_child, leaf) if where.runs_boundary else leaf
    if resolved.groups is None or resolved.schema is None:
        return where.boundary
    schema = pa.ipc.read_schema(pa.py_buffer(resolved.schema))
    file_schema = unique_names(schema)
    scan = with_file_groups(_arrow_scan_template(file_schema), [list(g) for g in resolved.groups])
    if file_schema.names != schema.names:
        scan = with_output_names(scan, schema.names)
    if not where.runs_boundary:
        return scan
    return replace_subtree(where.boundary, where.boundary_child, scan)


FETCH_CONCURRENCY = 4


def resolve_inputs(
    task_inputs: Sequence, locate: Callable[[Any], tuple[ScannedFile, int]], query_id: str = ""
) -> tuple[list[ResolvedInput], int]:
    """Locate every file of a task's inputs, several at once, and group them as the task reads
    them. `task_inputs` are TaskInput messages (of query `query_id`); `locate(location)` gives
    (the local file, bytes fetched over the network: 0 when read in place). Returns the inputs
    and the bytes fetched."""
    locations = [loc for inp in task_inputs for group in (inp.groups or ()) for loc in group]
    located = dict(zip(locations, map_concurrently(locate, locations, FETCH_CONCURRENCY), strict=True))
    resolved = [
        ResolvedInput(
            inp.where,
            None if inp.groups is None else tuple(tuple(located[loc][0] for loc in g) for g in inp.groups),
            inp.schema,
            inp.streams,
            query_id,
        )
        for inp in task_inputs
    ]
    return resolved, sum(size for _, size in located.values())


def local_file(path: str, size: int | None = None) -> ScannedFile:
    """A local file as a scan names it (object store path: absolute path without the root);
    `size` when it is already known."""
    absolute = os.path.abspath(path)
    return ScannedFile(absolute.lstrip("/"), os.path.getsize(absolute) if size is None else size)
