"""How many bytes a file scan reads: the work that sizes a leaf stage's task count.

A Parquet scan reads only the column chunks of its projected columns, which can be a small
part of its files (TPC-H q16 reads two of `partsupp`'s five columns: 9% of its bytes).
Counting whole files made small queries look large enough to split, and paid a stage's fixed
cost for work one task does faster. So a Parquet scan of local files counts each file's
share of its projected columns' compressed bytes, read from the file's footer (cached, and
at most `SAMPLED_FILES` footers a scan). Any other scan, or a file whose footer cannot be
read, counts its whole bytes.
"""

from __future__ import annotations

import functools
import os

import pyarrow.parquet as pq

from ..codec import file_groups, scan_kind
from ..codec.feed_scan import projected_columns
from ..codec.scan import object_store_url
from ..execution_plans.plan_node import PlanNode

SAMPLED_FILES = 32  #: footers read for one scan; the others are assumed to share their ratio
LOCAL_STORE = "file:///"


def scanned_bytes(scan: PlanNode) -> int:
    """The bytes `scan` reads: its files' (or byte ranges') sizes, for a Parquet scan of local
    files only its projected columns' share of them."""
    files = [f for group in file_groups(scan.raw) for f in group]
    whole = sum(f.bytes_read for f in files)
    columns = projected_columns(scan.line)
    if (
        not files
        or columns is None
        or scan_kind(scan.raw) != "parquet"
        or object_store_url(scan.raw) != LOCAL_STORE
    ):
        return whole
    sampled = files[:: -(-len(files) // SAMPLED_FILES)]  # at most SAMPLED_FILES, spread out
    found = [_column_share(f.local_path, f.size, columns) for f in sampled]
    shares = [share for share in found if share is not None]
    if len(shares) != len(found):
        return whole
    sampled_bytes = sum(f.bytes_read for f in sampled)
    read = sum(share * f.bytes_read for share, f in zip(shares, sampled, strict=True))
    return round(whole * read / sampled_bytes) if sampled_bytes else 0


def _column_share(path: str, size: int, columns: tuple[str, ...]) -> float | None:
    """The share of the file's column bytes that `columns` take; None if it cannot be read."""
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        return None
    sizes = _column_sizes(path, size, mtime)
    if sizes is None:
        return None
    total = sum(sizes.values())
    return sum(sizes.get(name, 0) for name in columns) / total if total else 1.0


@functools.lru_cache(maxsize=4096)
def _column_sizes(path: str, size: int, mtime: int) -> dict[str, int] | None:
    """Compressed bytes per top-level column of a Parquet file (keyed by its size and
    modification time, so a rewritten file is read again)."""
    try:
        metadata = pq.read_metadata(path)
    except (OSError, ValueError):  # not Parquet after all, or unreadable: count the whole file
        return None
    sizes: dict[str, int] = {}
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for index in range(row_group.num_columns):
            chunk = row_group.column(index)
            name = chunk.path_in_schema.split(".", 1)[0]
            sizes[name] = sizes.get(name, 0) + chunk.total_compressed_size
    return sizes
