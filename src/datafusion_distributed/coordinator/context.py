"""The public API: DistributedContext and DistributedDataFrame, shaped like DataFusion's own."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from datafusion import DataFrame, SessionContext

from ..distributed_planner.planner import plan_query, single_node_plan
from ..events.handlers import HandlerChain
from ..execution_plans.session import SessionBuilder, task_session
from ..execution_plans.stage import DistributedPlan
from ..protocol.auth import read_pem
from ..protocol.flight import ClientPool
from ..protocol.resolver import StaticResolver, WorkerResolver
from .config import DistributedConfig
from .errors import QueryFailed
from .scheduler import QueryRun

if TYPE_CHECKING:
    from .. import EmbeddedCluster
    from ..metrics.query_metrics import QueryMetrics

# DataFrame transformations: called on a DistributedDataFrame they return one, so the result
# still runs distributed.
_TRANSFORMATIONS = {
    "aggregate", "alias", "cast", "describe", "distinct", "distinct_on", "drop", "except_all",
    "fill_nan", "fill_null", "filter", "head", "intersect", "join", "join_on", "limit",
    "repartition", "repartition_by_hash", "select", "select_exprs", "sort", "sort_by", "tail",
    "transform", "union", "union_by_name", "union_distinct", "unnest_columns", "window",
    "with_column", "with_column_renamed", "with_columns",
}  # fmt: skip

# SessionContext calls that make a DataFrame: through a DistributedContext they make a
# DistributedDataFrame.
_FACTORIES = {
    "from_pydict",
    "from_pylist",
    "from_arrow",
    "from_pandas",
    "from_polars",
    "read_arrow",
    "read_avro",
}

# Calls passed straight to the wrapped SessionContext.
_PASSTHROUGH = {
    "register_parquet", "register_csv", "register_json", "register_arrow", "register_avro",
    "register_record_batches", "register_table", "register_view", "register_dataset",
    "register_object_store", "register_listing_table", "register_batch", "register_udf",
    "register_udaf", "register_udwf", "register_udtf", "deregister_table", "table_exist",
    "catalog", "catalog_names", "session_id",
}  # fmt: skip


ACTS_WHEN_PLANNED = "DELETE, UPDATE and TRUNCATE act on their table when DataFusion plans them: planned once"


def _acts_when_planned(logical: Any) -> bool:
    """Whether planning `logical` (a LogicalPlan) changes data: a memory table's DELETE, UPDATE
    and TRUNCATE happen in DataFusion's physical planner, so the query may be planned once only."""
    first = logical.display().split("\n", 1)[0]
    return first.startswith("Dml: op=[") and not first.startswith("Dml: op=[Insert")


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
    ):
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

    def __getattr__(self, name: str) -> Any:
        if name in _PASSTHROUGH:
            return getattr(self.ctx, name)
        if name in _FACTORIES:
            return functools.partial(self._frame, getattr(self.ctx, name))
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    # -- queries ------------------------------------------------------------------------------
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

    def sql(self, query: str) -> DistributedDataFrame:
        """Plan `query` on the wrapped context; it runs distributed when its result is asked for.

        `EXPLAIN ANALYZE [VERBOSE] <query>` runs the query at once and returns the distributed
        plan with its metrics (columns plan_type and plan, as DataFusion's EXPLAIN has).

        Raises:
            QueryFailed: the query does not parse or plan (DataFusion's message).
        """
        from ..metrics.analyze import split_explain_analyze

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
        return self._frame(self.ctx.table, name)

    def read_parquet(self, path: str, **options: Any) -> DistributedDataFrame:
        return self._frame(self.ctx.read_parquet, path, **options)

    def read_csv(self, path: str, **options: Any) -> DistributedDataFrame:
        return self._frame(self.ctx.read_csv, path, **options)

    def read_json(self, path: str, **options: Any) -> DistributedDataFrame:
        return self._frame(self.ctx.read_json, path, **options)

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

    def __exit__(self, *exc) -> None:
        self.close()


