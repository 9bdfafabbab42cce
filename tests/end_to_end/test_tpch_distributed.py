"""All 22 TPC-H queries at SF 0.1, cut into stages and run in process, against single-node DataFusion.

Every combination of workers in {1, 2, 3, 5} and partitions per task in {1, 2, 4} runs with the
slow tests; the default run covers two representative combinations. The single-node answer is
planned with the same target partitions as the distributed one. A small `bytes_per_partition`
makes SF 0.1 split into as many tasks as the workers allow.
"""

from __future__ import annotations

import pytest

from datafusion_distributed.distributed_planner.config import QueryPlanConfig
from datafusion_distributed.execution_plans import display_distributed_plan
from datafusion_distributed.execution_plans.plan_node import PlanNode
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.local_check import (
    exchange_nodes,
    plan_distributed,
    planning_context,
    run_distributed,
)
from datafusion_distributed.test_utils.tpch import TPCH_QUERY_NUMBERS, register_tpch, tpch_query

BYTES_PER_PARTITION = 4 * 1024
FAST_COMBINATIONS = {(3, 2), (2, 4)}
COMBINATIONS = [
    pytest.param(w, p, id=f"w{w}-p{p}", marks=() if (w, p) in FAST_COMBINATIONS else pytest.mark.slow)
    for w in (1, 2, 3, 5)
    for p in (1, 2, 4)
]

_contexts: dict = {}
_expected: dict = {}


def _context(path, config: QueryPlanConfig):
    key = (str(path), config.target_partitions)
    if key not in _contexts:
        _contexts[key] = planning_context(config, lambda c: register_tpch(c, path))
    return _contexts[key]


def _single_node(ctx, n: int, target_partitions: int):
    key = (n, target_partitions)
    if key not in _expected:
        _expected[key] = ctx.sql(tpch_query(n)).to_arrow_table()
    return _expected[key]


@pytest.mark.parametrize(("workers", "partitions_per_task"), COMBINATIONS)
@pytest.mark.parametrize("n", TPCH_QUERY_NUMBERS, ids=lambda n: f"q{n:02d}")
def test_tpch_distributed_matches_single_node(n, workers, partitions_per_task, tpch_sf01):
    config = QueryPlanConfig(
        workers=workers,
        partitions_per_task=partitions_per_task,
        bytes_per_partition=BYTES_PER_PARTITION,
        broadcast_total_rows=None,
    )
    ctx = _context(tpch_sf01, config)
    sql = tpch_query(n)
    single_plan = PlanNode.from_plan(ctx.sql(sql).execution_plan())
    plan = plan_distributed(ctx, sql, config)
    expected = _single_node(ctx, n, config.target_partitions)
    actual = run_distributed(plan, expected.schema)
    assert actual.num_rows > 0
    assert_tables_equal(actual, expected, sql=sql)
    assert_ran_distributed(plan)
    if workers > 1 and exchange_nodes(single_plan):
        assert len(plan.stages) > 1, (
            f"q{n:02d} has exchanges {exchange_nodes(single_plan)[:3]} but ran as one stage:\n"
            + display_distributed_plan(plan)
        )
    if workers == 1:
        assert all(stage.task_count == 1 for stage in plan.stages)
