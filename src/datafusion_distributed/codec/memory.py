"""Memory scans inside plan bytes: a table of record batches that travels in the plan itself.

A `DataSourceExec` over a MemTable (`from_pandas`, `register_record_batches`, ...) serialises
as a MemoryScanExecNode holding each partition's batches as an Arrow IPC stream: its bytes are
the table's data. Reading them here tells the planner how large a table is and how many rows it
holds without decoding the plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from . import fields as F
from .wire import LEN, WireError, iter_fields


@dataclass(frozen=True)
class MemoryScan:
    """What a memory scan node holds: its partitions' rows and data bytes, and whether it
    declares an ordering (which a scan of exchange files would not)."""

    rows: int
    data_bytes: int
    partitions: int
    ordered: bool


def memory_scan(node: bytes) -> MemoryScan | None:
    """The memory scan `node` is, or None when it is another node (or bytes we cannot read)."""
    view = memoryview(node)  # the partitions are read in place: a table may be large
    try:
        top = list(iter_fields(view))
        if len(top) != 1 or top[0].number != F.MEMORY_SCAN or top[0].wire_type != LEN:
            return None
        scan = view[top[0].payload_start : top[0].end]
        rows = data_bytes = partitions = 0
        ordered = False
        for field in iter_fields(scan):
            if field.number == F.MEMORY_PARTITIONS and field.wire_type == LEN:
                partitions += 1
                data = scan[field.payload_start : field.end]
                data_bytes += len(data)
                rows += _stream_rows(data)
            elif field.number == F.MEMORY_SORT_INFORMATION:
                ordered = True
    except WireError:
        return None
    return MemoryScan(rows, data_bytes, partitions, ordered)


def _stream_rows(data: memoryview) -> int:
    """Rows of one partition's Arrow IPC stream (an empty partition may hold no stream)."""
    if not len(data):
        return 0
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(data))
        return sum(batch.num_rows for batch in reader)
    except pa.ArrowException as exc:
        raise WireError(f"a memory scan partition is not an Arrow IPC stream: {exc}") from exc
