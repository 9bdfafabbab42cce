"""A partitioned hash join turned into one collecting its left side, by editing its bytes
(`codec.joins`): the edited plan decodes, says CollectLeft, and gives the same rows."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionConfig, SessionContext
from datafusion.plan import ExecutionPlan

from datafusion_distributed.codec import WireError, replace_subtree
from datafusion_distributed.codec.joins import coalesced, collect_left, repartition_input
from datafusion_distributed.execution_plans.plan_node import PlanNode
from datafusion_distributed.runtime.streaming import stream_partitions

SQL = "SELECT a.k, a.v, b.v AS w FROM a JOIN b ON a.k = b.k"


@pytest.fixture(scope="module")
def ctx(tmp_path_factory) -> SessionContext:
    folder = tmp_path_factory.mktemp("joins")
    config = SessionConfig().with_target_partitions(4)
    config = config.set("datafusion.optimizer.hash_join_single_partition_threshold", "0")
    config = config.set("datafusion.optimizer.hash_join_single_partition_threshold_rows", "0")
    ctx = SessionContext(config)
    for name in ("a", "b"):
        (folder / name).mkdir()
        for part in range(2):
            table = pa.table({"k": list(range(part * 500, part * 500 + 700)), "v": [part] * 700})
            pq.write_table(table, folder / name / f"{part}.parquet")
        ctx.register_parquet(name, str(folder / name))
    return ctx


def _rows(ctx: SessionContext, plan: ExecutionPlan) -> list:
    batches = list(stream_partitions(ctx, plan))  # every partition at once: they share repartitions
    return sorted(pa.Table.from_batches(batches).to_pylist(), key=lambda r: (r["k"], r["v"], r["w"]))


def test_a_partitioned_join_collects_its_left_side_after_three_edits(ctx) -> None:
    plan = ctx.sql(SQL).execution_plan()
    join = next(n for n in PlanNode.from_plan(plan).walk() if n.name == "HashJoinExec")
    assert join.attribute("mode") == "Partitioned"
    left, right = join.children
    assert left.name == right.name == "RepartitionExec"
    edited = replace_subtree(join.raw, left.raw, coalesced(left.raw))
    edited = replace_subtree(edited, right.raw, repartition_input(right.raw))
    switched = ExecutionPlan.from_bytes(ctx, replace_subtree(plan.to_bytes(), join.raw, collect_left(edited)))
    shown = switched.display_indent()
    assert "HashJoinExec: mode=CollectLeft" in shown and "CoalescePartitionsExec" in shown
    assert shown.count("RepartitionExec") == 1  # only the build side's, under the coalesce
    assert _rows(ctx, switched) == _rows(ctx, plan)


def test_other_nodes_are_refused(ctx) -> None:
    scan = next(n for n in PlanNode.from_plan(ctx.sql(SQL).execution_plan()).walk() if not n.children)
    with pytest.raises(WireError):
        collect_left(scan.raw)
    with pytest.raises(WireError):
        repartition_input(scan.raw)
