"""How a distributed plan is displayed: stage boxes, cut inputs, each task's files."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from datafusion_distributed.codec import file_groups
from datafusion_distributed.distributed_planner.config import QueryPlanConfig
from datafusion_distributed.execution_plans import display_distributed_plan, display_stage
from datafusion_distributed.execution_plans.display import MAX_LINE, node_label
from datafusion_distributed.execution_plans.plan_node import PlanNode
from datafusion_distributed.test_utils.local_check import (
    assert_distributed_matches,
    plan_distributed,
    planning_context,
    planning_session_config,
)

KiB = 1024


def planner_config(**settings: object) -> QueryPlanConfig:
    """A QueryPlanConfig that leaves DataFusion's own hash join thresholds, which these plans expect."""
    return QueryPlanConfig(broadcast_total_rows=None, **settings)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    root = tmp_path_factory.mktemp("display")
    for name, files, rows in (("big", 4, 4000), ("many", 40, 50)):
        (root / name).mkdir()
        for f in range(files):
            keys = list(range(f * rows, (f + 1) * rows))
            pq.write_table(
                pa.table({"k": keys, "g": [k % 5 for k in keys]}),
                root / name / f"{name}-with-a-rather-long-file-name-{f:03d}.parquet",
            )
    return root


def context(tables, config):
    def register(ctx):
        ctx.register_parquet("big", str(tables / "big"))
        ctx.register_parquet("many", str(tables / "many"))

    return planning_context(config, register)


def stage_blocks(text: str) -> list[str]:
    return re.findall(r"┌.*?└─────", text, flags=re.S)


def test_stages_are_boxed_final_first_with_inputs_and_tasks(tables):
    config = planner_config(workers=3, partitions_per_task=2, bytes_per_partition=KiB)
    sql = "SELECT b.g, count(*) FROM big b JOIN many m ON b.k = m.k GROUP BY b.g ORDER BY b.g"
    plan = plan_distributed(context(tables, config), sql, config)
    text = display_distributed_plan(plan)
    blocks = stage_blocks(text)
    assert len(blocks) == len(plan.stages)
    ids = [int(re.match(r"┌───── Stage (\d+)", b).group(1)) for b in blocks]
    assert ids == [s.id for s in reversed(plan.stages)]
    for block, stage in zip(blocks, reversed(plan.stages), strict=True):
        assert block == display_stage(stage)
        first = block.splitlines()[0]
        assert f"tasks={stage.task_count} partitions={stage.root.partitions}" in first
        assert first.endswith(f"output={stage.output.value if stage.output else 'result'}")
        assert f"│ tasks: {stage.reason}" in block
        inputs = re.findall(r"\[input stage (\d+): (\w+), (split|whole), \d+ partitions?\]", block)
        assert [(int(p), k, s == "split") for p, k, s in inputs] == [
            (i.producer, i.where.kind.value, i.split) for i in stage.inputs
        ]
        if stage.task_count > 1 and stage.tasks[0].scans:
            for k in range(stage.task_count):
                assert f"task {k}: [" in block
    assert all(len(line) <= MAX_LINE for line in text.splitlines())
    assert str(tables) not in text and str(tables).lstrip("/") not in text


def test_long_file_lists_wrap_instead_of_being_cut(tables):
    config = planner_config(workers=1, partitions_per_task=1, bytes_per_partition=KiB)
    plan = plan_distributed(context(tables, config), "SELECT sum(k) FROM many", config)
    text = display_distributed_plan(plan)
    assert all(len(line) <= MAX_LINE for line in text.splitlines())
    for f in range(40):
        assert f"many-with-a-rather-long-file-name-{f:03d}.parquet" in text
    task_lines = [line for line in text.splitlines() if "many-with" in line]
    assert len(task_lines) > 1
    assert task_lines[0].split("│ ", 1)[1].lstrip().startswith("task 0: [")


def test_node_lines_are_truncated(tables):
    config = planner_config(workers=1, partitions_per_task=1, bytes_per_partition=KiB)
    expr = " + ".join(f"k * {i}" for i in range(60))
    plan = plan_distributed(
        context(tables, config), f"SELECT g, sum({expr}) AS x FROM big GROUP BY g", config
    )
    lines = display_distributed_plan(plan).splitlines()
    aggregate = next(line for line in lines if "AggregateExec" in line)
    assert len(aggregate) == MAX_LINE and aggregate.endswith("…")


def test_scan_label_keeps_group_count_not_paths(tables):
    config = planner_config(workers=1, partitions_per_task=3, bytes_per_partition=KiB)
    ctx = context(tables, config)
    root = PlanNode.from_plan(ctx.sql("SELECT k FROM big WHERE g = 1").execution_plan())
    scan = next(n for n in root.walk() if n.name == "DataSourceExec")
    assert str(tables).lstrip("/") in scan.line
    label = node_label(scan)
    groups = len(file_groups(scan.raw))
    assert groups > 1
    assert label.startswith(f"DataSourceExec: file_groups={{{groups} groups}}, projection=[k")
    assert str(tables).lstrip("/") not in label and "file_type=parquet" in label
    other = next(n for n in root.walk() if n.name != "DataSourceExec")
    assert node_label(other) == other.line


def test_identical_cut_subtrees_each_show_their_own_input(tables):
    """A self-join whose two shuffled sides serialise identically: inputs match in order."""
    config = planner_config(workers=3, partitions_per_task=2, bytes_per_partition=KiB)
    ctx = _without_dynamic_filters(config, tables)
    sql = "SELECT count(*) FROM big a JOIN big b ON a.k = b.k AND a.g = b.g"
    plan = plan_distributed(ctx, sql, config)
    join_stage = next(s for s in plan.stages if len(s.inputs) == 2)
    assert join_stage.inputs[0].where.boundary == join_stage.inputs[1].where.boundary
    block = display_stage(join_stage)
    producers = [int(p) for p in re.findall(r"\[input stage (\d+):", block)]
    assert producers == [i.producer for i in join_stage.inputs]
    assert len(set(producers)) == 2
    assert "not found" not in block
    assert_distributed_matches(ctx, sql, config)


def _without_dynamic_filters(config, tables):
    """Both join sides hash partitioned, with no dynamic filter to tell them apart."""
    session = planning_session_config(config).set(
        "datafusion.optimizer.enable_dynamic_filter_pushdown", "false"
    )
    session = session.set("datafusion.optimizer.hash_join_single_partition_threshold", "0")
    session = session.set("datafusion.optimizer.hash_join_single_partition_threshold_rows", "0")
    fresh = SessionContext(session)
    fresh.register_parquet("big", str(tables / "big"))
    return fresh
