"""Apache Iceberg tables read and written distributed: the data files of one snapshot, planned
by pyiceberg; a result's files written by the tasks, added in one pyiceberg transaction.

`pyiceberg` (the `[iceberg]` extra) plans a scan of the table at a snapshot: its schema then,
and the data files with their partition values. Each file becomes one Parquet scan of
DataFusion's, its columns matched to the table's by Iceberg field id (so a renamed column is
read under its old name in older files, a column added later reads as nulls, a promoted type
is cast), an identity partition's column taken from the file's partition value as a literal
(a filter on it then drops whole files while the query is planned). The scans are joined by
UNION ALL into the view the table is registered as (see `table_files`). The manifests'
bounds and null counts of each file let the planner skip the files a query's filter cannot
match.

A snapshot with delete files (merge-on-read deletes, which pyiceberg applies) is read by
pyiceberg into memory in the coordinator instead, with the registration saying so.
"""

from __future__ import annotations

import contextlib
import posixpath
import struct
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from datafusion import DataFrame, Expr, SessionContext, functions, lit

from ..distributed_planner.file_pruning import FileStatistics, TableStatistics
from ..errors import QueryFailed
from .table_files import (
    S3Options,
    column,
    file_statistics,
    parquet_files,
    register_union,
    table_filesystem,
    url_of,
)

FIELD_ID = b"PARQUET:field_id"


@dataclass(frozen=True)
class IcebergRegistration:
    """What `register_iceberg` registered: the table's `snapshot_id` (None: a table without
    snapshots), its data `files`, and `reason`, why it was read into memory by pyiceberg (""
    when its scan is distributed)."""

    snapshot_id: int | None
    files: int
    reason: str = ""


def load_iceberg(table: Any, catalog: Any = None) -> Any:
    """A pyiceberg `Table`: `table` itself, or the table named `table` in `catalog`."""
    try:
        from pyiceberg.table import Table
    except ImportError:
        raise ImportError(
            "Iceberg tables need pyiceberg: pip install 'datafusion-distributed[iceberg]'"
        ) from None
    if isinstance(table, Table):
        return table
    if catalog is None:
        raise ValueError("an Iceberg table given by name needs its catalog (catalog=...)")
    return catalog.load_table(table)


def _data_path(path: str) -> str:
    """A data file's path as DataFusion reads it: a local path, or an object store's URL."""
    return path.removeprefix("file://")


