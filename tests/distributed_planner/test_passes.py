"""Each planning pass on its own, in the order `planner.plan_stages` runs them."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datafusion_distributed.distributed_planner.build_stages import Built, build_stages, input_marker
from datafusion_distributed.distributed_planner.config import QueryPlanConfig
from datafusion_distributed.distributed_planner.cut_boundaries import collect_fragments
from datafusion_distributed.distributed_planner.fold_boundaries import fold_boundaries
from datafusion_distributed.distributed_planner.fragments import Fragment, count_stages, cut_edges
from datafusion_distributed.distributed_planner.series_repair import with_series_repaired
from datafusion_distributed.distributed_planner.task_counts import assign_task_counts
from datafusion_distributed.events.chain import HandlerChain
from datafusion_distributed.execution_plans.plan_node import PlanNode
from datafusion_distributed.execution_plans.stage import BoundaryKind
from datafusion_distributed.test_utils.local_check import planning_context

GROUPED = "SELECT k, count(*) AS n FROM t GROUP BY k"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> str:
    """Two Parquet files of `t` (k, v)."""
    root = tmp_path_factory.mktemp("passes")
    for part in range(2):
        keys = list(range(part, 100, 2))
        pq.write_table(pa.table({"k": [k % 7 for k in keys], "v": keys}), root / f"{part}.parquet")
    return str(root)


def _config(workers: int) -> QueryPlanConfig:
    return QueryPlanConfig(workers=workers, bytes_per_partition=1, broadcast_total_rows=None)


def _root(folder: str, config: QueryPlanConfig, sql: str = GROUPED) -> PlanNode:
    ctx = planning_context(config, lambda c: c.register_parquet("t", folder))
    return PlanNode.from_plan(ctx.sql(sql).execution_plan())


def _cut(root: PlanNode, config: QueryPlanConfig) -> Fragment:
    final = Fragment(root=root, kind=None)
    collect_fragments(final, root, whole=False, is_root=False, ship_above=config.memory_table_inline_bytes)
    return final


def test_series_repair_leaves_a_plan_without_series_as_it_is(folder):
    root = _root(folder, _config(2))
    assert with_series_repaired(root) is root


def test_cut_boundaries_starts_a_producer_fragment_at_the_shuffle(folder):
    config = _config(2)
    final = _cut(_root(folder, config), config)
    (edge,) = final.edges
    assert edge.fragment.kind is BoundaryKind.SHUFFLE and not edge.whole
    assert [whole for _, whole in edge.fragment.scans] == [False]  # its scan may be split
    assert final.scans == []  # the consumer reads only the shuffle


def test_task_counts_split_the_scan_and_the_shuffle_over_the_workers(folder):
    config = _config(2)
    final = _cut(_root(folder, config), config)
    assign_task_counts(final, config, HandlerChain())
    producer = final.edges[0].fragment
    assert (producer.tasks, final.tasks) == (2, 2)
    assert "to scan" in producer.reason
    assert "input stage" in final.reason


def test_fold_boundaries_folds_a_boundary_between_two_single_tasks(folder):
    config = _config(1)
    final = _cut(_root(folder, config), config)
    assign_task_counts(final, config, HandlerChain())
    fold_boundaries(final, config)
    assert final.edges[0].inline
    assert cut_edges(final) == [] and count_stages(final) == 1


def test_build_stages_writes_producers_first_and_marks_where_the_consumer_reads_them(folder):
    config = _config(2)
    final = _cut(_root(folder, config), config)
    assign_task_counts(final, config, HandlerChain())
    fold_boundaries(final, config)
    built = Built(first_table=count_stages(final))
    build_stages(final, built)
    producer, consumer = built.stages
    assert (producer.id, consumer.id) == (0, 1)
    assert [inp.producer for inp in consumer.inputs] == [0]
    assert input_marker(0) in consumer.plan
    assert len(producer.tasks) == 2 and len(consumer.tasks) == 2


# a union of one-file scans (as a Delta table's): each scan has one partition
UNION = (
    "SELECT k, count(*) AS n FROM (SELECT k FROM t0 UNION ALL SELECT k FROM t1 WHERE v > 3 "
    "UNION ALL SELECT k FROM t0) GROUP BY k"
)


def _union_root(folder: str, config: QueryPlanConfig) -> PlanNode:
    def register(ctx) -> None:
        for part in range(2):
            ctx.register_parquet(f"t{part}", f"{folder}/{part}.parquet")

    ctx = planning_context(config, register)
    return PlanNode.from_plan(ctx.sql(UNION).execution_plan())


def test_the_one_partition_scans_of_a_union_are_shared_out_together(folder):
    config = _config(2)
    final = _cut(_union_root(folder, config), config)
    assign_task_counts(final, config, HandlerChain())
    producer = final.edges[0].fragment
    assert len(producer.scans) == 3 and producer.tasks == 2, producer.reason
    built = Built(first_table=count_stages(final))
    build_stages(final, built)
    stage = built.stages[0]
    read = [scan for task in stage.tasks for scan, (_, groups) in enumerate(task.scans) if groups]
    # each scan's one partition is read by exactly one task, and each task reads one
    assert sorted(read) == [0, 1, 2]
    assert all(any(groups for _, groups in task.scans) for task in stage.tasks)


def test_scans_of_a_union_below_an_aggregate_keep_the_per_scan_rule(folder):
    config = _config(2)
    sql = "SELECT * FROM (SELECT count(*) AS n FROM t0) UNION ALL (SELECT count(*) AS n FROM t1)"
    ctx = planning_context(
        config, lambda c: [c.register_parquet(f"t{p}", f"{folder}/{p}.parquet") for p in range(2)]
    )
    final = _cut(PlanNode.from_plan(ctx.sql(sql).execution_plan()), config)

    def walk(fragment):
        yield fragment
        for edge in fragment.edges:
            yield from walk(edge.fragment)

    assert all(not f.union_scans for f in walk(final))  # an aggregate sits between union and scan
