"""Cutting real plans into stages: boundaries, folding, task counts and what each task reads."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datafusion_distributed.codec import file_groups
from datafusion_distributed.distributed_planner.build_stages import input_marker
from datafusion_distributed.distributed_planner.config import QueryPlanConfig
from datafusion_distributed.distributed_planner.planner import plan_stages
from datafusion_distributed.execution_plans.plan_node import PlanNode
from datafusion_distributed.execution_plans.stage import BoundaryKind, DistributedPlan, Stage
from datafusion_distributed.test_utils.local_check import (
    assert_distributed_matches,
    plan_distributed,
    planning_context,
)

KiB = 1024


def planner_config(**settings: object) -> QueryPlanConfig:
    """A QueryPlanConfig that leaves DataFusion's own hash join thresholds, which these plans expect."""
    return QueryPlanConfig(broadcast_total_rows=None, **settings)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """big: 4 files of 5000 rows; mid: 3 files of 1000 rows; small: 1 file of 20 rows."""
    root = tmp_path_factory.mktemp("planner")
    for name, files, rows in (("big", 4, 5000), ("mid", 3, 1000), ("small", 1, 20)):
        (root / name).mkdir()
        for f in range(files):
            keys = list(range(f * rows, (f + 1) * rows))
            table = pa.table({"k": keys, "g": [k % 7 for k in keys], "v": [k * 0.5 for k in keys]})
            pq.write_table(table, root / name / f"{name}-{f}.parquet")
    return root


def context(tables, config: QueryPlanConfig):
    def register(ctx):
        for name in ("big", "mid", "small"):
            ctx.register_parquet(name, str(tables / name))

    return planning_context(config, register)


def stage_of(plan: DistributedPlan, predicate) -> Stage:
    """The stage that runs the first node matching `predicate`: a stage's root holds its
    producers' subtrees too, and producers come first."""
    matches = [s for s in plan.stages if any(predicate(n) for n in s.root.walk())]
    assert matches, "no stage holds the node"
    return matches[0]


def scanned_bytes(tables, name: str, columns: tuple[str, ...]) -> int:
    """The bytes a scan of `columns` of table `name` reads: each file times their share of its columns."""
    total = 0
    for path in (tables / name).iterdir():
        metadata = pq.read_metadata(path)
        chunks = [
            metadata.row_group(g).column(c)
            for g in range(metadata.num_row_groups)
            for c in range(metadata.num_columns)
        ]
        read = sum(c.total_compressed_size for c in chunks if c.path_in_schema in columns)
        total += path.stat().st_size * read / sum(c.total_compressed_size for c in chunks)
    return round(total)


GROUP_BY = "SELECT g, sum(v) AS s, count(*) AS n FROM big GROUP BY g ORDER BY g"
JOIN = "SELECT b.g, count(*) AS n FROM big b JOIN mid m ON b.k = m.k GROUP BY b.g ORDER BY b.g"


def test_plan_shape_invariants(tables):
    config = planner_config(workers=3, partitions_per_task=2, bytes_per_partition=KiB)
    ctx = context(tables, config)
    plan = plan_distributed(ctx, JOIN, config)
    assert len(plan.stages) > 1 and plan.is_distributed
    assert [s.id for s in plan.stages] == list(range(len(plan.stages)))
    assert plan.final.output is None
    consumed = set()
    for stage in plan.stages:
        assert 1 <= stage.task_count <= config.task_cap
        assert stage.reason
        assert [t.index for t in stage.tasks] == list(range(stage.task_count))
        for stage_input in stage.inputs:
            assert stage_input.producer < stage.id, "producers come first"
            assert plan.stage(stage_input.producer).output is stage_input.where.kind
            assert stage_input.where.marker == input_marker(stage_input.producer)
            assert stage_input.where.marker in stage.plan
            consumed.add(stage_input.producer)
        if stage is not plan.final:
            assert stage.output is not None
    assert consumed == {s.id for s in plan.stages[:-1]}, "every stage but the last is read once"


