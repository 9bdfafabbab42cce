"""The statement a DataFrame write stands for: DataFusion's `DataFrame.write_*` run at once on
one node, so a distributed DataFrame writes by running `COPY (SELECT * FROM <view of the
frame>) TO ...` (or `INSERT INTO <table> SELECT * FROM <view of the frame>`) through its
context, which plans it as a write split over tasks."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

import pyarrow as pa
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


# One part of a table name as DataFusion's TableReference reads it: a plain identifier (which
# it lowercases) or a double-quoted one (kept as written).
_NAME_PART = r'(?:[A-Za-z_][A-Za-z0-9_$]*|"(?:[^"]|"")+")'
_TABLE_NAME = re.compile(rf"{_NAME_PART}(?:\.{_NAME_PART}){{0,2}}")


def table_reference(name: str) -> str | None:
    """`name`, a table name as `DataFrame.write_table` takes it (`table`, `schema.table` or
    `catalog.schema.table`), as SQL naming the same table whatever the session's identifier
    normalisation; None for a name this does not read as DataFusion does."""
    if not _TABLE_NAME.fullmatch(name):
        return None
    parts = re.findall(_NAME_PART, name)
    return ".".join(part if part.startswith('"') else quoted_name(part.lower()) for part in parts)


def insert_statement(view: str, table: str) -> str:
    """`INSERT INTO table SELECT * FROM view`; `table` is SQL already (see `table_reference`)."""
    return f"INSERT INTO {table} SELECT * FROM {quoted_name(view)}"


def _type_family(data_type: pa.DataType) -> object:
    """`data_type`, with the string and binary layouts (plain, large, view) as one type each:
    DataFusion treats them as one logical type, and an INSERT writes them alike."""
    if (
        pa.types.is_string(data_type)
        or pa.types.is_large_string(data_type)
        or pa.types.is_string_view(data_type)
    ):
        return "string"
    if (
        pa.types.is_binary(data_type)
        or pa.types.is_large_binary(data_type)
        or pa.types.is_binary_view(data_type)
    ):
        return "binary"
    return data_type


def inserts_unchanged(frame: pa.Schema, table: pa.Schema) -> bool:
    """Whether SQL's `INSERT INTO table SELECT * FROM frame` inserts exactly the rows
    `DataFrame.write_table` does: the same column names and types, in order. SQL's INSERT
    casts a column to the table's type and matches columns by position; `write_table` does
    neither (it refuses other names, and hands other types to the table as they are)."""
    return frame.names == table.names and all(
        _type_family(a.type) == _type_family(b.type) for a, b in zip(frame, table, strict=True)
    )
