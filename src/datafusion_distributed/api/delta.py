"""Delta Lake tables read and written distributed: the live files of one snapshot, from the
table's own log; a result's files written by the tasks, committed once by deltalake.

`deltalake` (the `[delta]` extra) reads the table's log at a version: its schema, partition
columns, column mapping and the live data files with their partition values. Each live file
becomes one Parquet scan of DataFusion's, read with the table's schema (a column a file lacks,
added later, reads as nulls) and renamed from its physical name (column mapping), its
partition values added as literals; the scans are joined by UNION ALL into the view the table
is registered as. So only the snapshot's files are read, a filter on a partition column prunes
files while the query is planned (a scan whose literal fails the filter is dropped), and the
scans split across tasks like any others. The log's statistics of each file (minimum,
maximum, null count) let the planner skip the files a query's filter cannot match.

What this scan cannot apply keeps the table on deltalake's own provider, which DataFusion runs
on one node with a note: deletion vectors (rows deleted without rewriting their file).
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from datafusion import DataFrame, SessionContext, lit

from ..distributed_planner.file_pruning import FileStatistics, TableStatistics
from ..errors import QueryFailed
from .table_files import (
    S3Options,
    column,
    file_statistics,
    local_path,
    parquet_files,
    register_union,
    table_filesystem,
    url_of,
)

PHYSICAL_NAME = "delta.columnMapping.physicalName"
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"  # how a hive-style folder names a null value
DELETION_VECTORS = "deletionVectors"
STATS = ("min", "max", "null_count")  # the statistics the log keeps per column of each file
STRING_PREFIX = 32  # writers may keep a string's bounds cut to this many characters


@dataclass(frozen=True)
class DeltaRegistration:
    """What `register_delta` registered: the table's `version`, its live `files`, and `reason`,
    why it is read by deltalake's own provider on one node ("" when its scan is distributed)."""

    version: int
    files: int
    reason: str = ""


def _deltalake() -> Any:
    try:
        import deltalake
    except ImportError:
        raise ImportError(
            "Delta tables need the deltalake package: pip install 'datafusion-distributed[delta]'"
        ) from None
    return deltalake


def load_delta(
    table: Any, version: int | str | datetime | None, storage_options: Mapping[str, str] | None
) -> Any:
    """A `deltalake.DeltaTable` at `version` (a version number, a timestamp, or None: the
    latest): `table` itself when it is one and no version is asked, else opened anew."""
    DeltaTable = _deltalake().DeltaTable
    options = dict(storage_options) if storage_options else None
    if isinstance(table, DeltaTable):
        if version is None:
            return table
        table = DeltaTable(table.table_uri, storage_options=options)  # leave the caller's at its version
    else:
        table = DeltaTable(os.fspath(table), storage_options=options)
    if version is not None:
        table.load_as_version(version)
    return table


def _deletion_vectors(dt: Any) -> bool:
    """Whether any live file of `dt` has rows deleted by a deletion vector."""
    features = dt.protocol().reader_features or []
    if DELETION_VECTORS not in features:
        return False
    return pa.table(dt.deletion_vectors()).num_rows > 0


def _file_path(table_uri: str, relative: str) -> str:
    """Where a file of the log is, as DataFusion reads it: a local path for a local table."""
    if "://" in relative:
        return relative
    root = local_path(table_uri)
    if root is not None:
        return os.path.join(root, unquote(relative))
    return table_uri.rstrip("/") + "/" + relative


def register_delta(ctx: SessionContext, name: str, dt: Any, statistics: TableStatistics) -> DeltaRegistration:
    """Register the snapshot `dt` (a loaded `deltalake.DeltaTable`) on `ctx` as `name`, and
    its files' statistics in `statistics`."""
    version = dt.version()
    if _deletion_vectors(dt):
        statistics.register(name, None)
        ctx.register_table(name, dt)
        return DeltaRegistration(
            version, len(dt.file_uris()), "its files have deletion vectors, which only deltalake applies"
        )
    schema = pa.schema(dt.schema().to_arrow())
    partitions = set(dt.metadata().partition_columns)
    physical = {
        f.name: (f.metadata or {}).get(PHYSICAL_NAME.encode(), f.name.encode()).decode() for f in schema
    }
    # what each file holds: the table's other columns, under their physical names
    file_schema = pa.schema(
        [f.with_name(physical[f.name]).remove_metadata() for f in schema if f.name not in partitions]
    )
    table = pa.table(dt.get_add_actions(flatten=True))
    actions = table.to_pylist()
    scans = [
        _scan(ctx, path, action, schema, file_schema, physical, partitions)
        for path, action in _scanned_paths(dt.table_uri, actions, sorted(partitions))
    ]
    register_union(ctx, name, scans, schema)
    paths = [_file_path(dt.table_uri, a["path"]) for a in actions]
    statistics.register(name, _file_statistics(name, paths, table, file_schema, physical))
    return DeltaRegistration(version, len(actions))


