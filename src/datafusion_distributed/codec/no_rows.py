"""Plan bytes that yield no row: what a consumer runs in place of an exchange its producers left
empty, instead of computing the producers' subtree again.

The subtree keeps its nodes, and so its schema and partitioning, but reads nothing: every file
scan keeps its partitions with no file in them (`scan_without_files`), every memory scan its
partitions with no batch in them (`memory_scan_without_rows`). Over such leaves most subtrees
yield no row, but not all (an anti join keeps what the other side would have removed, an
aggregate without GROUP BY yields its row of zeros), so the subtree also runs under a
LocalLimitExec of no row (`no_rows_of`), which yields nothing whatever its input, after at most
one batch of it.
"""

from __future__ import annotations

import pyarrow as pa

from . import fields as F
from .children import node_message
from .scan import file_groups, with_file_groups
from .wire import LEN, WireError, encode_len_field, iter_fields


def no_rows_of(subtree: bytes) -> bytes:
    """`subtree` under a LocalLimitExec of no row (its `fetch` left out: 0)."""
    return encode_len_field(F.LOCAL_LIMIT, encode_len_field(F.LOCAL_LIMIT_INPUT, subtree))


def scan_without_files(scan: bytes) -> bytes:
    """The file scan `scan` with its partitions kept and no file in any of them."""
    return with_file_groups(scan, [[] for _ in file_groups(scan)])


def memory_scan_without_rows(node: bytes) -> bytes:
    """The memory scan `node` with each partition's batches dropped (its stream's schema kept)."""
    scan = node_message(node, F.MEMORY_SCAN)
    kept = []
    for field in iter_fields(scan):
        if field.number == F.MEMORY_PARTITIONS and field.wire_type == LEN and field.end > field.payload_start:
            kept.append(encode_len_field(F.MEMORY_PARTITIONS, _schema_only(field.payload(scan))))
        else:
            kept.append(scan[field.start : field.end])
    return encode_len_field(F.MEMORY_SCAN, b"".join(kept))


def _schema_only(stream: bytes) -> bytes:
    """An Arrow IPC stream of the schema of `stream` and no batch."""
    try:
        schema = pa.ipc.open_stream(pa.py_buffer(stream)).schema
    except pa.ArrowException as exc:
        raise WireError(f"a memory scan partition is not an Arrow IPC stream: {exc}") from exc
    sink = pa.BufferOutputStream()
    pa.ipc.new_stream(sink, schema).close()
    return sink.getvalue().to_pybytes()
