"""Exchanges under a window that relies on facts from below them stay in the window's stage."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datafusion_distributed.distributed_planner.boundaries import ordering_from_below
from datafusion_distributed.distributed_planner.config import QueryPlanConfig
from datafusion_distributed.execution_plans.plan_node import PlanNode
from datafusion_distributed.test_utils.local_check import (
    assert_distributed_matches,
    plan_distributed,
    planning_context,
)

CONFIG = QueryPlanConfig(
    workers=2,
    partitions_per_task=2,
    bytes_per_partition=1,
    broadcast_inline_bytes=0,
    broadcast_total_rows=None,
)

CONSTANT = "SELECT a, b, rank() OVER (PARTITION BY a ORDER BY b) AS r FROM t WHERE a = 1"
NO_SORT = "SELECT a, b, rank() OVER (PARTITION BY a ORDER BY a) AS r FROM t WHERE a = 1"
WHOLE_PARTITION = "SELECT a, b, sum(b) OVER (PARTITION BY a) AS s FROM t WHERE a = 1"
USUAL = "SELECT a, b, rank() OVER (PARTITION BY a ORDER BY b) AS r FROM t WHERE b > 1"


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    root = tmp_path_factory.mktemp("partition_order")
    for f in range(4):
        ids = range(f * 50, (f + 1) * 50)
        pq.write_table(
            pa.table({"a": pa.array([i % 3 for i in ids], pa.int32()), "b": pa.array(list(ids), pa.int64())}),
            root / f"part-{f}.parquet",
        )
    return planning_context(CONFIG, lambda c: c.register_parquet("t", str(root)))


def windows(ctx, sql: str) -> list[PlanNode]:
    root = PlanNode.from_plan(ctx.sql(sql).execution_plan())
    return [n for n in root.walk() if n.name in ("BoundedWindowAggExec", "WindowAggExec")]


@pytest.mark.parametrize("sql", [CONSTANT, NO_SORT, WHOLE_PARTITION])
def test_window_ordered_by_a_constant_from_below_is_flagged(ctx, sql):
    (window,) = windows(ctx, sql)
    assert "PARTITION BY" in ordering_from_below(window)


def test_window_whose_sort_orders_its_partitions_is_not_flagged(ctx):
    (window,) = windows(ctx, USUAL)
    assert ordering_from_below(window) is None


@pytest.mark.parametrize("sql", [CONSTANT, NO_SORT, WHOLE_PARTITION])
def test_the_repartition_stays_in_the_window_stage(ctx, sql):
    plan, _ = assert_distributed_matches(ctx, sql, CONFIG)
    window_stage = next(s for s in plan.stages if any("WindowAggExec" in n.name for n in s.root.walk()))
    assert window_stage.inputs == ()  # the hash repartition was not cut
    assert window_stage.task_count == 1
    assert "stays in its stage" in window_stage.reason


def test_usual_window_is_still_cut_and_split(ctx):
    plan, _ = assert_distributed_matches(ctx, USUAL, CONFIG)
    assert len(plan.stages) == 2
    assert plan.final.task_count == 2
    assert [inp.split for inp in plan.final.inputs] == [True]


def test_plan_is_unchanged_when_nothing_relies_on_facts_from_below(ctx):
    """The rule only ever keeps exchanges: a plan without such a window is cut as before."""
    sql = "SELECT a, count(*) AS n FROM t WHERE a = 1 GROUP BY a"
    plan = plan_distributed(ctx, sql, CONFIG)
    assert len(plan.stages) > 1