class DistributedDataFrame:
    """A DataFusion DataFrame whose results are computed across the cluster."""

    def __init__(self, dctx: DistributedContext, df: DataFrame):
        self._dctx = dctx
        self._df = df
        self._runs: set[QueryRun] = set()  # executions in progress, for cancel()
        self._runs_lock = threading.Lock()
        self.metrics: QueryMetrics | None = None  # of the last run, once it has ended

    @property
    def df(self) -> DataFrame:
        """The underlying (single-node) DataFusion DataFrame."""
        return self._df

    def __getattr__(self, name: str) -> Any:
        """DataFrame transformations (filter, select, join, sort, ...) return distributed frames."""
        if name not in _TRANSFORMATIONS:
            if hasattr(DataFrame, name):
                raise AttributeError(
                    f"DistributedDataFrame.{name} is not available: use .df.{name} to run it on one node"
                )
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        method = getattr(self._df, name)

        def transformed(*args: Any, **kwargs: Any) -> Any:
            args = tuple(a._df if isinstance(a, DistributedDataFrame) else a for a in args)
            result = method(*args, **kwargs)
            return DistributedDataFrame(self._dctx, result) if isinstance(result, DataFrame) else result

        return transformed

    def schema(self) -> pa.Schema:
        return self._df.schema()

    def distributed_plan(self) -> DistributedPlan:
        return self._dctx.distributed_plan(self._df)

    def execute_stream(self, progress: bool | None = None) -> Iterator[pa.RecordBatch]:
        """Stream the result batch by batch; memory stays bounded by what is in flight.
        `progress` shows a live progress line (default: the context's `progress`)."""
        return self._execute_plan(self.distributed_plan(), progress)

    def _execute_plan(self, plan: DistributedPlan, progress: bool | None = None) -> Iterator[pa.RecordBatch]:
        handlers = self._dctx.handlers
        if self._dctx.progress if progress is None else progress:
            from ..metrics.progress import ProgressDisplay

            handlers = handlers.with_handlers([ProgressDisplay()])
        run = QueryRun(
            plan,
            self._dctx.workers(),
            self._dctx.clients,
            compression=self._dctx.exchange_compression(),
            head_session=self._dctx.head_session,
            task_attempts=self._dctx.config.task_attempts,
            handlers=handlers,
            local_spools=self._dctx.local_spools(),
        )
        stream = self._cancellable(run)
        try:
            with contextlib.closing(stream):
                yield from stream
        finally:
            self.metrics = run.metrics

    def cancel(self) -> bool:
        """Stop every execution of this DataFrame in progress (safe from any thread).

        Each raises `QueryCancelled` in the thread running it, within a fraction of a second
        while it waits for tasks, and its tasks on the workers stop at their next batch and
        have their spool data deleted. Returns whether anything was running."""
        with self._runs_lock:
            runs = list(self._runs)
        for run in runs:
            run.cancel_scope.cancel()
        return bool(runs)

    def _cancellable(self, run: QueryRun) -> Iterator[pa.RecordBatch]:
        run.cancel_scope.start(self._dctx.config.query_timeout)
        with self._runs_lock:
            self._runs.add(run)
        try:
            yield from run.execute()
        finally:
            with self._runs_lock:
                self._runs.discard(run)

    def collect(self, progress: bool | None = None) -> list[pa.RecordBatch]:
        return list(self.execute_stream(progress))

    def to_arrow_table(self, progress: bool | None = None) -> pa.Table:
        batches = self.collect(progress)
        if not batches:
            return self.schema().empty_table()
        schema = batches[0].schema
        return pa.Table.from_batches([b if b.schema == schema else b.cast(schema) for b in batches], schema)

    def to_pandas(self):
        return self.to_arrow_table().to_pandas()

    def to_polars(self):
        import polars as pl

        return pl.from_arrow(self.to_arrow_table())

    def to_pylist(self) -> list[dict]:
        return self.to_arrow_table().to_pylist()

    def to_pydict(self) -> dict[str, list]:
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
        """
        print(self.explain_string(analyze, verbose, format))

    def explain_string(self, analyze: bool = False, verbose: bool = False, format: str = "text") -> str:
        """What `explain` prints."""
        from ..metrics.analyze import explain

        return explain(self, analyze, verbose, format)

    def __repr__(self) -> str:
        return f"DistributedDataFrame({self._df.logical_plan().display()!r})"


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
