"""A plan too small to split skips the cut: it must be exactly the plans the cut would have run
as one task anyway, and anything else that sizes a stage sends the plan through the cut."""

from __future__ import annotations

import pyarrow as pa
import pytest
from datafusion import SessionConfig, SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext
from datafusion_distributed.distributed_planner.config import QueryPlanConfig
from datafusion_distributed.distributed_planner.planner import plan_stages
from datafusion_distributed.distributed_planner.small_plans import one_task_anyway
from datafusion_distributed.events.chain import HandlerChain
from datafusion_distributed.events.handlers import DistributedHandler, TaskCount
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed, assert_ran_on_one_node
from datafusion_distributed.test_utils.tpch import TPCH_QUERY_NUMBERS, register_tpch, tpch_query

CONFIG = QueryPlanConfig(workers=2)  # 32 MiB a task: all of SF 0.01 fits one
SPLIT = QueryPlanConfig(workers=2, bytes_per_partition=64 * 1024)


def planning_context(tpch, config: QueryPlanConfig) -> SessionContext:
    ctx = SessionContext(SessionConfig().with_target_partitions(config.target_partitions))
    for name, value in config.datafusion_settings().items():
        ctx.sql(f"SET {name} = {value}")
    register_tpch(ctx, tpch)
    return ctx


@pytest.mark.parametrize("config", [CONFIG, SPLIT], ids=["small", "split"])
def test_it_skips_the_cut_exactly_where_the_cut_gives_one_task(tpch_sf001, config):
    ctx = planning_context(tpch_sf001, config)
    skipped = 0
    for n in TPCH_QUERY_NUMBERS:
        physical = ctx.sql(tpch_query(n)).execution_plan()
        reason = one_task_anyway(physical, config, HandlerChain())
        stages = plan_stages(physical, config).stages
        one_task = len(stages) == 1 and stages[0].task_count == 1
        if reason is not None:
            skipped += 1
            assert one_task, f"q{n}: skipped the cut ({reason}) but the cut gives {len(stages)} stages"
            assert reason.startswith("desired=1 (")
    if config is CONFIG:  # every query is one task's bytes at 32 MiB a task
        assert skipped == len(TPCH_QUERY_NUMBERS)
    else:  # at 128 KiB a task only those of the small tables are
        assert 0 < skipped < len(TPCH_QUERY_NUMBERS) // 2


class FourTasks(DistributedHandler):
    def task_count(self, request):
        return TaskCount(desired=4)


def test_what_sizes_stages_otherwise_goes_through_the_cut(tpch_sf001):
    ctx = planning_context(tpch_sf001, CONFIG)
    scan = ctx.sql("SELECT l_orderkey FROM lineitem").execution_plan()
    assert one_task_anyway(scan, CONFIG, HandlerChain()) is not None
    assert one_task_anyway(scan, CONFIG, HandlerChain([FourTasks()])) is None  # a user's task counts
    assert one_task_anyway(scan, QueryPlanConfig(workers=2, cardinality_factor=2.0), HandlerChain()) is None
    ctx.register_record_batches("memory", [[pa.record_batch({"a": [1, 2, 3]})]])
    memory = ctx.sql("SELECT a FROM memory").execution_plan()
    assert one_task_anyway(memory, CONFIG, HandlerChain()) is None  # a memory table is sized by the cut
    nothing = ctx.sql("SELECT 1 AS one").execution_plan()
    assert (
        one_task_anyway(nothing, CONFIG, HandlerChain())
        == "PlaceholderRowExec is a source that cannot be split"
    )


def test_a_small_query_runs_on_one_node_as_the_context_plans_it(tpch_sf001, single_node_sf001):
    sql = tpch_query(3)
    with DistributedContext(single_node_sf001) as dctx:
        df = dctx.sql(sql)
        plan = df.distributed_plan()
        assert plan.in_memory and not plan.single_node  # one task by size, not a fallback
        assert "to scan, 32.0 MiB a task" in df.explain_string()
        got = df.to_arrow_table()
    assert_ran_on_one_node(df)
    assert_tables_equal(got, single_node_sf001.sql(sql).to_arrow_table(), sql=sql)


def test_a_query_larger_than_a_task_is_still_cut(tpch_sf001, single_node_sf001):
    sql = tpch_query(3)
    with DistributedContext(
        single_node_sf001, config=DistributedConfig(bytes_per_partition=64 * 1024)
    ) as dctx:
        df = dctx.sql(sql)
        got = df.to_arrow_table()
    assert_ran_distributed(df)
    assert_tables_equal(got, single_node_sf001.sql(sql).to_arrow_table(), sql=sql)


JOIN = "SELECT o_orderpriority, count(*) AS n FROM orders JOIN lineitem ON o_orderkey = l_orderkey GROUP BY 1"


@pytest.mark.parametrize(("partitions", "mode"), [(4, "CollectLeft"), (3, "Partitioned")])
def test_a_small_query_runs_as_the_cluster_planned_it_only_with_the_contexts_partitions(
    tpch_sf001, partitions, mode
):
    """The context's thresholds partition every join; the cluster's collect this one. With the
    context's own partitions (2 workers x 2) the plan runs as the cluster made it; with others it
    is planned again in the context, as DataFusion alone would. The answer is the same."""
    ctx = SessionContext(SessionConfig().with_target_partitions(partitions))
    register_tpch(ctx, tpch_sf001)
    ctx.sql("SET datafusion.optimizer.hash_join_single_partition_threshold = 0")
    ctx.sql("SET datafusion.optimizer.hash_join_single_partition_threshold_rows = 0")
    with DistributedContext(ctx) as dctx:
        df = dctx.sql(JOIN)
        plan = df.distributed_plan()
        got = df.to_arrow_table()
    assert plan.in_memory and plan.physical is not None
    assert f"mode={mode}" in plan.physical.display_indent()
    assert_ran_on_one_node(df)
    assert_tables_equal(got, ctx.sql(JOIN).to_arrow_table(), sql=JOIN)
