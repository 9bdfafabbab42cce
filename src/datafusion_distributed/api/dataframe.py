"""DistributedDataFrame: a DataFusion DataFrame whose results are computed across the cluster.

Its transformations (filter, select, join, ...) are DataFusion's own, and return a
DistributedDataFrame so the result still runs distributed; its metadata (schema, plans,
views) is DataFusion's own too, as nothing runs; its results (collect, to_arrow_table,
iteration, the Arrow stream, ...) run the query on the workers, and so do its file writes
(write_parquet, write_csv, write_json, and write_table into a listing table)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Protocol

import pyarrow as pa
from datafusion import DataFrame, DataFrameWriteOptions, ParquetWriterOptions
from datafusion.dataframe import Compression
from datafusion.dataframe_formatter import get_formatter

from ..coordinator.scheduler import QueryRun
from ..errors import QueryFailed, said_all
from ..metrics.analyze import check_explain_format, render_explain
from .delta import write_delta
from .display import Preview, render_error, render_html, render_text
from .engine import Engine, PlannedQuery
from .iceberg import load_iceberg, write_iceberg
from .write_statements import (
    copy_statement,
    insert_statement,
    inserts_unchanged,
    parquet_compression,
    table_reference,
)

if TYPE_CHECKING:
    import pandas as pd
    import polars as pl
    from datafusion.catalog import Table
    from datafusion.expr import Expr, SortKey
    from datafusion.plan import ExecutionPlan, LogicalPlan

    from ..execution_plans.stage import DistributedPlan
    from ..metrics.query_metrics import QueryMetrics

JoinHow = Literal["inner", "left", "right", "full", "semi", "anti"]

# DataFusion's DataFrame methods that write, not offered: they would run the query on one node.
WRITE_METHODS = frozenset({"write_parquet_with_options"})


class _WithEngine(Protocol):
    """A DistributedContext, as a frame sees it: the engine it plans and runs queries with."""

    @property
    def engine(self) -> Engine: ...


def made_on(
    engine: Engine, make: Callable[..., DataFrame], *args: Any, **kwargs: Any
) -> DistributedDataFrame:
    """A DataFrame made by `make` (a call of the engine's SessionContext), distributed;
    DataFusion's errors become QueryFailed."""
    try:
        return DistributedDataFrame(engine, make(*args, **kwargs))
    except Exception as exc:  # DataFusion raises plain Exception (or ValueError)
        raise QueryFailed.of(exc) from (None if said_all(exc) else exc)


def _plain(df: Any) -> Any:
    """`df` as DataFusion takes it: the DataFrame a DistributedDataFrame wraps, else `df` itself."""
    return df.df if isinstance(df, DistributedDataFrame) else df


class DistributedDataFrame:
    """A DataFusion DataFrame whose results are computed across the cluster.

    Made by a `DistributedContext` (`sql`, `table`, `read_parquet`, `from_pydict`, ...), or
    around a DataFrame of the context's own SessionContext: `DistributedDataFrame(dctx, df)`.

    - Transformations (`filter`, `select`, `join`, `df["a"]`, ...) are DataFusion's and return
      a DistributedDataFrame.
    - Metadata runs nothing and is DataFusion's own: `schema`, `logical_plan`,
      `optimized_logical_plan`, `execution_plan` (the single-node plan; `distributed_plan`
      is the one that runs), `into_view`, `parse_sql_expr`, `column`, `find_qualified_columns`.
    - Results run distributed: `collect`, `collect_partitioned`, `collect_column`,
      `execute_stream`, `execute_stream_partitioned`, `to_arrow_table`, `to_pandas`,
      `to_polars`, `to_pylist`, `to_pydict`, `count`, `cache`, `explain`, `show`,
      `for batch in df`, `async for batch in df`, and the Arrow stream interface
      (`pa.table(df)`, `pl.DataFrame(df)`, ...).
    - File writes run distributed, each task writing its share (see docs/writing.md):
      `write_parquet`, `write_csv`, `write_json`, and `write_table` into a listing table
      over a local folder (into a memory table it runs on one node).
      `write_parquet_with_options` is not offered: `df.df` is the plain DataFusion
      DataFrame, which writes from one node.

    Examples:
        >>> dctx = DistributedContext()
        >>> df = dctx.from_pydict({"a": [1, 2, 3], "b": ["x", "y", "x"]})
        >>> df.filter(col("a") > lit(1)).select("b").to_pydict()
        {'b': ['y', 'x']}
    """

    def __init__(self, dctx: _WithEngine | Engine, df: DataFrame) -> None:
        # the context's engine: what the frame plans and runs with (the context makes frames)
        engine: Any = getattr(dctx, "engine", dctx)
        self._engine: Engine = engine
        self._df = df
        self._runs: set[QueryRun] = set()  # executions in progress, for cancel()
        self._runs_lock = threading.Lock()
        self.metrics: QueryMetrics | None = None  # of the last run, once it has ended
        self.sql_text: str | None = None  # the SQL it was made from, for the query history

    @property
    def df(self) -> DataFrame:
        """The underlying (single-node) DataFusion DataFrame."""
        return self._df

    def __getattr__(self, name: str) -> NoReturn:
        """Only for a clear refusal: DataFusion's writes would run the query on one node."""
        if name in WRITE_METHODS:
            raise AttributeError(
                f"DistributedDataFrame.{name} is not available: use .df.{name} to run it on one node"
            )
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def _derived(self, df: Any) -> DistributedDataFrame:
        """A transformation's result, distributed on the same context."""
        # DataFusion's select_exprs returns its internal frame rather than a DataFrame.
        return DistributedDataFrame(self._engine, df if isinstance(df, DataFrame) else DataFrame(df))

    def _sql(self, statement: str) -> DistributedDataFrame:
        """`statement` planned on the context's session, distributed."""
        return made_on(self._engine, self._engine.ctx.sql, statement)

    # -- file writes: a COPY of the frame, split over tasks ---------------------------------
    def write_parquet(
        self,
        path: str | os.PathLike[str],
        compression: str | Compression | ParquetWriterOptions = Compression.ZSTD,
        compression_level: int | None = None,
        write_options: DataFrameWriteOptions | None = None,
        *,
        partition_by: Sequence[str] | str | None = None,
    ) -> None:
        """Write the result as Parquet files into the folder `path`, each task writing its
        share; the files appear when the whole query succeeded (see docs/writing.md).

        The arguments are DataFusion's `DataFrame.write_parquet`'s, plus `partition_by`
        (hive-style folders `col=value/`). DataFusion's `write_options` cannot be read
        back, and `ParquetWriterOptions` has no COPY form: with either, the frame is
        written by DataFusion from one node, as `df.df.write_parquet` would.
        """
        if write_options is not None or isinstance(compression, ParquetWriterOptions):
            # DataFusion's own overloads decide what these arguments may be
            self._df.write_parquet(os.fspath(path), compression, compression_level, write_options)  # type: ignore[arg-type]
            return
        options = {"format.compression": parquet_compression(compression, compression_level)}
        self._copy_to(path, "PARQUET", options, partition_by)

    def write_csv(
        self,
        path: str | os.PathLike[str],
        with_header: bool = False,
        write_options: DataFrameWriteOptions | None = None,
        *,
        partition_by: Sequence[str] | str | None = None,
    ) -> None:
        """Write the result as CSV files into the folder `path`, each task writing its share
        (a header line in each file with `with_header`); see `write_parquet`."""
        if write_options is not None:
            self._df.write_csv(os.fspath(path), with_header, write_options)
            return
        self._copy_to(path, "CSV", {"format.has_header": str(with_header).lower()}, partition_by)

    def write_json(
        self,
        path: str | os.PathLike[str],
        write_options: DataFrameWriteOptions | None = None,
        *,
        partition_by: Sequence[str] | str | None = None,
    ) -> None:
        """Write the result as newline-delimited JSON files into the folder `path`, each task
        writing its share; see `write_parquet`."""
        if write_options is not None:
            self._df.write_json(os.fspath(path), write_options)
            return
        self._copy_to(path, "JSON", {}, partition_by)

    def write_table(self, table_name: str, write_options: DataFrameWriteOptions | None = None) -> None:
        """Insert the frame's rows into the registered table `table_name`, as DataFusion's
        `DataFrame.write_table` does.

        Into a listing table over a local folder (`CREATE EXTERNAL TABLE ... LOCATION
        'folder/'`) it runs as `INSERT INTO table_name SELECT * FROM <this frame>`, each
        task writing its share, the files appearing when the whole query succeeded (see
        docs/writing.md). DataFusion writes from one node, as `df.df.write_table` would,
        into any other table (a memory table lives in the coordinator), with `write_options`
        (they cannot be read back), and when the frame's column names or types differ from
        the table's (DataFusion inserts such a frame without the casts SQL's INSERT adds).
        """
        target = table_reference(table_name)
        if write_options is not None or target is None:
            self._df.write_table(table_name, write_options)
            return
        try:
            table_schema = self._engine.ctx.table(table_name).schema()
        except Exception:  # no such table: DataFusion's own error, from its own call
            table_schema = None
        if table_schema is None or not inserts_unchanged(self._df.schema(), table_schema):
            self._df.write_table(table_name)
            return
        view = f"datafusion_distributed_write_{uuid.uuid4().hex}"
        self._engine.ctx.register_view(view, self._df)
        try:
            insert = self._sql(insert_statement(view, target))
            planned = insert._planned()
            if planned.plan.write is None:  # not split into tasks writing files: DataFusion's own write
                self._df.write_table(table_name)
                return
            # its result, the count of rows written, is dropped as write_table drops it
            for _ in insert._execute_plan(planned, on_restart=lambda: None):
                pass
        finally:
            self._engine.ctx.deregister_table(view)

    def write_delta(
        self,
        table_uri: str | os.PathLike[str],
        mode: str = "append",
        *,
        partition_by: Sequence[str] | str | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> int:
        """Write the result to the Delta table `table_uri` as one commit, each task writing its
        share of the Parquet files; returns the table's version once committed (see
        docs/lakehouse.md).

        Args:
            mode: "append" (add the rows) or "overwrite" (replace the table's rows).
            partition_by: the table's partition columns: those of a new table; an existing
                table's, if given.
            storage_options: deltalake's options for the table's store (S3: the bucket's store
                must be registered on the context too, for the tasks to write through).

        Raises:
            QueryFailed: the write failed, or deltalake refused the commit (a concurrent commit
                that conflicts, a schema the table does not take): nothing was committed.
        """
        options = {"format.compression": parquet_compression(Compression.ZSTD, None)}
        return write_delta(
            lambda folder, partitions: self._copy_to(folder, "PARQUET", options, partitions or None),
            self.schema(),
            os.fspath(table_uri),
            mode,
            partition_by,
            storage_options,
        )

    def write_iceberg(self, table: Any, mode: str = "append", *, catalog: Any = None) -> int | None:
        """Write the result into an Apache Iceberg table as one commit, each task writing its
        share of the Parquet files; returns the table's snapshot id once committed (see
        docs/lakehouse.md).

        Args:
            table: a pyiceberg `Table` (the commit is made against its snapshot as loaded), or
                its identifier in `catalog`.
            mode: "append" (add the rows) or "overwrite" (replace the table's rows).

        Raises:
            QueryFailed: the write failed, or pyiceberg refused the commit (a concurrent commit,
                files whose schema the table does not take): nothing was committed.
        """
        options = {"format.compression": parquet_compression(Compression.ZSTD, None)}

        def write_files(folder: str, keys: dict[str, Expr]) -> None:
            keyed = functools.reduce(lambda df, key: df.with_column(key, keys[key]), keys, self._df)
            self._copy_to(folder, "PARQUET", options, list(keys) or None, keyed)

        return write_iceberg(write_files, load_iceberg(table, catalog), mode)

    def _copy_to(
        self,
        path: str | os.PathLike[str],
        file_format: str,
        options: dict[str, str],
        partition_by: Sequence[str] | str | None,
        frame: DataFrame | None = None,
    ) -> None:
        """Run `COPY (SELECT * FROM <this frame, or `frame`, as a view>) TO path ...` on the
        context."""
        view = f"datafusion_distributed_write_{uuid.uuid4().hex}"
        self._engine.ctx.register_view(view, self._df if frame is None else frame)
        try:
            self._sql(copy_statement(view, path, file_format, options, partition_by)).collect()
        finally:
            self._engine.ctx.deregister_table(view)

    # -- transformations: DataFusion's own, returning a DistributedDataFrame -------------------
    def aggregate(
        self, group_by: Sequence[Expr | str] | Expr | str | None, aggs: Sequence[Expr] | Expr
    ) -> DistributedDataFrame:
        """Group by `group_by` and compute the aggregates `aggs` for each group.

        Examples:
            >>> dctx = DistributedContext()
            >>> df = dctx.from_pydict({"a": [1, 2, 3], "b": ["x", "y", "x"]})
            >>> df.aggregate([col("b")], [f.sum(col("a")).alias("s")]).sort(col("b")).to_pydict()
            {'b': ['x', 'y'], 's': [4, 2]}
        """
        return self._derived(self._df.aggregate(group_by, aggs))

    def alias(self, alias: str) -> DistributedDataFrame:
        """Give this frame the table name `alias` (to qualify its columns in a join)."""
        return self._derived(self._df.alias(alias))

    def cast(self, mapping: dict[str, pa.DataType[Any]]) -> DistributedDataFrame:
        """Cast the columns named in `mapping` to their new types."""
        return self._derived(self._df.cast(mapping))

    def describe(self) -> DistributedDataFrame:
        """Summary statistics of each column (count, null count, mean, min, max, ...)."""
        return self._derived(self._df.describe())

    def distinct(self) -> DistributedDataFrame:
        """The distinct rows."""
        return self._derived(self._df.distinct())

    def distinct_on(
        self, on_expr: list[Expr], select_expr: list[Expr], sort_expr: list[SortKey] | None = None
    ) -> DistributedDataFrame:
        """One row of `select_expr` per distinct `on_expr`: the first in `sort_expr` order."""
        return self._derived(self._df.distinct_on(on_expr, select_expr, sort_expr))

    def drop(self, *columns: str) -> DistributedDataFrame:
        """Without the named columns."""
        return self._derived(self._df.drop(*columns))

    def except_all(
        self, other: DataFrame | DistributedDataFrame, distinct: bool = False
    ) -> DistributedDataFrame:
        """The rows of this frame not in `other` (the set difference)."""
        return self._derived(self._df.except_all(_plain(other), distinct))

    def fill_nan(self, value: float, subset: list[str] | None = None) -> DistributedDataFrame:
        """Replace NaN in floating-point columns (those in `subset`, if given) with `value`."""
        return self._derived(self._df.fill_nan(value, subset))

    def fill_null(self, value: Any, subset: list[str] | None = None) -> DistributedDataFrame:
        """Replace nulls (in the columns of `subset`, if given) with `value`."""
        return self._derived(self._df.fill_null(value, subset))

    def filter(self, *predicates: Expr | str) -> DistributedDataFrame:
        """The rows for which every predicate is true (expressions or SQL strings).

        Examples:
            >>> dctx = DistributedContext()
            >>> df = dctx.from_pydict({"a": [1, 2, 3]})
            >>> df.filter(col("a") > lit(1)).to_pydict()
            {'a': [2, 3]}
            >>> df.filter("a > 1").count()
            2
        """
        return self._derived(self._df.filter(*predicates))

    def head(self, n: int = 5) -> DistributedDataFrame:
        """The first `n` rows."""
        return self._derived(self._df.head(n))

    def intersect(
        self, other: DataFrame | DistributedDataFrame, distinct: bool = False
    ) -> DistributedDataFrame:
        """The rows in both this frame and `other`."""
        return self._derived(self._df.intersect(_plain(other), distinct))

    def join(
        self,
        right: DataFrame | DistributedDataFrame,
        on: str | Sequence[str] | tuple[list[str], list[str]] | None = None,
        how: JoinHow = "inner",
        *,
        left_on: str | Sequence[str] | None = None,
        right_on: str | Sequence[str] | None = None,
        join_keys: tuple[list[str], list[str]] | None = None,
        coalesce_duplicate_keys: bool = True,
    ) -> DistributedDataFrame:
        """Join with `right` on equal columns: `on` (the same names) or `left_on`/`right_on`."""
        plain: Any = self._df  # DataFusion's own overloads check which arguments go together
        joined = plain.join(
            _plain(right),
            on,
            how,
            left_on=left_on,
            right_on=right_on,
            join_keys=join_keys,
            coalesce_duplicate_keys=coalesce_duplicate_keys,
        )
        return self._derived(joined)

    def join_on(
        self, right: DataFrame | DistributedDataFrame, *on_exprs: Expr, how: JoinHow = "inner"
    ) -> DistributedDataFrame:
        """Join with `right` where the expressions `on_exprs` are all true."""
        return self._derived(self._df.join_on(_plain(right), *on_exprs, how=how))

    def limit(self, count: int, offset: int = 0) -> DistributedDataFrame:
        """At most `count` rows, after skipping `offset`."""
        return self._derived(self._df.limit(count, offset))

    def repartition(self, num: int) -> DistributedDataFrame:
        """Spread the rows round-robin over `num` partitions."""
        return self._derived(self._df.repartition(num))

    def repartition_by_hash(self, *exprs: Expr | str, num: int) -> DistributedDataFrame:
        """Spread the rows over `num` partitions by the hash of `exprs`."""
        return self._derived(self._df.repartition_by_hash(*exprs, num=num))

    def select(self, *exprs: Expr | str) -> DistributedDataFrame:
        """The given columns or expressions (column names or expressions).

        Examples:
            >>> dctx = DistributedContext()
            >>> df = dctx.from_pydict({"a": [1, 2], "b": [10, 20]})
            >>> df.select("b", (col("a") * lit(2)).alias("twice")).to_pydict()
            {'b': [10, 20], 'twice': [2, 4]}
        """
        return self._derived(self._df.select(*exprs))

    def select_exprs(self, *args: str) -> DistributedDataFrame:
        """The given SQL expressions, such as `"a + 1 AS b"`."""
        return self._derived(self._df.select_exprs(*args))

    def sort(self, *exprs: SortKey) -> DistributedDataFrame:
        """Sorted by `exprs` (sort expressions, expressions or column names)."""
        return self._derived(self._df.sort(*exprs))

    def sort_by(self, *exprs: Expr | str) -> DistributedDataFrame:
        """Sorted by `exprs`, ascending, nulls last."""
        return self._derived(self._df.sort_by(*exprs))

    def tail(self, n: int = 5) -> DistributedDataFrame:
        """The last `n` rows."""
        return self._derived(self._df.tail(n))

    def transform(self, func: Callable[..., DataFrame], *args: Any) -> DistributedDataFrame:
        """`func(df, *args)` on the underlying DataFusion DataFrame, distributed."""
        return self._derived(self._df.transform(func, *(_plain(a) for a in args)))

    def union(self, other: DataFrame | DistributedDataFrame, distinct: bool = False) -> DistributedDataFrame:
        """The rows of this frame and then `other` (same columns in the same order)."""
        return self._derived(self._df.union(_plain(other), distinct))

    def union_by_name(
        self, other: DataFrame | DistributedDataFrame, distinct: bool = False
    ) -> DistributedDataFrame:
        """The rows of this frame and `other`, their columns matched by name."""
        return self._derived(self._df.union_by_name(_plain(other), distinct))

    def union_distinct(self, other: DataFrame | DistributedDataFrame) -> DistributedDataFrame:
        """The distinct rows of this frame and `other`."""
        return self._derived(self._df.union_distinct(_plain(other)))

    def unnest_columns(
        self, *columns: str, preserve_nulls: bool = True, recursions: list[tuple[str, str, int]] | None = None
    ) -> DistributedDataFrame:
        """A row for each element of the list (or struct) columns named."""
        return self._derived(
            self._df.unnest_columns(*columns, preserve_nulls=preserve_nulls, recursions=recursions)
        )

    def window(self, *exprs: Expr) -> DistributedDataFrame:
        """With window function columns added."""
        return self._derived(self._df.window(*exprs))

    def with_column(self, name: str, expr: Expr | str) -> DistributedDataFrame:
        """With the column `name` added (or replaced), computed by `expr`."""
        return self._derived(self._df.with_column(name, expr))

    def with_column_renamed(self, old_name: str, new_name: str) -> DistributedDataFrame:
        """With the column `old_name` renamed to `new_name`."""
        return self._derived(self._df.with_column_renamed(old_name, new_name))

    def with_columns(
        self, *exprs: Expr | str | Iterable[Expr | str], **named_exprs: Expr | str
    ) -> DistributedDataFrame:
        """With several columns added (or replaced): aliased expressions, or `name=expr`."""
        return self._derived(self._df.with_columns(*exprs, **named_exprs))

    # -- DataFusion parity: metadata passed through, results through the Arrow protocols -------
    def __getitem__(self, key: str | list[str]) -> DistributedDataFrame:
        """The column `key` (or the columns of a list of names), like `select`."""
        return self._derived(self._df[key])

    def logical_plan(self) -> LogicalPlan:
        """The unoptimized logical plan (DataFusion's; nothing runs)."""
        return self._df.logical_plan()

    def optimized_logical_plan(self) -> LogicalPlan:
        """The logical plan after DataFusion's optimizer (nothing runs)."""
        return self._df.optimized_logical_plan()

    def execution_plan(self) -> ExecutionPlan:
        """DataFusion's single-node physical plan, planned on the wrapped context (nothing runs).

        It is not what runs on the cluster: `distributed_plan()` is the plan cut into stages,
        and `explain()` shows it."""
        return self._df.execution_plan()

    def into_view(self, temporary: bool = False) -> Table:
        """This query as a view, for `register_table` (queries of the view run distributed
        like any other query of the context). `dctx.register_view(name, df)` does both.

        Examples:
            >>> dctx = DistributedContext()
            >>> dctx.register_table("small", dctx.sql("SELECT 1 AS value").into_view())
            >>> dctx.sql("SELECT value + 1 AS two FROM small").to_pydict()
            {'two': [2]}
        """
        return self._df.into_view(temporary)

    def parse_sql_expr(self, expr: str) -> Expr:
        """`expr`, SQL expression text, parsed against this frame's schema (nothing runs)."""
        return self._df.parse_sql_expr(expr)

    def column(self, name: str) -> Expr:
        """The column `name` as an expression qualified with its table (useful after joins)."""
        return self._df.column(name)

    def col(self, name: str) -> Expr:
        """Alias of `column`."""
        return self.column(name)

    def find_qualified_columns(self, *names: str) -> list[Expr]:
        """The columns `names` as expressions qualified with their tables."""
        return self._df.find_qualified_columns(*names)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        """Stream the result, as `execute_stream()` does: `for batch in df`.

        The batches are `pyarrow.RecordBatch`es (DataFusion's own iteration yields its
        `RecordBatch` wrapper, whose `to_pyarrow()` gives the same)."""
        return self.execute_stream()

    def __aiter__(self) -> AsyncIterator[pa.RecordBatch]:
        """Stream the result without blocking an event loop: `async for batch in df`.

        The batches are read in a thread of their own, one at a time; leaving the loop early
        ends the query as closing `execute_stream()` does."""
        return self._stream_async()

    async def _stream_async(self) -> AsyncIterator[pa.RecordBatch]:
        end = object()
        # One thread for the stream (its planning too, off the event loop): a read left running
        # by a cancelled reader ends before the stream is closed, never at the same time.
        reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="datafusion-distributed-aiter")
        try:
            stream = await asyncio.wrap_future(reader.submit(self.execute_stream))
        except BaseException:
            reader.shutdown(wait=False)
            raise
        try:
            while (batch := await asyncio.wrap_future(reader.submit(next, stream, end))) is not end:
                yield batch
        finally:
            reader.submit(stream.close)
            reader.shutdown(wait=False)

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The result as an Arrow C stream (the Arrow PyCapsule interface), so that
        `pa.table(df)`, `pa.RecordBatchReader.from_stream(df)`, `pl.DataFrame(df)`, DuckDB and
        other Arrow consumers read it directly.

        The query starts when the consumer reads the first batch, and batches are handed over
        as the coordinator receives them: the result is never gathered in memory here.
        `requested_schema` (a schema, or its capsule) is applied as pyarrow's reader applies it.
        """
        schema = self.schema()
        planned = self._planned()  # a query that does not plan fails here, not mid-read
        batches = (_as_schema(batch, schema) for batch in self._execute_plan(planned))
        reader = pa.RecordBatchReader.from_batches(schema, batches)
        return reader.__arrow_c_stream__(requested_schema)

    def collect_partitioned(self) -> list[list[pa.RecordBatch]]:
        """Run the query and return its result batches by output partition.

        The result of a distributed query reaches the coordinator as one stream (the final
        stage's partitions merged, as DataFusion's `execute_stream` merges them), so this is
        a single partition: `[df.collect()]`."""
        return [self.collect()]

    def execute_stream_partitioned(self) -> list[Iterator[pa.RecordBatch]]:
        """One stream per output partition: a single one, `execute_stream()`, for the reason
        `collect_partitioned` gives."""
        return [self.execute_stream()]

    def collect_column(self, column_name: str) -> pa.Array | pa.ChunkedArray:
        """Run the query for the column `column_name` alone and return its values as one array."""
        table = self.select(self._df.column(column_name)).to_arrow_table()
        return table.column(0).combine_chunks()

    def cache(self) -> DistributedDataFrame:
        """Run the query once and return a DistributedDataFrame over its result, so that later
        queries on it read the result instead of computing it again.

        The result is kept in the coordinator's memory, as a memory table of this context's
        SessionContext (not registered under any name), and travels to the workers with the
        plans of the queries that read it; it is freed with the DataFrames that use it.

        Examples:
            >>> dctx = DistributedContext()
            >>> cached = dctx.sql("SELECT * FROM (VALUES (1), (2), (3)) AS t(a)").cache()
            >>> cached.filter(col("a") > lit(1)).count()
            2
        """
        batches = self.collect()
        schema = self.schema()
        ctx = self._engine.ctx
        # A memory table is made through a name only; the frame keeps the table itself, so
        # the name is dropped at once and the data lives as long as the frames reading it.
        name = f"__cache_{uuid.uuid4().hex}"
        frame = ctx.create_dataframe([[_as_schema(b, schema) for b in batches]], name=name, schema=schema)
        ctx.deregister_table(name)
        return DistributedDataFrame(self._engine, frame)

    # -- what the query is and how it runs ------------------------------------------------------
    def schema(self) -> pa.Schema:
        """The schema of the result."""
        return self._df.schema()

    def distributed_plan(self) -> DistributedPlan:
        """The plan for the current workers: the stages the query is cut into."""
        return self._planned().plan

    def _planned(self) -> PlannedQuery:
        return self._engine.plan(self._df)

    def execute_stream(self, progress: bool | None = None) -> Generator[pa.RecordBatch, None, None]:
        """Stream the result batch by batch; memory stays bounded by what is in flight.
        `progress` shows a live progress line (default: the context's `progress`).

        A worker lost while the result is read is recovered until the first batch is handed
        out; after that the stream raises `ResultStreamLost` (a `QueryFailed`), and the query
        must be run again (`collect()` recovers at any point)."""
        return self._execute_plan(self._planned(), progress)

    def _execute_plan(
        self,
        planned: PlannedQuery,
        progress: bool | None = None,
        on_restart: Callable[[], None] | None = None,
    ) -> Generator[pa.RecordBatch, None, None]:
        """Run `planned`, streaming its result; `on_restart` as for `QueryRun.execute`."""
        handlers = self._engine.handlers
        if self._engine.progress if progress is None else progress:
            from ..metrics.progress import ProgressDisplay

            handlers = handlers.with_handlers([ProgressDisplay()])
        run = self._engine.run(planned, handlers, self._description())
        stream = self._cancellable(run, on_restart)
        try:
            with contextlib.closing(stream):
                yield from stream
        finally:
            self.metrics = run.state.metrics

    def _description(self) -> str:
        """The query as the history shows it: its SQL, or its logical plan when it was not
        made from SQL (or was transformed since)."""
        if self.sql_text is not None:
            return self.sql_text
        try:
            return self._df.logical_plan().display_indent()
        except Exception:  # only a description: a query must not fail for it
            return ""

    def cancel(self) -> bool:
        """Stop every execution of this DataFrame in progress (safe from any thread).

        Each raises `QueryCancelled` in the thread running it within a second, and its tasks
        on the workers stop their work within about as long and have their spool data deleted.
        Returns whether anything was running."""
        with self._runs_lock:
            runs = list(self._runs)
        for run in runs:
            run.state.cancel_scope.cancel()
        return bool(runs)

    def _cancellable(
        self, run: QueryRun, on_restart: Callable[[], None] | None
    ) -> Generator[pa.RecordBatch, None, None]:
        run.state.cancel_scope.start(run.state.config.query_timeout)
        with self._runs_lock:
            self._runs.add(run)
        try:
            yield from run.execute(on_restart)
        finally:
            with self._runs_lock:
                self._runs.discard(run)

    # -- results: the query runs on the workers -------------------------------------------------
    def collect(self, progress: bool | None = None) -> list[pa.RecordBatch]:
        """Run the query and return all of its result batches.

        Examples:
            >>> dctx = DistributedContext()
            >>> batches = dctx.sql("SELECT * FROM (VALUES (1), (2), (3)) AS t(a)").collect()
            >>> sum(batch.num_rows for batch in batches)
            3
        """
        batches: list[pa.RecordBatch] = []
        # Nothing is handed out before the end: a worker lost while the result is read costs a
        # recomputation, and the result is read again from its start.
        for batch in self._execute_plan(self._planned(), progress, on_restart=batches.clear):
            batches.append(batch)
        return batches

    def to_arrow_table(self, progress: bool | None = None) -> pa.Table:
        """Run the query and return its result as one Arrow table.

        Examples:
            >>> dctx = DistributedContext()
            >>> table = dctx.sql("SELECT 1 AS a, 'x' AS b").to_arrow_table()
            >>> table.column_names, table.num_rows
            (['a', 'b'], 1)
        """
        batches = self.collect(progress)
        if not batches:
            return self.schema().empty_table()
        schema = batches[0].schema
        return pa.Table.from_batches([b if b.schema == schema else b.cast(schema) for b in batches], schema)

    def to_pandas(self) -> pd.DataFrame:
        """Run the query and return its result as a pandas DataFrame."""
        return self.to_arrow_table().to_pandas()

    def to_polars(self) -> pl.DataFrame:
        """Run the query and return its result as a polars DataFrame."""
        import polars as pl

        frame = pl.from_arrow(self.to_arrow_table())
        assert isinstance(frame, pl.DataFrame)  # a table gives a frame (an array, a series)
        return frame

    def to_pylist(self) -> list[dict]:
        """Run the query and return its rows as dictionaries."""
        return self.to_arrow_table().to_pylist()

    def to_pydict(self) -> dict[str, list]:
        """Run the query and return its columns as lists."""
        return self.to_arrow_table().to_pydict()

    def count(self) -> int:
        """Number of rows, counted on the workers."""
        from datafusion import functions as f

        return int(self.aggregate([], [f.count_star().alias("n")]).to_pylist()[0]["n"])

    def show(self, num: int = 20) -> None:
        """Print the first `num` rows as a table."""
        print(format_table(self.limit(num).to_arrow_table()))

    def explain(self, analyze: bool = False, verbose: bool = False, format: str = "text") -> None:
        """Print the distributed plan: stages, their tasks, boundaries and the files tasks read.

        Args:
            analyze: run the query first and show what it measured: per stage its tasks, rows,
                bytes written and read; per node DataFusion's metrics summed over the tasks.
            verbose: with `analyze`, every metric, and each task's own line.
            format: "text", "graphviz" (DOT) or "mermaid": the last two draw the stage DAG
                with its tasks and exchanges.

        Examples:
            >>> dctx = DistributedContext()
            >>> dctx.sql("SELECT 1 AS one").explain()
            ┌───── Stage 0 ── tasks=1 partitions=1 ── output=result
            │ tasks: PlaceholderRowExec is a source that cannot be split
            │ ProjectionExec: expr=[1 as one]
            │   PlaceholderRowExec
            └─────
            <BLANKLINE>
        """
        print(self.explain_string(analyze, verbose, format))

    def explain_string(self, analyze: bool = False, verbose: bool = False, format: str = "text") -> str:
        """What `explain` prints. With `analyze` the query runs first (its result is discarded)."""
        check_explain_format(format)  # before the query runs
        planned = self._planned()
        metrics = self._measure(planned) if analyze else None
        return render_explain(planned.plan, metrics, verbose, format)

    def _measure(self, planned: PlannedQuery) -> QueryMetrics | None:
        """Run `planned` for what it measures (EXPLAIN ANALYZE), discarding its result."""
        for _ in self._execute_plan(planned, on_restart=lambda: None):  # the result is discarded
            pass
        return self.metrics

    # -- display: the first rows, computed distributed (see display.py) -------------------------
    def _preview(self, rows: int | None = None) -> Preview:
        """Run the query distributed for its first `rows` rows only (default: the formatter's
        `max_rows`).

        It runs as this frame's own execution (so `cancel()` stops it, and `metrics` then
        describes it), with a limit of `rows + 1`."""
        rows = get_formatter().max_rows if rows is None else rows
        if not isinstance(rows, int) or isinstance(rows, bool) or rows < 1:
            raise ValueError(f"rows to show must be a positive integer, not {rows!r}")
        planned = self._engine.plan(self._df.limit(rows + 1))
        batches: list[pa.RecordBatch] = []
        for batch in self._execute_plan(planned, on_restart=batches.clear):
            batches.append(batch)
        schema = batches[0].schema if batches else self.schema()
        table = pa.Table.from_batches([_as_schema(b, schema) for b in batches], schema)
        return Preview.of(table, rows, planned.plan, self.metrics)

    def __repr__(self) -> str:
        """The first rows as a text table, as datafusion-python's DataFrame shows itself.

        Runs the query for those rows only (`datafusion.dataframe_formatter`'s `max_rows`, 10
        by default); `metrics` then describes that run."""
        return render_text(self._preview())

    def _repr_html_(self) -> str:
        """The first rows as an HTML table, with the stages, tasks, rows and time of the run."""
        return render_html(self._preview())

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        """Text and HTML from one run, for notebooks (which would otherwise run the query for
        each); a failed query shows its error instead of a traceback per format."""
        try:
            shown = self._preview()
        except Exception as exc:
            return render_error(exc)
        return {"text/plain": render_text(shown), "text/html": render_html(shown)}


def _as_schema(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch` with exactly `schema`: the batches of a result can differ from the schema
    DataFusion states for it in field metadata or nullability only."""
    return batch if batch.schema == schema else batch.cast(schema)


def format_table(table: pa.Table, max_width: int = 40) -> str:
    """A plain text table of `table` (for show() and the CLI)."""
    names = table.column_names
    rows = [["NULL" if v is None else str(v) for v in row.values()] for row in table.to_pylist()]
    cells = [names, *rows]
    widths = [min(max_width, max(len(r[i][:max_width]) for r in cells)) for i in range(len(names))]

    def line(values):
        return "| " + " | ".join(v[:max_width].ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    return "\n".join([rule, line(names), rule, *[line(r) for r in rows], rule])