def test_split_scans_and_shuffles_are_shared_out_exactly_once(tables):
    # No broadcast is folded into its consumers here, so every scan left in a split stage is split.
    config = planner_config(
        workers=3, partitions_per_task=2, bytes_per_partition=KiB, broadcast_inline_bytes=0
    )
    plan = plan_distributed(context(tables, config), JOIN, config)
    for stage in plan.stages:
        for position, stage_input in enumerate(stage.inputs):
            parts = [task.input_partitions[position] for task in stage.tasks]
            if stage_input.split:
                flat = [p for chunk in parts for p in chunk]
                assert flat == list(range(stage_input.partitions)), "contiguous, in order, once each"
                assert max(map(len, parts)) - min(map(len, parts)) <= 1
            else:
                assert all(chunk == tuple(range(stage_input.partitions)) for chunk in parts)
        if stage.task_count > 1 and stage.tasks[0].scans:
            for position in range(len(stage.tasks[0].scans)):
                kinds = {task.scans[position][0] for task in stage.tasks}
                assert kinds == {"parquet"}
                per_task = [task.scans[position][1] for task in stage.tasks]
                files = [f for groups in per_task for g in groups for f in g]
                assert len(files) == len(set(files)), "no file read twice"


def test_task_plans_restrict_their_scans(tables):
    config = planner_config(workers=2, partitions_per_task=2, bytes_per_partition=KiB)
    plan = plan_distributed(context(tables, config), GROUP_BY, config)
    leaf = plan.stages[0]
    assert leaf.task_count == 2
    for task in leaf.tasks:
        ((kind, groups),) = task.scans
        assert kind == "parquet"
        assert task.plan != leaf.plan
        # The task's bytes hold a scan reading exactly its groups.
        assert any(
            file_groups(node.raw) == [list(g) for g in groups] for node in _scans_in(task.plan, tables)
        )


def _scans_in(raw: bytes, tables):
    from datafusion.plan import ExecutionPlan

    from datafusion_distributed.runtime.session import task_session

    ctx = task_session()
    for node in PlanNode.from_plan(ExecutionPlan.from_bytes(ctx, raw)).walk():
        if node.name == "DataSourceExec":
            yield node


def test_collect_left_left_join_stage_has_one_task(tables):
    """A Left join emits unmatched build rows: every probe row must be seen by one task."""
    config = planner_config(workers=3, partitions_per_task=2, bytes_per_partition=KiB)
    ctx = context(tables, config)
    sql = "SELECT s.k, b.v FROM small s LEFT JOIN big b ON s.k = b.k ORDER BY 1, 2"
    plan, _ = assert_distributed_matches(ctx, sql, config)
    join = stage_of(plan, lambda n: n.name == "HashJoinExec")
    line = next(n.line for n in join.root.walk() if n.name == "HashJoinExec")
    assert "mode=CollectLeft" in line and "join_type=Left," in line
    assert join.task_count == 1
    # Its one task reads every file of the probe side.
    read = {f.path.rsplit("/", 1)[-1] for _, groups in join.tasks[0].scans for g in groups for f in g}
    assert {f"big-{i}.parquet" for i in range(4)} <= read


def test_collect_left_inner_join_splits_its_probe_side(tables):
    config = planner_config(workers=3, partitions_per_task=2, bytes_per_partition=KiB)
    ctx = context(tables, config)
    sql = "SELECT s.k, b.v FROM small s JOIN big b ON s.k = b.k ORDER BY 1, 2"
    plan, _ = assert_distributed_matches(ctx, sql, config)
    join = stage_of(plan, lambda n: n.name == "HashJoinExec")
    assert join.task_count == 3
    # The build side's scan (one file) is read whole by every task.
    whole = [scan for scan in zip(*(t.scans for t in join.tasks), strict=True) if len(set(scan)) == 1]
    assert whole, "the build side is not shared out"


def test_single_task_boundaries_fold_into_one_stage(tables):
    config = planner_config(workers=1, partitions_per_task=4, bytes_per_partition=KiB)
    ctx = context(tables, config)
    root = PlanNode.from_plan(ctx.sql(JOIN).execution_plan())
    assert any(n.name == "RepartitionExec" and "Hash(" in n.line for n in root.walk())
    plan = plan_stages(root, config)
    assert len(plan.stages) == 1 and not plan.is_distributed
    assert plan.final.inputs == () and plan.final.plan == root.raw
    assert plan.final.tasks[0].plan == root.raw


