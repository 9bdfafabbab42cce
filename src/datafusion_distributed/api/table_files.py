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