def register_iceberg(
    ctx: SessionContext, name: str, table: Any, snapshot_id: int | None, statistics: TableStatistics
) -> IcebergRegistration:
    """Register `table` (a pyiceberg Table) at `snapshot_id` (None: its current one) on `ctx`,
    and its files' statistics in `statistics`."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.transforms import IdentityTransform

    scan = table.scan(snapshot_id=snapshot_id)
    snapshot = scan.snapshot()
    schema = scan.projection()
    arrow = schema_to_pyarrow(schema, include_field_ids=False)
    tasks = planned_files(scan)
    if any(task.delete_files for task in tasks):
        statistics.register(name, None)
        ctx.register_record_batches(name, [scan.to_arrow().to_batches()])
        reason = "its snapshot has delete files, which pyiceberg applies: read into memory by pyiceberg"
        return IcebergRegistration(snapshot.snapshot_id, len(tasks), reason)
    specs = table.specs()
    scans, written_schemas = [], []
    for task in tasks:
        identity = {
            field.source_id: task.file.partition[i]
            for i, field in enumerate(specs[task.file.spec_id].fields)
            if isinstance(field.transform, IdentityTransform)
        }
        with table.io.new_input(task.file.file_path).open() as footer:  # wherever the table is
            written = pq.read_schema(footer)
        written_schemas.append(written)
        scans.append(_file_scan(ctx, _data_path(task.file.file_path), written, schema, arrow, identity))
    register_union(ctx, name, scans, arrow)
    statistics.register(name, _file_statistics(name, tasks, written_schemas, schema))
    return IcebergRegistration(snapshot.snapshot_id if snapshot else None, len(tasks))


def _file_statistics(name: str, tasks: list[Any], written: list[pa.Schema], schema: Any) -> FileStatistics:
    """The statistics the manifests keep for each data file (its lower and upper bounds, which
    Iceberg keeps wide of the values even when cut short, and null counts), by the files' own
    column names: a name that stands for different fields or types in different files has
    none."""
    from pyiceberg.conversions import from_bytes

    columns: dict[str, tuple[int, pa.DataType]] = {}
    clashing = set()
    for file_schema in written:
        for field_id, field in _fields_by_id(file_schema).items():
            if columns.setdefault(field.name, (field_id, field.type)) != (field_id, field.type):
                clashing.add(field.name)
    bounds = {}
    for column_name, (field_id, kind) in columns.items():
        try:
            field_type = schema.find_field(field_id).field_type
        except ValueError:  # a field the snapshot's schema has dropped
            continue
        if column_name in clashing:
            continue

        def decoded(
            found: dict[int, bytes] | None, field_type: Any = field_type, field_id: int = field_id
        ) -> Any:
            raw = (found or {}).get(field_id)
            try:
                return None if raw is None else from_bytes(field_type, raw)
            except (ValueError, TypeError, struct.error):
                return None

        if pa.types.is_timestamp(kind) and kind.unit != (
            "ns" if "Nano" in type(field_type).__name__ else "us"
        ):
            continue  # the bounds count in another unit than the files' values
        low = [decoded(task.file.lower_bounds) for task in tasks]
        high = [decoded(task.file.upper_bounds) for task in tasks]
        nulls = [(task.file.null_value_counts or {}).get(field_id) for task in tasks]
        bounds[column_name] = (kind, _array(low, kind), _array(high, kind), pa.array(nulls, pa.uint64()))
    paths = [_data_path(task.file.file_path) for task in tasks]
    row_counts = pa.array([task.file.record_count for task in tasks], pa.uint64())
    return file_statistics(name, paths, bounds, row_counts)


def _fields_by_id(written: pa.Schema) -> dict[int, pa.Field]:
    """The top-level columns of a data file, by Iceberg field id."""
    return {int(f.metadata[FIELD_ID]): f for f in written if f.metadata and FIELD_ID in f.metadata}


def _array(values: list[Any], kind: pa.DataType) -> pa.Array | None:
    """`values` as an Arrow array of `kind`; None when they do not convert."""
    try:
        return pa.array(values, kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, TypeError):
        return None


def planned_files(scan: Any) -> list[Any]:
    """The data files of `scan` (pyiceberg's `FileScanTask`s), each with its delete files."""
    return list(scan.plan_files())


def _file_scan(
    ctx: SessionContext,
    path: str,
    written: pa.Schema,
    schema: Any,
    arrow: pa.Schema,
    identity: dict[int, Any],
) -> DataFrame:
    """The data file at `path`, whose own schema is `written`, as a DataFrame of the table's
    columns, matched by field id (by name in a file written without field ids)."""
    by_id = {field_id: f.name for field_id, f in _fields_by_id(written).items()}
    by_name = {f.name: f.name for f in written} if not by_id else {}
    columns = []
    for field, target in zip(schema.fields, arrow, strict=True):
        if field.field_id in identity:
            value = pa.scalar(identity[field.field_id], type=target.type)
            columns.append(lit(value).alias(field.name))
            continue
        found = by_id.get(field.field_id) or by_name.get(field.name)
        if found is None:
            columns.append(lit(pa.scalar(None, type=target.type)).alias(field.name))
        else:
            columns.append(column(found).cast(target.type).alias(field.name))
    return ctx.read_parquet(path).select(*columns)


PARTITION_KEY = "__iceberg_partition_{}"  # the columns a write is partitioned by, not in its files


def partition_keys(table: Any) -> dict[str, Expr]:
    """For each field of `table`'s current partition spec, a column whose value is the same
    for two rows exactly when the field's transform gives them the same partition value: a
    write partitioned by these keys puts each file in one partition, which pyiceberg reads
    back from the statistics of the source columns (kept in the files).

    Raises:
        ValueError: the spec has a transform pyiceberg cannot read back from statistics
            (bucket, void: not order preserving), or truncate of a type other than integers
            and strings.
    """
    from pyiceberg.transforms import (
        DayTransform,
        HourTransform,
        IdentityTransform,
        MonthTransform,
        TruncateTransform,
        YearTransform,
    )
    from pyiceberg.types import IntegerType, LongType, StringType

    schema = table.schema()
    units: dict[type, str] = {
        YearTransform: "year",
        MonthTransform: "month",
        DayTransform: "day",
        HourTransform: "hour",
    }
    keys = {}
    for i, field in enumerate(table.spec().fields):
        name = schema.find_column_name(field.source_id)
        source = column(name)
        kind = type(field.transform)
        source_type = schema.find_field(field.source_id).field_type
        if kind is IdentityTransform:
            key = source
        elif kind in units:  # a timestamp with a zone is in UTC, as Iceberg takes it
            key = functions.date_trunc(units[kind], _without_zone(source, source_type))
        elif kind is TruncateTransform and isinstance(source_type, (IntegerType, LongType)):
            width = lit(field.transform.width)
            key = source - ((source % width) + width) % width
        elif kind is TruncateTransform and isinstance(source_type, StringType):
            key = functions.left(source, lit(field.transform.width))
        else:
            raise ValueError(
                f"write_iceberg cannot write a table partitioned by {field.transform} of {name}: pyiceberg "
                "adds files by the partition values their statistics show, which only identity, truncate "
                "(of integers and strings), year, month, day and hour give"
            )
        keys[PARTITION_KEY.format(i)] = key.cast(pa.string())  # DataFusion writes folders of text
    return keys


def _without_zone(source: Expr, source_type: Any) -> Expr:
    """A timestamp with a zone as the same instant without one (its UTC wall time)."""
    from pyiceberg.types import TimestamptzType

    if isinstance(source_type, TimestamptzType):
        return source.cast(pa.timestamp("us"))
    return source


def write_iceberg(write_files: Callable[[str, dict[str, Expr]], None], table: Any, mode: str) -> int | None:
    """Write a frame into `table` (a pyiceberg Table, as loaded: its snapshot is the one the
    commit is made against; local or in S3, reached with its FileIO's s3.* settings) as one
    commit, and return the snapshot id then current: `write_files(folder, partition keys)`
    writes the frame's Parquet files into a new folder of the table's data, in parallel,
    partitioned by the columns `partition_keys` names (computed, and left out of the files);
    then one transaction adds them (`mode` "append"), or deletes every row and adds them
    ("overwrite"). A concurrent commit that conflicts makes pyiceberg refuse
    it. A write or commit that fails leaves no commit and deletes the files it wrote."""
    from pyiceberg.expressions import AlwaysTrue

    io = table.io.properties
    s3 = S3Options(
        io.get("s3.endpoint"), io.get("s3.access-key-id"), io.get("s3.secret-access-key"), io.get("s3.region")
    )
    fs, root = table_filesystem(mode, table.location(), s3, "write_iceberg")
    keys = partition_keys(table)
    folder = posixpath.join(root, "data", f"distributed-write-{uuid.uuid4().hex}")
    write_files(url_of(fs, folder), keys)
    try:
        paths = [url_of(fs, info.path) for info in parquet_files(fs, folder)]
        with table.transaction() as transaction:
            if mode == "overwrite":
                with warnings.catch_warnings():  # an empty table: the delete matches nothing
                    warnings.filterwarnings("ignore", "Delete operation did not match any records")
                    transaction.delete(AlwaysTrue())  # also makes a concurrent commit conflict
            if paths:
                transaction.add_files(paths)
    except Exception as exc:  # pyiceberg's errors: a concurrent commit, files the table refuses
        with contextlib.suppress(OSError):
            fs.delete_dir(folder)
        raise QueryFailed(f"Iceberg table {table.name()}: the write was not committed: {exc}") from exc
    snapshot = table.current_snapshot()
    return snapshot.snapshot_id if snapshot else None
