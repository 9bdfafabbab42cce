"""Run one generated query single-node and distributed, and say how they compare.

The oracle is single-node DataFusion over the same tables with the same settings. A query
whose single-node answer itself varies (from run to run, with `target_partitions`, or with
join dynamic filters off, which DataFusion 55 gets wrong for 0.0/-0.0 float keys) is
recognised: when the distributed answer differs from the reference but equals one of those
variants, or a variant differs from the reference, the outcome is `VARIES`, not a
difference of ours.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from datafusion import SessionConfig, SessionContext

from datafusion_distributed import DistributedContext
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.forced import forced_distribution

from .tables import register_tables

# outcomes
EQUAL = "equal"
BOTH_FAIL = "both fail"
VARIES = "single-node varies"
WRONG = "wrong answer"
DISTRIBUTED_ONLY_ERROR = "distributed-only error"
SINGLE_ONLY_ERROR = "single-node-only error"
BAD = (WRONG, DISTRIBUTED_ONLY_ERROR, SINGLE_ONLY_ERROR)

# DataFusion setting profiles: each query runs under one, on both sides
PROFILES: dict[str, dict[str, str]] = {
    "default": {},
    "small batches": {"datafusion.execution.batch_size": "5"},
    "sort-merge joins": {"datafusion.optimizer.prefer_hash_join": "false"},
    "subqueries as joins": {"datafusion.optimizer.enable_physical_uncorrelated_scalar_subquery": "false"},
    "no repartitioning": {
        "datafusion.optimizer.repartition_joins": "false",
        "datafusion.optimizer.repartition_aggregations": "false",
        "datafusion.optimizer.repartition_windows": "false",
    },
    "partitioned joins": {
        "datafusion.optimizer.hash_join_single_partition_threshold": "0",
        "datafusion.optimizer.hash_join_single_partition_threshold_rows": "0",
    },
    "collected joins": {
        "datafusion.optimizer.hash_join_single_partition_threshold": "100000000",
        "datafusion.optimizer.hash_join_single_partition_threshold_rows": "100000000",
    },
    "no dynamic filters": {"datafusion.optimizer.enable_dynamic_filter_pushdown": "false"},
    "string, not view": {"datafusion.execution.parquet.schema_force_view_types": "false"},
    "existing sorts": {
        "datafusion.optimizer.prefer_existing_sort": "true",
        "datafusion.optimizer.repartition_sorts": "false",
        "datafusion.execution.skip_partial_aggregation_probe_rows_threshold": "1",
    },
}

# single-node variants of a profile, run when the distributed answer differs from the reference
_VARIANTS: dict[str, dict[str, str]] = {
    "one partition": {"datafusion.execution.target_partitions": "1"},
    "three partitions": {"datafusion.execution.target_partitions": "3"},
    "no dynamic filters": {"datafusion.optimizer.enable_dynamic_filter_pushdown": "false"},
}
# times a query whose distributed answer differs runs single-node again, to see whether
# single-node's own answer varies from run to run (DataFusion 55 has such races)
RERUNS = 20
VARIANT_SECONDS = 10.0  # beyond which a slow query's variants run once each


@dataclass(frozen=True)
class Setup:
    """A distributed configuration: which cluster, and `DistributedConfig` fields beyond the
    forced ones (`test_utils.forced`)."""

    name: str
    cluster: str  # "embedded" or "workers"
    config: tuple[tuple[str, object], ...] = ()


# memory tables shipped as exchange files, one partition per task: the most exchanges
_SHIPPED = (("memory_table_inline_bytes", 0), ("partitions_per_task", 1))
SETUPS = {
    "embedded": Setup("embedded", "embedded"),
    "embedded-shipped": Setup("embedded-shipped", "embedded", _SHIPPED),
    # every exchange that can stream does, whatever its size (the data plane, see docs/native.md)
    "embedded-streamed": Setup("embedded-streamed", "embedded", (("exchange", "stream"),)),
    "workers": Setup("workers", "workers"),
    "workers-shipped": Setup("workers-shipped", "workers", _SHIPPED),
    "workers-streamed": Setup("workers-streamed", "workers", (("exchange", "stream"),)),
}


@dataclass(frozen=True)
class Answer:
    """A query's result, or the first line of its error."""

    table: pa.Table | None = None
    error: str = ""


@dataclass(frozen=True)
class Outcome:
    """How one query compared: `kind` (one of the outcomes above), whether it ran as several
    tasks, why it ran on one node (`one_node`, "" when it did not), and what differed."""

    kind: str
    distributed: bool = False
    one_node: str = ""
    detail: str = ""


