"""DistributedContext: the public entry point, shaped like DataFusion's SessionContext. It plans
queries on the user's SessionContext and makes DistributedDataFrames that run them on workers."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from datafusion import DataFrame, SessionContext
from datafusion.options import DEFAULT_MAX_INFER_SCHEMA

from ..distributed_planner.planner import plan_query, single_node_plan
from ..events.handlers import HandlerChain
from ..execution_plans.session import SessionBuilder, task_session
from ..execution_plans.stage import DistributedPlan
from ..protocol.auth import read_pem
from ..protocol.flight import ClientPool
from ..protocol.resolver import StaticResolver, WorkerResolver
from .config import DistributedConfig
from .dataframe import DistributedDataFrame
from .errors import QueryFailed

if TYPE_CHECKING:
    import pathlib

    import pandas as pd
    import polars as pl
    import pyarrow as pa
    from datafusion.catalog import Catalog, Table
    from datafusion.context import ArrowArrayExportable, ArrowStreamExportable, TableProviderExportable
    from datafusion.expr import SortKey
    from datafusion.options import CsvReadOptions
    from datafusion.user_defined import AggregateUDF, ScalarUDF, TableFunction, WindowUDF
    from pyarrow.dataset import Dataset

    from .. import EmbeddedCluster


ACTS_WHEN_PLANNED = "DELETE, UPDATE and TRUNCATE act on their table when DataFusion plans them: planned once"


def _acts_when_planned(logical: Any) -> bool:
    """Whether planning `logical` (a LogicalPlan) changes data: a memory table's DELETE, UPDATE
    and TRUNCATE happen in DataFusion's physical planner, so the query may be planned once only."""
    first = logical.display().split("\n", 1)[0]
    return first.startswith("Dml: op=[") and not first.startswith("Dml: op=[Insert")


_EXPLAIN_ANALYZE = re.compile(r"^\s*explain\s+analyze\s+(?:(verbose)\s+)?(.*)$", re.IGNORECASE | re.DOTALL)


def split_explain_analyze(query: str) -> tuple[str, bool] | None:
    """(the query, verbose) if `query` is `EXPLAIN ANALYZE [VERBOSE] <query>`, else None."""
    match = _EXPLAIN_ANALYZE.match(query)
    if match is None:
        return None
    return match.group(2), match.group(1) is not None


