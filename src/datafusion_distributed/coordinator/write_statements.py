"""The COPY statement a DataFrame write stands for: DataFusion's `DataFrame.write_*` run at
once on one node, so a distributed DataFrame writes by running `COPY (SELECT * FROM <view of
the frame>) TO ...` through its context, which plans it as a write split over tasks."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from datafusion.dataframe import Compression


def quoted_string(text: str) -> str:
    """`text` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def quoted_name(name: str) -> str:
    """`name` as a SQL identifier, its case kept."""
    return '"' + name.replace('"', '""') + '"'


def parquet_compression(compression: str | Compression, level: int | None) -> str:
    """The `format.compression` value for `compression` at `level`, with the default level
    DataFusion's `write_parquet` gives gzip, brotli and zstd when none is given."""
    if isinstance(compression, str):
        compression = Compression.from_str(compression)
    if compression in {Compression.GZIP, Compression.BROTLI, Compression.ZSTD} and level is None:
        level = compression.get_default_level()
    return compression.value if level is None else f"{compression.value}({level})"


def copy_statement(
    view: str,
    path: str | os.PathLike[str],
    file_format: str,
    options: Mapping[str, str],
    partition_by: Sequence[str] | str | None = None,
) -> str:
    """`COPY (SELECT * FROM view) TO 'path' STORED AS file_format [PARTITIONED BY (...)]
    [OPTIONS (...)]`."""
    columns = [partition_by] if isinstance(partition_by, str) else list(partition_by or ())
    sql = f"COPY (SELECT * FROM {quoted_name(view)}) TO {quoted_string(os.fspath(path))} STORED AS {file_format}"
    if columns:
        # DataFusion reads PARTITIONED BY entries as column names, quotes and all
        sql += " PARTITIONED BY (" + ", ".join(columns) + ")"
    if options:
        sql += (
            " OPTIONS ("
            + ", ".join(f"{quoted_string(k)} {quoted_string(v)}" for k, v in options.items())
            + ")"
        )
    return sql