def answer(run: Callable[[], pa.Table]) -> Answer:
    """What `run` returns, or the error it raises."""
    try:
        return Answer(table=run())
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # DataFusion raises plain Exception, and a panic is a BaseException
        return failed(exc)


def failed(exc: BaseException) -> Answer:
    """The answer of a query that raised `exc`."""
    return Answer(error=(str(exc).strip().splitlines() or [type(exc).__name__])[0])


def difference(actual: Answer, expected: Answer, sql: str) -> str:
    """How `actual` differs from `expected` ("" when the same; two errors count the same)."""
    if actual.error or expected.error:
        if actual.error and expected.error:
            return ""
        return f"error {actual.error or expected.error!r} on one side only"
    if actual.table.schema.types != expected.table.schema.types:
        return f"types {actual.table.schema.types} against {expected.table.schema.types}"
    try:
        assert_tables_equal(actual.table, expected.table, sql=sql)
    except AssertionError as exc:
        return str(exc)[:600]
    return ""


def classify(
    sql: str, distributed: Answer, reference: Answer, variants: Callable[[], Iterable[Answer]]
) -> str:
    """The outcome of a query answered `distributed` against single-node's `reference`;
    `variants()` are single-node's other answers (the same run again, other settings), read
    only when the two differ, and only until one differs from `reference` or equals
    `distributed`."""
    if not difference(distributed, reference, sql):
        return BOTH_FAIL if reference.error else EQUAL
    for other in variants():
        if difference(other, reference, sql) or not difference(distributed, other, sql):
            return VARIES
    if distributed.error:
        return DISTRIBUTED_ONLY_ERROR
    return SINGLE_ONLY_ERROR if reference.error else WRONG


class Differ:
    """Runs queries single-node and distributed over the tables `tables` made, keeping one
    context per profile and setup; `clusters` maps a setup's cluster name to its workers."""

    def __init__(self, tables: dict[str, object], clusters: dict[str, object], query_timeout: float = 60):
        self.tables = tables
        self.clusters = clusters
        self.query_timeout = query_timeout
        self._contexts: dict[tuple[str, str], SessionContext] = {}
        self._distributed: dict[tuple[str, str], DistributedContext] = {}

    def context(self, profile: str, variant: str = "") -> SessionContext:
        """The single-node context of `profile` (with one of the variants' settings)."""
        key = (profile, variant)
        if key not in self._contexts:
            config = SessionConfig().with_target_partitions(4)
            for name, value in {**PROFILES[profile], **_VARIANTS.get(variant, {})}.items():
                config = config.set(name, value)
            ctx = SessionContext(config)
            register_tables(ctx, self.tables)
            self._contexts[key] = ctx
        return self._contexts[key]

    def distributed(self, profile: str, setup: Setup) -> DistributedContext:
        """The distributed context of `profile` on `setup`, with distribution forced."""
        key = (profile, setup.name)
        if key not in self._distributed:
            forced = forced_distribution(query_timeout=self.query_timeout, **dict(setup.config))
            self._distributed[key] = DistributedContext(
                self.context(profile), workers=self.clusters[setup.cluster], **forced
            )
        return self._distributed[key]

    def run(self, sql: str, profile: str, setup: Setup) -> Outcome:
        """Run `sql` both ways and compare."""
        ctx = self.context(profile)
        reference = answer(lambda: ctx.sql(sql).to_arrow_table())
        dctx = self.distributed(profile, setup)
        one_node, several_tasks = "", False
        try:
            df = dctx.sql(sql)
            plan = df.distributed_plan()
            one_node, several_tasks = plan.single_node, plan.is_distributed
            distributed = answer(df.to_arrow_table)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # planning failed: DataFusion's error (or panic), or ours
            distributed = failed(exc)

        def variants() -> Iterator[Answer]:
            deadline = time.monotonic() + VARIANT_SECONDS
            for variant in ("", *_VARIANTS):  # "": the reference's own settings, again
                variant_ctx = self.context(profile, variant)
                for rerun in range(RERUNS if not variant else 2):
                    if rerun and time.monotonic() > deadline:
                        break  # a slow query: one run of each variant
                    yield answer(lambda c=variant_ctx: c.sql(sql).to_arrow_table())

        kind = classify(sql, distributed, reference, variants)
        detail = difference(distributed, reference, sql) if kind in BAD else ""
        return Outcome(kind, several_tasks, one_node, detail)

    def close(self) -> None:
        """Stop every distributed context."""
        for dctx in self._distributed.values():
            dctx.close()
        self._distributed.clear()