def test_small_data_with_large_partitions_keeps_one_stage(tables):
    """No scan justifies a second task, so every boundary folds back."""
    config = planner_config(workers=3, partitions_per_task=2, bytes_per_partition=64 * 1024 * KiB)
    plan, _ = assert_distributed_matches(context(tables, config), JOIN, config)
    assert len(plan.stages) == 1
    assert plan.final.task_count == 1


def test_bytes_per_partition_sets_leaf_task_counts(tables):
    size = scanned_bytes(tables, "big", ("g", "v"))  # the columns GROUP_BY reads
    counts = {}
    for bpp in (64 * 1024 * KiB, math.ceil(size / 2 / 2), KiB):
        config = planner_config(workers=3, partitions_per_task=2, bytes_per_partition=bpp)
        plan = plan_distributed(context(tables, config), GROUP_BY, config)
        counts[bpp] = plan.stages[0].task_count if len(plan.stages) > 1 else 1
        if len(plan.stages) > 1:
            assert f"desired={math.ceil(size / bpp / 2)}" in plan.stages[0].reason
    assert list(counts.values()) == [1, 2, 3]


@pytest.mark.parametrize("cap", [1, 2, 4])
def test_max_tasks_per_stage_caps_every_stage(tables, cap):
    config = planner_config(
        workers=5, partitions_per_task=1, bytes_per_partition=KiB, max_tasks_per_stage=cap
    )
    plan, _ = assert_distributed_matches(context(tables, config), JOIN, config)
    assert max(s.task_count for s in plan.stages) == cap
    if cap == 1:
        assert len(plan.stages) == 1


def test_workers_cap_task_counts(tables):
    config = planner_config(workers=2, partitions_per_task=1, bytes_per_partition=KiB)
    plan = plan_distributed(context(tables, config), JOIN, config)
    assert max(s.task_count for s in plan.stages) == 2


def test_stage_under_local_limit_is_cut(tables):
    """LocalLimitExec used to be taken for an avro scan, hiding the exchanges below it."""
    config = planner_config(workers=3, partitions_per_task=2, bytes_per_partition=KiB)
    ctx = context(tables, config)
    sql = "SELECT count(a) AS n FROM (SELECT k AS a FROM big UNION SELECT k FROM mid LIMIT 3)"
    assert "LocalLimitExec" in ctx.sql(sql).execution_plan().display_indent()
    plan, _ = assert_distributed_matches(ctx, sql, config)
    assert len(plan.stages) > 1
    assert any(s.output is BoundaryKind.SHUFFLE for s in plan.stages)


def test_planner_config_validation():
    for bad in (
        {"workers": 0},
        {"partitions_per_task": 0},
        {"bytes_per_partition": 0},
        {"cardinality_factor": 0},
    ):
        with pytest.raises(ValueError):
            QueryPlanConfig(**bad)
    assert QueryPlanConfig(workers=3, partitions_per_task=4).target_partitions == 12
    assert QueryPlanConfig(workers=3, max_tasks_per_stage=2).task_cap == 2
    assert QueryPlanConfig(workers=3, max_tasks_per_stage=9).task_cap == 3


def test_cardinality_factor_shrinks_stages_above_shuffles(tables):
    plans = {}
    for factor in (1.0, 0.34):
        config = planner_config(
            workers=3, partitions_per_task=2, bytes_per_partition=KiB, cardinality_factor=factor
        )
        plans[factor] = plan_distributed(context(tables, config), GROUP_BY, config)
    after_shuffle = {
        f: [s for s in p.stages if any(i.where.kind is BoundaryKind.SHUFFLE for i in s.inputs)]
        for f, p in plans.items()
    }
    assert after_shuffle[1.0][0].task_count == 3
    assert after_shuffle[0.34][0].task_count == 2


def test_small_broadcasts_are_computed_by_each_consumer_task(tables):
    def broadcasts(inline_bytes: int) -> int:
        config = planner_config(
            workers=3, partitions_per_task=2, bytes_per_partition=KiB, broadcast_inline_bytes=inline_bytes
        )
        plan = plan_distributed(context(tables, config), JOIN, config)
        return sum(
            1 for s in plan.stages for i in s.inputs if i.where.kind.value == "coalesce" and not i.split
        )

    assert broadcasts(0) > broadcasts(64 * 1024 * KiB)
