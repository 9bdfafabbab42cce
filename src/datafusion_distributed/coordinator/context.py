"""The public API: DistributedContext and DistributedDataFrame, shaped like DataFusion's own."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from datafusion import DataFrame, SessionContext

from ..distributed_planner.planner import plan_stages
from ..execution_plans.stage import DistributedPlan
from ..protocol.auth import read_pem
from ..protocol.flight import ClientPool
from ..protocol.resolver import StaticResolver, WorkerResolver
from ..worker.session import SessionBuilder
from .clusters import EmbeddedCluster
from .config import DistributedConfig
from .scheduler import QueryRun

# Settings the coordinator applies to the user's SessionContext before planning: DataFusion's
# physical scalar subquery node fills values in one process only, so subqueries are planned as
# joins instead (as the upstream project does).
PLANNING_SETTINGS = {"datafusion.optimizer.enable_physical_uncorrelated_scalar_subquery": "false"}

# Calls passed straight to the wrapped SessionContext.
_PASSTHROUGH = {
    "register_parquet", "register_csv", "register_json", "register_arrow", "register_avro",
    "register_record_batches", "register_table", "register_view", "register_dataset",
    "register_object_store", "register_listing_table", "register_batch", "register_udf",
    "register_udaf", "register_udwf", "register_udtf", "deregister_table", "table_exist",
    "catalog", "catalog_names", "from_pydict", "from_pylist", "from_arrow", "from_pandas",
    "from_polars", "session_id",
}  # fmt: skip


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
            `(SessionConfig) -> SessionContext` building each task's context.

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
    ):
        self.ctx = ctx if ctx is not None else SessionContext()
        self.config = config or DistributedConfig()
        self.session_builder = session_builder
        self._cluster: EmbeddedCluster | None = None
        if workers is None:
            self._cluster = EmbeddedCluster(self.config.embedded_workers, session_builder)
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

    def __getattr__(self, name: str) -> Any:
        if name in _PASSTHROUGH:
            return getattr(self.ctx, name)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    # -- queries ------------------------------------------------------------------------------
    def workers(self) -> list[str]:
        urls = self.resolver.get_urls()
        if not urls:
            raise ValueError("the worker resolver returned no workers")
        return urls

    def _prepare(self) -> list[str]:
        """Configure the wrapped context so the next plan fans out to the whole cluster."""
        urls = self.workers()
        settings = dict(PLANNING_SETTINGS)
        settings["datafusion.execution.target_partitions"] = str(len(urls) * self.config.partitions_per_task)
        for key, value in settings.items():
            self.ctx.sql(f"SET {key} = {value}")
        return urls

    def sql(self, query: str) -> DistributedDataFrame:
        """Plan `query` on the wrapped context; it runs distributed when its result is asked for."""
        self._prepare()
        return DistributedDataFrame(self, self.ctx.sql(query))

    def table(self, name: str) -> DistributedDataFrame:
        self._prepare()
        return DistributedDataFrame(self, self.ctx.table(name))

    def read_parquet(self, path: str, **options: Any) -> DistributedDataFrame:
        self._prepare()
        return DistributedDataFrame(self, self.ctx.read_parquet(path, **options))

    def read_csv(self, path: str, **options: Any) -> DistributedDataFrame:
        self._prepare()
        return DistributedDataFrame(self, self.ctx.read_csv(path, **options))

    def read_json(self, path: str, **options: Any) -> DistributedDataFrame:
        self._prepare()
        return DistributedDataFrame(self, self.ctx.read_json(path, **options))

    def distributed_plan(self, df: DataFrame) -> DistributedPlan:
        """Cut `df`'s physical plan into stages for the current workers."""
        workers = len(self.workers())
        return plan_stages(df.execution_plan(), self.config.planner(workers))

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

    @property
    def df(self) -> DataFrame:
        """The underlying (single-node) DataFusion DataFrame."""
        return self._df

    def schema(self) -> pa.Schema:
        return self._df.schema()

    def distributed_plan(self) -> DistributedPlan:
        return self._dctx.distributed_plan(self._df)

    def execute_stream(self) -> Iterator[pa.RecordBatch]:
        """Stream the result batch by batch; memory stays bounded by what is in flight."""
        plan = self.distributed_plan()
        run = QueryRun(
            plan,
            self._dctx.workers(),
            self._dctx.clients,
            compression=self._dctx.config.compression,
            session_builder=self._dctx.session_builder,
            task_attempts=self._dctx.config.task_attempts,
        )
        stream = run.execute()
        with contextlib.closing(stream):
            yield from stream

    def collect(self) -> list[pa.RecordBatch]:
        return list(self.execute_stream())

    def to_arrow_table(self) -> pa.Table:
        batches = self.collect()
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

        counted = DistributedDataFrame(self._dctx, self._df.aggregate([], [f.count_star().alias("n")]))
        return int(counted.to_pylist()[0]["n"])

    def show(self, num: int = 20) -> None:
        """Print the first `num` rows as a table."""
        table = DistributedDataFrame(self._dctx, self._df.limit(num)).to_arrow_table()
        print(format_table(table))

    def explain(self) -> None:
        """Print the distributed plan: stages, their tasks, boundaries and the files tasks read."""
        print(self.explain_string())

    def explain_string(self) -> str:
        from ..execution_plans.display import display_distributed_plan

        return display_distributed_plan(self.distributed_plan())

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
