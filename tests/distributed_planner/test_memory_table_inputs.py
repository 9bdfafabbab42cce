"""Large memory tables become inputs the coordinator ships once, not data inside task plans."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datafusion_distributed.distributed_planner.config import QueryPlanConfig
from datafusion_distributed.execution_plans.display import display_distributed_plan
from datafusion_distributed.execution_plans.stage import BoundaryKind
from datafusion_distributed.test_utils.local_check import (
    assert_distributed_matches,
    plan_distributed,
    planning_context,
)

ROWS = 10_000


def config(**settings: object) -> QueryPlanConfig:
    """Two workers, every scan worth a task, DataFusion's own join thresholds."""
    return QueryPlanConfig(workers=2, bytes_per_partition=1, broadcast_total_rows=None, **settings)


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    """A parquet table of 4 files the memory table joins with."""
    root = tmp_path_factory.mktemp("shipped") / "facts"
    root.mkdir()
    for f in range(4):
        keys = list(range(f * 2500, (f + 1) * 2500))
        pq.write_table(pa.table({"fk": keys, "w": [k % 11 for k in keys]}), root / f"facts-{f}.parquet")
    return root


def register(facts, partitions: int = 1):
    def register(ctx):
        ctx.register_parquet("facts", str(facts))
        table = pa.table(
            {
                "k": range(ROWS),
                "v": [i * 0.25 for i in range(ROWS)],
                "s": [f"name-{i % 97}" for i in range(ROWS)],
            }
        )
        batches = table.to_batches(max_chunksize=ROWS // partitions)
        ctx.register_record_batches("mem", [[b] for b in batches])

    return register


JOIN = "SELECT w, count(*) AS n, sum(v) AS total, max(s) AS s FROM mem JOIN facts ON k = fk GROUP BY w"
SCAN = "SELECT s, count(*) AS n, sum(v) AS total FROM mem WHERE k % 3 = 0 GROUP BY s"


@pytest.mark.parametrize(
    ("sql", "partitions"), [(JOIN, 1), (JOIN, 4), (SCAN, 4)], ids=["join", "join-split", "scan-split"]
)
def test_a_large_memory_table_is_shipped_and_answers_alike(facts, sql, partitions):
    settings = config(memory_table_inline_bytes=1024)
    ctx = planning_context(settings, register(facts, partitions))
    plan, _ = assert_distributed_matches(ctx, sql, settings)
    assert plan.is_distributed
    (table,) = plan.tables
    assert (table.rows, table.partitions) == (ROWS, partitions)
    (consumer,) = [s for s in plan.stages if any(i.table for i in s.inputs)]
    (shipped,) = [i for i in consumer.inputs if i.table]
    assert shipped.producer == table.id == len(plan.stages)
    assert shipped.where.kind is BoundaryKind.MEMORY
    # the data stays out of every plan that travels
    for stage in plan.stages:
        assert all(len(task.plan) < table.data_bytes for task in stage.tasks)
    assert "memory table, 10000 rows" in display_distributed_plan(plan)
    assert "shipped once" in display_distributed_plan(plan)


def test_a_split_memory_table_is_shared_out_by_partition(facts):
    settings = config(memory_table_inline_bytes=1024)
    ctx = planning_context(settings, register(facts, partitions=4))
    plan = plan_distributed(ctx, SCAN, settings)
    (consumer,) = [s for s in plan.stages if any(i.table for i in s.inputs)]
    index = next(i for i, inp in enumerate(consumer.inputs) if inp.table)
    assert consumer.inputs[index].split and consumer.task_count == 2
    assert [t.input_partitions[index] for t in consumer.tasks] == [(0, 1), (2, 3)]


def test_a_small_memory_table_travels_inside_the_plan(facts):
    settings = config()  # 1 MiB: far above this table
    ctx = planning_context(settings, register(facts))
    plan, _ = assert_distributed_matches(ctx, JOIN, settings)
    assert plan.tables == ()
    assert "memory table" not in display_distributed_plan(plan)


def test_a_memory_table_the_query_does_not_split_is_not_shipped(facts):
    settings = config(memory_table_inline_bytes=1024)
    ctx = planning_context(settings, register(facts))
    plan = plan_distributed(ctx, "SELECT count(*), sum(v) FROM mem", settings)
    # one stage of one task runs in the coordinator, from memory: nothing to ship
    assert not plan.is_distributed


def test_the_threshold_is_checked():
    with pytest.raises(ValueError, match="memory_table_inline_bytes must be at least 0"):
        QueryPlanConfig(memory_table_inline_bytes=-1)