def _file_statistics(
    name: str, paths: list[str], actions: pa.Table, file_schema: pa.Schema, physical: dict[str, str]
) -> FileStatistics:
    """The statistics the log keeps for each live file (its `add` action's `stats`), by the
    files' column names: a maximum timestamp, kept to the millisecond below, is raised by one;
    a maximum string of 32 characters or more, which writers may cut short, is not used."""
    logical = {value: key for key, value in physical.items()}
    columns = {}
    for field in file_schema:
        low, high, nulls = (_stat(actions, kind, field.name, logical.get(field.name)) for kind in STATS)
        if high is not None and pa.types.is_timestamp(field.type):
            high = _raised(high)
        if high is not None and (pa.types.is_string(field.type) or pa.types.is_large_string(field.type)):
            high = _without_long_strings(high.cast(field.type))
        columns[field.name] = (field.type, low, high, nulls)
    return file_statistics(name, paths, columns, actions.column("num_records").combine_chunks())


def _stat(actions: pa.Table, kind: str, name: str, logical: str | None) -> pa.Array | None:
    """The column `kind.name` of the flattened add actions (by logical name, else physical)."""
    for key in (f"{kind}.{logical}", f"{kind}.{name}"):
        if key in actions.column_names:
            return actions.column(key).combine_chunks()
    return None


def _without_long_strings(bounds: pa.Array) -> pa.Array:
    """String `bounds` with those of STRING_PREFIX characters or more made null: cut to that
    length, a maximum may be below the true one."""
    return pc.if_else(pc.less(pc.utf8_length(bounds), STRING_PREFIX), bounds, pa.scalar(None, bounds.type))


def _raised(timestamps: pa.Array) -> pa.Array | None:
    """`timestamps` one millisecond later (None when they cannot be)."""
    try:
        return pc.add(timestamps, pa.scalar(timedelta(milliseconds=1)))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


def _scanned_paths(
    table_uri: str, actions: list[dict[str, Any]], partitions: list[str]
) -> list[tuple[str, dict[str, Any]]]:
    """What each scan reads, with an action holding its partition values: a whole folder of a
    local table when the Parquet files under it are exactly live files of one set of partition
    values (an append-only partition: one scan, split by bytes), else each live file alone."""
    groups: dict[tuple[str, tuple], list[dict[str, Any]]] = defaultdict(list)
    for action in actions:
        values = tuple(action.get(f"partition.{p}") for p in partitions)
        groups[(posixpath.dirname(unquote(action["path"])), values)].append(action)
    folders = Counter(folder for folder, _ in groups)
    scanned = []
    for (folder, _), members in groups.items():
        where = _file_path(table_uri, folder) if folder and "://" not in folder else None
        files = {posixpath.basename(unquote(a["path"])) for a in members}
        plain = not any(name.startswith((".", "_")) for name in files)  # names a listing may skip
        if where and plain and len(members) > 1 and folders[folder] == 1 and _parquet_files(where) == files:
            scanned.append((where + os.sep, members[0]))
        else:
            scanned.extend((_file_path(table_uri, a["path"]), a) for a in members)
    return scanned


def _parquet_files(folder: str) -> set[str] | None:
    """The Parquet files under the local `folder` (relative paths), as DataFusion would list
    them; None when it is not a local folder."""
    if not os.path.isdir(folder):
        return None
    return {
        os.path.relpath(os.path.join(where, name), folder).replace(os.sep, "/")
        for where, _, names in os.walk(folder)
        for name in names
        if name.endswith(".parquet")
    }


