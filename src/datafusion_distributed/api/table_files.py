"""A table format's snapshot as a view of DataFusion's: one Parquet scan per data file, joined
by UNION ALL (see `delta` and `iceberg`)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.fs as pafs
from datafusion import DataFrame, Expr, SessionContext, col

from ..distributed_planner.file_pruning import FileStatistics, scan_path


def column(name: str) -> Expr:
    """The column `name` exactly as written (DataFusion would fold an unquoted name to lower
    case and read a dot as a qualifier)."""
    return col('"' + name.replace('"', '""') + '"')


def register_union(ctx: SessionContext, name: str, scans: list[DataFrame], schema: pa.Schema) -> None:
    """Register on `ctx`, as the view `name`, the UNION ALL of `scans` (each a file's rows with
    the table's columns), or an empty table of `schema` when there is none: the planner shares
    the scans' partitions out over tasks together (see `fragments.split_union_scans`)."""
    frame = (
        functools.reduce(lambda a, b: a.union(b), scans) if scans else ctx.from_arrow(schema.empty_table())
    )
    ctx.register_view(name, frame)


Bounds = tuple[pa.DataType, pa.Array | None, pa.Array | None, pa.Array | None]  # type, min, max, nulls


def _prunable(kind: pa.DataType) -> bool:
    """Whether a column of type `kind` may be pruned by its files' bounds. Not floating point:
    the formats leave NaN out of a file's bounds, and DataFusion orders NaN above every number."""
    return (
        pa.types.is_integer(kind)
        or pa.types.is_decimal(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_date(kind)
        or pa.types.is_timestamp(kind)
        or pa.types.is_boolean(kind)
    )


def file_statistics(
    table: str, paths: list[str], columns: dict[str, Bounds], row_counts: pa.Array
) -> FileStatistics:
    """The statistics of a table's files at `paths` (as DataFusion reads them) for pruning
    scans (see `file_pruning`): for each column of the files, by the name it has in them, its
    type there, and each file's minimum, maximum and null count (each None where the format
    keeps none); a file's bound that the format may have cut short must already be widened,
    or null. Bounds of types unsafe to prune with, or that do not convert, are left out."""
    arrays: dict[str, pa.Array] = {}
    for name, (kind, low, high, nulls) in columns.items():
        for label, bound in (("min", low), ("max", high)):
            if bound is not None and _prunable(kind):
                try:
                    arrays[f"{label}:{name}"] = bound.cast(kind)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                    pass  # a bound of another type than the column's: not used
        if nulls is not None:
            arrays[f"null_count:{name}"] = nulls.cast(pa.uint64())
    arrays["row_count"] = row_counts.cast(pa.uint64())
    batch = pa.RecordBatch.from_arrays(list(arrays.values()), names=list(arrays))
    return FileStatistics(table, tuple(scan_path(p) for p in paths), batch)


def local_path(uri: str) -> str | None:
    """The path on this machine a table's path or `file://` URI names; None for another store."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return unquote(parsed.path)
    return uri if parsed.scheme == "" else None


WRITE_MODES = ("append", "overwrite")


@dataclass(frozen=True)
class S3Options:
    """How to reach a table's S3 bucket (None: the environment's settings)."""

    endpoint: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    region: str | None = None


def table_filesystem(mode: str, table_uri: str, s3: S3Options, writer: str) -> tuple[pafs.FileSystem, str]:
    """The file system a table `writer` writes to with `mode` is in, and the table's folder in
    it: this machine's, or an S3 bucket's, reached with `s3`.

    Raises:
        ValueError: `mode` is none of WRITE_MODES, or the table is in a store other than S3.
    """
    if mode not in WRITE_MODES:
        raise ValueError(f"mode must be one of {', '.join(map(repr, WRITE_MODES))}, not {mode!r}")
    local = local_path(table_uri)
    if local is not None:
        return pafs.LocalFileSystem(), os.path.abspath(local)
    parsed = urlparse(table_uri)
    if parsed.scheme not in ("s3", "s3a"):
        raise ValueError(f"{writer} writes local tables and tables in S3, not {table_uri}")
    endpoint = urlparse(s3.endpoint or "")
    bucket = pafs.S3FileSystem(
        access_key=s3.access_key_id,
        secret_key=s3.secret_access_key,
        region=s3.region,
        endpoint_override=endpoint.netloc or None,
        scheme=endpoint.scheme or "https",
    )
    return bucket, parsed.netloc + parsed.path.rstrip("/")


def url_of(fs: pafs.FileSystem, path: str) -> str:
    """`path` of `fs` as DataFusion names it: a local path, or an s3:// URL."""
    return path if isinstance(fs, pafs.LocalFileSystem) else f"s3://{path}"


def parquet_files(fs: pafs.FileSystem, folder: str) -> list[pafs.FileInfo]:
    """The Parquet files under `folder` of `fs`, by path."""
    found = fs.get_file_info(pafs.FileSelector(folder, recursive=True, allow_not_found=True))
    return sorted((i for i in found if i.is_file and i.path.endswith(".parquet")), key=lambda i: i.path)
