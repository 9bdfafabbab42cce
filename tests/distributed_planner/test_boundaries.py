"""Which nodes become boundaries, which join sides are read whole, which nodes forbid splitting."""

from __future__ import annotations

import pytest

from datafusion_distributed.distributed_planner.boundaries import (
    BUILD_SIDE_JOIN_TYPES,
    boundary_kind,
    split_hazard,
)
from datafusion_distributed.execution_plans.plan_node import PlanNode, whole_children
from datafusion_distributed.execution_plans.stage import BoundaryKind


def node(line: str, children: int = 1, partitions: int = 4) -> PlanNode:
    kids = tuple(node("DataSourceExec: file_groups={1 group: [[x]]}", 0) for _ in range(children))
    return PlanNode(line.split(":", 1)[0].strip(), line, partitions, line.encode(), kids)


@pytest.mark.parametrize(
    ("line", "children", "kind"),
    [
        ("RepartitionExec: partitioning=Hash([a@0], 4), input_partitions=4", 1, BoundaryKind.SHUFFLE),
        ("RepartitionExec: partitioning=RoundRobinBatch(4), input_partitions=1", 1, None),
        (
            "RepartitionExec: partitioning=Hash([a@0], 4), input_partitions=4, preserve_order=true, "
            "sort_exprs=a@0 ASC",
            1,
            None,
        ),
        ("CoalescePartitionsExec", 1, BoundaryKind.COALESCE),
        ("CoalescePartitionsExec: fetch=3", 1, BoundaryKind.COALESCE),
        ("SortPreservingMergeExec: [a@0 ASC]", 1, BoundaryKind.MERGE),
        ("SortPreservingMergeExec: [a@0 ASC]", 0, None),
        ("CoalescePartitionsExec", 0, None),
        ("SortExec: expr=[a@0 ASC], preserve_partitioning=[false]", 1, None),
        ("AggregateExec: mode=FinalPartitioned, gby=[a@0 as a], aggr=[]", 1, None),
    ],
)
def test_boundary_kind(line, children, kind):
    assert boundary_kind(node(line, children)) is kind


@pytest.mark.parametrize(
    ("line", "whole"),
    [
        ("HashJoinExec: mode=CollectLeft, join_type=Inner, on=[(a@0, a@0)]", {0}),
        ("HashJoinExec: mode=Partitioned, join_type=Inner, on=[(a@0, a@0)]", set()),
        ("NestedLoopJoinExec: join_type=Inner, filter=a@0 < b@1", {0}),
        ("CrossJoinExec", {0}),
        ("SortMergeJoinExec: join_type=Inner, on=[(a@0, a@0)]", set()),
        ("UnionExec", set()),
    ],
)
def test_whole_children(line, whole):
    assert whole_children(node(line, 2)) == whole


@pytest.mark.parametrize("join_type", sorted(BUILD_SIDE_JOIN_TYPES))
def test_collect_left_joins_emitting_build_rows_forbid_splitting(join_type):
    hazard = split_hazard(node(f"HashJoinExec: mode=CollectLeft, join_type={join_type}, on=[(a@0, a@0)]", 2))
    assert hazard and f"join_type={join_type}" in hazard
    assert split_hazard(node(f"NestedLoopJoinExec: join_type={join_type}, filter=a@0 < b@1", 2))


@pytest.mark.parametrize("join_type", ["Inner", "Right", "RightSemi", "RightAnti", "RightMark"])
def test_collect_left_joins_emitting_probe_rows_only_may_split(join_type):
    assert (
        split_hazard(node(f"HashJoinExec: mode=CollectLeft, join_type={join_type}, on=[(a@0, a@0)]", 2))
        is None
    )


@pytest.mark.parametrize("join_type", sorted(BUILD_SIDE_JOIN_TYPES))
def test_partitioned_joins_may_split_whatever_their_type(join_type):
    """Both sides are hash partitioned on the keys: a task sees every row of its keys."""
    line = f"HashJoinExec: mode=Partitioned, join_type={join_type}, on=[(a@0, a@0)]"
    assert split_hazard(node(line, 2)) is None


def test_unknown_and_order_preserving_nodes_forbid_splitting():
    assert "not known to be safe" in split_hazard(node("LazyMemoryExec: partitions=1"))
    preserve = node("RepartitionExec: partitioning=Hash([a@0], 4), input_partitions=4, preserve_order=true")
    assert "order-preserving" in split_hazard(preserve)
    for safe in ("ProjectionExec: expr=[a@0 as a]", "FilterExec: a@0 > 1", "DataSourceExec: x"):
        assert split_hazard(node(safe)) is None


def test_plan_node_attribute():
    n = node("HashJoinExec: mode=CollectLeft, join_type=LeftAnti, on=[(a@0, a@0)], projection=[a@0]", 2)
    assert n.attribute("mode") == "CollectLeft"
    assert n.attribute("join_type") == "LeftAnti"
    assert n.attribute("missing") is None
    assert [m.name for m in n.walk()] == ["HashJoinExec", "DataSourceExec", "DataSourceExec"]
