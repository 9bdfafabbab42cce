"""A table format's snapshot as a view of DataFusion's: one Parquet scan per data file, joined
by UNION ALL (see `delta` and `iceberg`)."""

from __future__ import annotations

import functools
import os
from urllib.parse import unquote, urlparse

import pyarrow as pa
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


WRITE_MODES = ("append", "overwrite")


def check_write(mode: str, table_uri: str, writer: str) -> str:
    """The local folder of the table `writer` writes to with `mode`.

    Raises:
        ValueError: `mode` is none of WRITE_MODES, or the table is not on this machine's file
            system (the writers commit local tables only).
    """
    if mode not in WRITE_MODES:
        raise ValueError(f"mode must be one of {', '.join(map(repr, WRITE_MODES))}, not {mode!r}")
    parsed = urlparse(table_uri)
    if parsed.scheme not in ("", "file"):
        raise ValueError(f"{writer} writes local tables only, not {table_uri}")
    return os.path.abspath(unquote(parsed.path) if parsed.scheme else table_uri)
