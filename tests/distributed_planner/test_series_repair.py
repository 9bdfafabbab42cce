"""The planner repairs series generators before cutting, so every stage's bytes rebuild."""

from __future__ import annotations

import pytest

from datafusion_distributed.distributed_planner.config import QueryPlanConfig
from datafusion_distributed.distributed_planner.planner import plan_stages
from datafusion_distributed.execution_plans.plan_node import PlanNode
from datafusion_distributed.test_utils.local_check import assert_distributed_matches, planning_context

CONFIGS = {
    "default": QueryPlanConfig(workers=2, partitions_per_task=2, broadcast_total_rows=None),
    "forced": QueryPlanConfig(
        workers=2,
        partitions_per_task=2,
        bytes_per_partition=1,
        broadcast_inline_bytes=0,
        broadcast_total_rows=None,
    ),
}

QUERIES = [
    "WITH t AS (SELECT i AS c1 FROM generate_series(1,10) t(i)) SELECT count(*) FROM t WHERE 1 = 1",
    "SELECT count(*) FROM generate_series(1, 10) a, generate_series(1, 10) b",  # identical subtrees
    "SELECT count(*) FROM (SELECT 1 FROM range(5) UNION ALL SELECT 1 FROM range(5))",
    "SELECT count(*), max(value) FROM generate_series(1, 10)",  # keeps its column: untouched
]


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS)
@pytest.mark.parametrize("sql", QUERIES)
def test_count_over_series_runs_from_the_planned_bytes(config, sql):
    assert_distributed_matches(planning_context(config), sql, config)


def test_only_generators_that_lost_their_column_change():
    config = CONFIGS["default"]
    ctx = planning_context(config)
    kept = PlanNode.from_plan(ctx.sql(QUERIES[-1]).execution_plan())
    assert plan_stages(kept, config).final.plan == kept.raw
    lost = PlanNode.from_plan(ctx.sql(QUERIES[0]).execution_plan())
    stage = plan_stages(lost, config).final
    assert stage.plan != lost.raw
    # Only the bytes change: the stage still shows the plan DataFusion made.
    assert [n.line for n in stage.root.walk()] == [n.line for n in lost.walk()]