def _scan(
    ctx: SessionContext,
    path: str,
    action: dict[str, Any],
    schema: pa.Schema,
    file_schema: pa.Schema,
    physical: dict[str, str],
    partitions: set[str],
) -> DataFrame:
    """The live file or folder `path` as a DataFrame of the table's columns, in the table's
    order, with the partition values of `action`."""
    scan = ctx.read_parquet(path, schema=file_schema)
    columns = []
    for field in schema:
        if field.name in partitions:
            value = action.get(f"partition.{field.name}")
            columns.append(lit(pa.scalar(value, type=field.type)).alias(field.name))
        else:
            columns.append(column(physical[field.name]).alias(field.name))
    return scan.select(*columns)


def _s3_options(storage_options: Mapping[str, str] | None) -> S3Options:
    """The S3 settings of deltalake's `storage_options` (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
    AWS_SECRET_ACCESS_KEY, AWS_REGION)."""
    options = {key.upper(): value for key, value in (storage_options or {}).items()}
    return S3Options(
        options.get("AWS_ENDPOINT_URL"),
        options.get("AWS_ACCESS_KEY_ID"),
        options.get("AWS_SECRET_ACCESS_KEY"),
        options.get("AWS_REGION"),
    )


def _add_actions(fs: pafs.FileSystem, root: str, folder: str, partitions: Sequence[str]) -> list[Any]:
    """An AddAction for each Parquet file under `folder` (in the table's folder `root` of `fs`),
    its partition values read from its hive-style folders (`col=value/`), its row count from
    its footer."""
    add_action = _deltalake().transaction.AddAction
    actions = []
    for info in parquet_files(fs, folder):
        values: dict[str, str | None] = dict.fromkeys(partitions)
        for part in posixpath.relpath(posixpath.dirname(info.path), folder).split("/"):
            key, equals, value = part.partition("=")
            if equals and key in values:
                # DataFusion names a null value's folder `col=`; Delta keeps an empty string
                # of a partition column as null too
                values[key] = None if value in ("", NULL_PARTITION) else unquote(value)
        with fs.open_input_file(info.path) as file:
            stats = json.dumps({"numRecords": pq.read_metadata(file).num_rows})
        mtime = int(info.mtime.timestamp() * 1000) if info.mtime else 0
        relative = posixpath.relpath(info.path, root)
        actions.append(add_action(relative, info.size, values, mtime, True, stats))
    return actions


def write_delta(
    write_files: Callable[[str, list[str]], None],
    schema: pa.Schema,
    table_uri: str,
    mode: str,
    partition_by: Sequence[str] | str | None,
    storage_options: Mapping[str, str] | None,
) -> int:
    """Write a frame of `schema` to the Delta table at `table_uri` (made if missing; local or
    in S3) as one commit, and return the table's version once committed: `write_files(folder,
    partition columns)` writes the frame's Parquet files into a new folder of the table, in parallel; then the table's log
    gets one commit adding them (`mode` "append"), or replacing the table's files with them
    ("overwrite"), made by deltalake against the version read before the files were written,
    so a concurrent commit that conflicts is refused, not overwritten. A write or commit that
    fails leaves no commit and deletes the files it wrote."""
    deltalake = _deltalake()
    fs, root = table_filesystem(mode, table_uri, _s3_options(storage_options), "write_delta")
    options = dict(storage_options) if storage_options else None
    asked = [partition_by] if isinstance(partition_by, str) else list(partition_by or [])
    try:
        table = deltalake.DeltaTable(table_uri, storage_options=options)
    except deltalake.exceptions.TableNotFoundError:
        table = None
    partitions = list(table.metadata().partition_columns) if table is not None else asked
    if partition_by is not None and asked != partitions:
        raise ValueError(f"the Delta table {table_uri} is partitioned by {partitions}, not {asked}")
    folder = posixpath.join(root, f"distributed-write-{uuid.uuid4().hex}")
    write_files(url_of(fs, folder), partitions)
    try:
        actions = _add_actions(fs, root, folder, partitions)
        if table is None:
            table = deltalake.DeltaTable.create(
                table_uri, schema=schema, partition_by=partitions or None, storage_options=options
            )
        table.create_write_transaction(actions, mode, schema, partitions or None)
    except Exception as exc:  # deltalake's errors: a conflicting commit, a schema the table refuses
        with contextlib.suppress(OSError):
            fs.delete_dir(folder)
        raise QueryFailed(f"Delta table {table_uri}: the write was not committed: {exc}") from exc
    table.update_incremental()
    return int(table.version())