class DistributedContext:
    """Runs queries of an ordinary DataFusion SessionContext across workers.

    Args:
        ctx: the SessionContext whose tables, views, UDFs and settings queries use; a new one
            if omitted.
        workers: None for the embedded in-process cluster (the default); a list of worker URLs
            ("grpc://host:port"); or any resolver, an object with `get_urls() -> list[str]`
            (such as `LocalCluster`).
        config: planning and runtime settings (see `DistributedConfig`).
        session_builder: for the embedded cluster and the coordinator's head stage, a hook
            `(SessionConfig) -> SessionContext` building the context tasks run in (once per
            worker, and once for the head stages of this context's queries).
        handlers: event handlers (see `events`), asked before the built-in ones: task counts,
            task routing, lifecycle events; and, on the embedded cluster's workers, plan rewrites.
        progress: show a live progress line while queries run (only on a terminal or in a
            notebook). Default False; each call can say otherwise.

    Examples:
        >>> from datafusion import SessionContext
        >>> from datafusion_distributed import DistributedContext
        >>> with DistributedContext(SessionContext()) as dctx:
        ...     dctx.sql("SELECT 1 + 1 AS two").to_pylist()
        [{'two': 2}]
    """

    def __init__(
        self,
        ctx: SessionContext | None = None,
        workers: Sequence[str] | WorkerResolver | None = None,
        *,
        config: DistributedConfig | None = None,
        session_builder: SessionBuilder | None = None,
        handlers: Sequence[Any] = (),
        progress: bool = False,
    ) -> None:
        self.handlers = HandlerChain(handlers)
        self.progress = progress
        self.ctx = ctx if ctx is not None else SessionContext()
        self.config = config or DistributedConfig()
        self.session_builder = session_builder
        self._cluster: EmbeddedCluster | None = None
        if workers is None:
            from .. import EmbeddedCluster  # through the public API: clusters start workers

            self._cluster = EmbeddedCluster(
                self.config.embedded_workers, session_builder, handlers=self.handlers.user
            )
            self.resolver: WorkerResolver = self._cluster
        elif isinstance(workers, WorkerResolver):
            self.resolver = workers
        elif isinstance(workers, (list, tuple)):
            self.resolver = StaticResolver(workers)
        else:
            raise TypeError("workers must be None, a list of URLs, or an object with get_urls()")
        self.clients = ClientPool(
            self.config.connect_timeout,
            self.config.task_timeout,
            # a cluster the library started knows its own token; otherwise the configured one
            auth_token=getattr(self.resolver, "auth_token", None) or self.config.auth_token,
            tls_root_certs=read_pem(self.config.tls_root_certs),
        )
        self._planning: tuple[tuple[str, int], SessionContext] | None = None
        self._planning_lock = threading.Lock()
        self._head_session: SessionContext | None = None
        self._head_session_lock = threading.Lock()

    # -- workers and planning ------------------------------------------------------------------------------
    def local_spools(self) -> tuple[str, ...]:
        """Spools of workers on this host (a cluster the library started): read in place."""
        root = getattr(self.resolver, "shared_spool_root", None)
        return (root,) if root else ()

    def exchange_compression(self) -> str | None:
        """The codec of exchange files: with "auto", none when they are read in place (no copy
        to save, and compressing costs CPU), lz4 when they cross the network."""
        if self.config.compression != "auto":
            return self.config.compression
        return None if self.local_spools() else "lz4"

    def workers(self) -> list[str]:
        """The URLs of the workers queries run on now, from the resolver."""
        urls = self.resolver.get_urls()
        if not urls:
            raise ValueError("the worker resolver returned no workers")
        return urls

    def planning_session(self, workers: int) -> SessionContext:
        """A copy of the user's session, with the DataFusion settings a query on `workers`
        workers is planned with (`PlannerConfig.datafusion_settings`).

        The copy shares the user's catalogs, tables and object stores and starts from their
        current settings, so a `SET` of theirs applies, and changing its settings leaves the
        user's context as it was; a plan made from a logical plan holds its UDFs itself.
        (DataFusion's Python API makes such a copy only through `enable_url_table`; a plan made
        from a logical plan never looks tables up by name, so url tables change nothing here.)"""
        # Copied again only when the user's settings (or the cluster's size) changed since:
        # the copy and its SETs cost more than planning a small query.
        key = (repr(self.ctx), workers)  # the context's repr lists every setting
        with self._planning_lock:
            if self._planning is not None and self._planning[0] == key:
                return self._planning[1]
        session = self.ctx.enable_url_table()
        for name, value in self.config.planner(workers).datafusion_settings().items():
            session.sql(f"SET {name} = {value}")
        with self._planning_lock:
            self._planning = (key, session)
        return session

    # -- DataFrames: made on the wrapped context, run distributed ------------------------------
    def sql(self, query: str) -> DistributedDataFrame:
        """Plan `query` on the wrapped context; it runs distributed when its result is asked for.

        `EXPLAIN ANALYZE [VERBOSE] <query>` runs the query at once and returns the distributed
        plan with its metrics (columns plan_type and plan, as DataFusion's EXPLAIN has).

        Raises:
            QueryFailed: the query does not parse or plan (DataFusion's message).

        Examples:
            >>> dctx = DistributedContext()
            >>> dctx.sql("SELECT 1 + 1 AS two").to_pylist()
            [{'two': 2}]
        """
        explained = split_explain_analyze(query)
        if explained is not None:
            text = self.sql(explained[0]).explain_string(analyze=True, verbose=explained[1])
            return DistributedDataFrame(
                self, self.ctx.from_pydict({"plan_type": ["Plan with Metrics"], "plan": [text]})
            )
        return self._frame(self.ctx.sql, query)

    def _frame(self, make: Callable[..., DataFrame], *args: Any, **kwargs: Any) -> DistributedDataFrame:
        """A DataFrame made on the wrapped context, distributed."""
        try:
            return DistributedDataFrame(self, make(*args, **kwargs))
        except Exception as exc:  # DataFusion raises plain Exception (or ValueError)
            raise QueryFailed.of(exc) from exc

    def table(self, name: str) -> DistributedDataFrame:
        """The table (or view) registered as `name`.

        Examples:
            >>> dctx = DistributedContext()
            >>> dctx.register_batch("t", pa.record_batch({"a": [1, 2, 3]}))
            >>> dctx.table("t").count()
            3
        """
        return self._frame(self.ctx.table, name)

    def read_parquet(
        self,
        path: str | pathlib.Path,
        table_partition_cols: list[tuple[str, str | pa.DataType]] | None = None,
        parquet_pruning: bool = True,
        file_extension: str = ".parquet",
        skip_metadata: bool = True,
        schema: pa.Schema | None = None,
        file_sort_order: Sequence[Sequence[SortKey]] | None = None,
        object_store: Any | None = None,
    ) -> DistributedDataFrame:
        """The Parquet file, or folder of files, at `path` (DataFusion's `read_parquet`)."""
        return self._frame(
            self.ctx.read_parquet,
            path,
            table_partition_cols,
            parquet_pruning,
            file_extension,
            skip_metadata,
            schema,
            file_sort_order,
            object_store,
        )

    def read_csv(
        self,
        path: str | pathlib.Path | list[str] | list[pathlib.Path],
        schema: pa.Schema | None = None,
        has_header: bool = True,
        delimiter: str = ",",
        schema_infer_max_records: int = DEFAULT_MAX_INFER_SCHEMA,
        file_extension: str = ".csv",
        table_partition_cols: list[tuple[str, str | pa.DataType]] | None = None,
        file_compression_type: str | None = None,
        options: CsvReadOptions | None = None,
        object_store: Any | None = None,
    ) -> DistributedDataFrame:
        """The CSV file(s) at `path` (DataFusion's `read_csv`)."""
        return self._frame(
            self.ctx.read_csv,
            path,
            schema,
            has_header,
            delimiter,
            schema_infer_max_records,
            file_extension,
            table_partition_cols,
            file_compression_type,
            options,
            object_store,
        )

    def read_json(
        self,
        path: str | pathlib.Path,
        schema: pa.Schema | None = None,
        schema_infer_max_records: int = DEFAULT_MAX_INFER_SCHEMA,
        file_extension: str = ".json",
        table_partition_cols: list[tuple[str, str | pa.DataType]] | None = None,
        file_compression_type: str | None = None,
        object_store: Any | None = None,
    ) -> DistributedDataFrame:
        """The line-delimited JSON file(s) at `path` (DataFusion's `read_json`)."""
        return self._frame(
            self.ctx.read_json,
            path,
            schema,
            schema_infer_max_records,
            file_extension,
            table_partition_cols,
            file_compression_type,
            object_store,
        )

    def read_arrow(
        self,
        path: str | pathlib.Path,
        schema: pa.Schema | None = None,
        file_extension: str = ".arrow",
        file_partition_cols: list[tuple[str, str | pa.DataType]] | None = None,
        object_store: Any | None = None,
    ) -> DistributedDataFrame:
        """The Arrow IPC file(s) at `path` (DataFusion's `read_arrow`)."""
        return self._frame(
            self.ctx.read_arrow, path, schema, file_extension, file_partition_cols, object_store
        )

    def read_avro(
        self,
        path: str | pathlib.Path,
        schema: pa.Schema | None = None,
        file_partition_cols: list[tuple[str, str | pa.DataType]] | None = None,
        file_extension: str = ".avro",
        object_store: Any | None = None,
    ) -> DistributedDataFrame:
        """The Avro file(s) at `path` (DataFusion's `read_avro`)."""
        return self._frame(
            self.ctx.read_avro, path, schema, file_partition_cols, file_extension, object_store
        )

    def from_pydict(self, data: dict[str, list[Any]], name: str | None = None) -> DistributedDataFrame:
        """A frame of the columns in `data`; registered as the table `name` if given."""
        return self._frame(self.ctx.from_pydict, data, name)

    def from_pylist(self, data: list[dict[str, Any]], name: str | None = None) -> DistributedDataFrame:
        """A frame of the rows in `data`; registered as the table `name` if given."""
        return self._frame(self.ctx.from_pylist, data, name)

    def from_arrow(
        self, data: ArrowStreamExportable | ArrowArrayExportable, name: str | None = None
    ) -> DistributedDataFrame:
        """A frame of an Arrow table, batch or stream; registered as the table `name` if given."""
        return self._frame(self.ctx.from_arrow, data, name)

    def from_pandas(self, data: pd.DataFrame, name: str | None = None) -> DistributedDataFrame:
        """A frame of a pandas DataFrame; registered as the table `name` if given."""
        return self._frame(self.ctx.from_pandas, data, name)

    def from_polars(self, data: pl.DataFrame, name: str | None = None) -> DistributedDataFrame:
        """A frame of a polars DataFrame; registered as the table `name` if given."""
        return self._frame(self.ctx.from_polars, data, name)

    # -- tables, functions and catalogs: the wrapped SessionContext's own -----------------------
    def register_parquet(
        self,
        name: str,
        path: str | pathlib.Path,
        table_partition_cols: list[tuple[str, str | pa.DataType]] | None = None,
        parquet_pruning: bool = True,
        file_extension: str = ".parquet",
        skip_metadata: bool = True,
        schema: pa.Schema | None = None,
        file_sort_order: Sequence[Sequence[SortKey]] | None = None,
        object_store: Any | None = None,
    ) -> None:
        """Register the Parquet file, or folder of files, at `path` as the table `name`."""
        self.ctx.register_parquet(
            name,
            path,
            table_partition_cols,
            parquet_pruning,
            file_extension,
            skip_metadata,
            schema,
            file_sort_order,
            object_store,
        )

    def register_csv(
        self,
        name: str,
        path: str | pathlib.Path | list[str | pathlib.Path],
        schema: pa.Schema | None = None,
        has_header: bool = True,
        delimiter: str = ",",
        schema_infer_max_records: int = DEFAULT_MAX_INFER_SCHEMA,
        file_extension: str = ".csv",
        file_compression_type: str | None = None,
        options: CsvReadOptions | None = None,
        object_store: Any | None = None,
    ) -> None:
        """Register the CSV file(s) at `path` as the table `name`."""
        self.ctx.register_csv(
            name,
            path,
            schema,
            has_header,
            delimiter,
            schema_infer_max_records,
            file_extension,
            file_compression_type,
            options,
            object_store,
        )

    def register_json(
        self,
        name: str,
        path: str | pathlib.Path,
        schema: pa.Schema | None = None,
        schema_infer_max_records: int = DEFAULT_MAX_INFER_SCHEMA,
        file_extension: str = ".json",
        table_partition_cols: list[tuple[str, str | pa.DataType]] | None = None,
        file_compression_type: str | None = None,
        object_store: Any | None = None,
    ) -> None:
        """Register the line-delimited JSON file(s) at `path` as the table `name`."""
        self.ctx.register_json(
            name,
            path,
            schema,
            schema_infer_max_records,
            file_extension,
            table_partition_cols,
            file_compression_type,
            object_store,
        )

    def register_arrow(
        self,
        name: str,
        path: str | pathlib.Path,
        schema: pa.Schema | None = None,
        file_extension: str = ".arrow",
        table_partition_cols: list[tuple[str, str | pa.DataType]] | None = None,
        object_store: Any | None = None,
    ) -> None:
        """Register the Arrow IPC file(s) at `path` as the table `name`."""
        self.ctx.register_arrow(name, path, schema, file_extension, table_partition_cols, object_store)

    def register_avro(
        self,
        name: str,
        path: str | pathlib.Path,
        schema: pa.Schema | None = None,
        file_extension: str = ".avro",
        table_partition_cols: list[tuple[str, str | pa.DataType]] | None = None,
        object_store: Any | None = None,
    ) -> None:
        """Register the Avro file(s) at `path` as the table `name`."""
        self.ctx.register_avro(name, path, schema, file_extension, table_partition_cols, object_store)

    def register_listing_table(
        self,
        name: str,
        path: str | pathlib.Path,
        table_partition_cols: list[tuple[str, str | pa.DataType]] | None = None,
        file_extension: str = ".parquet",
        schema: pa.Schema | None = None,
        file_sort_order: Sequence[Sequence[SortKey]] | None = None,
    ) -> None:
        """Register the files under `path` (with `file_extension`) as the table `name`."""
        self.ctx.register_listing_table(
            name, path, table_partition_cols, file_extension, schema, file_sort_order
        )

    def register_record_batches(self, name: str, partitions: list[list[pa.RecordBatch]]) -> None:
        """Register in-memory batches as the table `name`: one inner list per partition."""
        self.ctx.register_record_batches(name, partitions)

    def register_batch(self, name: str, batch: pa.RecordBatch) -> None:
        """Register one in-memory batch as the table `name`."""
        self.ctx.register_batch(name, batch)

    def register_table(self, name: str, table: Table | TableProviderExportable | DataFrame | Dataset) -> None:
        """Register a table provider, DataFusion DataFrame or Arrow dataset as the table `name`."""
        self.ctx.register_table(name, table)

    def register_view(self, name: str, df: DataFrame) -> None:
        """Register the DataFusion DataFrame `df` as the view `name`."""
        self.ctx.register_view(name, df)

    def register_dataset(self, name: str, dataset: Dataset) -> None:
        """Register an Arrow dataset as the table `name`."""
        self.ctx.register_dataset(name, dataset)

    def register_object_store(self, schema: str, store: Any, host: str | None = None) -> None:
        """Make the object store `store` serve URLs of `schema` (such as "s3://") and `host`."""
        self.ctx.register_object_store(schema, store, host)

    def register_udf(self, udf: ScalarUDF) -> None:
        """Register a scalar function, for SQL and expressions (it runs on the workers)."""
        self.ctx.register_udf(udf)

    def register_udaf(self, udaf: AggregateUDF) -> None:
        """Register an aggregate function, for SQL and expressions."""
        self.ctx.register_udaf(udaf)

    def register_udwf(self, udwf: WindowUDF) -> None:
        """Register a window function, for SQL and expressions."""
        self.ctx.register_udwf(udwf)

    def register_udtf(self, func: TableFunction) -> None:
        """Register a table function, for SQL."""
        self.ctx.register_udtf(func)

    def deregister_table(self, name: str) -> None:
        """Remove the table `name`."""
        self.ctx.deregister_table(name)

    def table_exist(self, name: str) -> bool:
        """Whether a table `name` is registered."""
        return self.ctx.table_exist(name)

    def catalog(self, name: str = "datafusion") -> Catalog:
        """The catalog `name` of the wrapped context."""
        return self.ctx.catalog(name)

    def catalog_names(self) -> set[str]:
        """The names of the wrapped context's catalogs."""
        return self.ctx.catalog_names()

    def session_id(self) -> str:
        """The id of the wrapped context's session."""
        return self.ctx.session_id()

    # -- planning -------------------------------------------------------------------------------
    def distributed_plan(self, df: DataFrame) -> DistributedPlan:
        """Plan `df` for the current workers, in a copy of the user's session, and cut it into
        stages (or keep it on one node when it cannot travel faithfully; see `plan_query`)."""
        workers = len(self.workers())
        logical = df.logical_plan()
        try:
            if _acts_when_planned(logical):
                return single_node_plan(df.execution_plan(), self.ctx, ACTS_WHEN_PLANNED)
            session = self.planning_session(workers)
            physical = session.create_dataframe_from_logical_plan(logical).execution_plan()
            config = self.config.planner(workers)
            plan = plan_query(physical, session, config, self.handlers, logical.display_indent_schema())
            if plan.in_memory:
                # Run exactly what the user's own context runs: planned with their settings
                # (partitions, memory limit), showing their information_schema.
                plan = single_node_plan(df.execution_plan(), self.ctx, plan.single_node, plan.final.reason)
        except Exception as exc:  # DataFusion raises plain Exception
            raise QueryFailed.of(exc) from exc
        return plan

    def head_session(self) -> SessionContext:
        """The session the coordinator runs queries' head stages in: built once, by the session
        hook if there is one, like a worker's (a hook that fails is tried again next query)."""
        with self._head_session_lock:
            if self._head_session is None:
                self._head_session = task_session(self.session_builder)
            return self._head_session

    # -- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the embedded cluster (if any) and close connections to workers."""
        self.clients.close()
        if self._cluster is not None:
            self._cluster.close()

    def __enter__(self) -> DistributedContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
