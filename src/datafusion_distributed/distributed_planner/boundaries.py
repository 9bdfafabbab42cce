"""Which plan nodes become network boundaries, which inputs tasks must see whole, and which
nodes forbid splitting a stage across tasks.

Invariant: cutting never changes the plan's shape. A boundary node stays in the plan (for a
coalesce or merge it runs in both producer and consumer; a shuffle's repartition runs in the
producer and its partitions are read by the consumer), so every stage stays a valid DataFusion
plan and one task over all inputs computes exactly what single-node DataFusion computes.
"""

from __future__ import annotations

from ..execution_plans.plan_node import PlanNode
from ..execution_plans.stage import BoundaryKind

# Join types whose output includes build-side (left) rows decided by *all* probe rows: a task
# seeing part of the probe side would emit such rows wrongly or more than once.
BUILD_SIDE_JOIN_TYPES = {"Left", "LeftSemi", "LeftAnti", "LeftMark", "Full"}

# Nodes known to compute, over a share of their input partitions, a share of their output:
# a stage made of these (and boundaries) may be split across tasks.
SPLITTABLE_NODES = {
    "AggregateExec",
    "AnalyzeExec",
    "BoundedWindowAggExec",
    "CoalesceBatchesExec",
    "CoalescePartitionsExec",
    "CooperativeExec",
    "CrossJoinExec",
    "DataSourceExec",
    "FilterExec",
    "GlobalLimitExec",
    "HashJoinExec",
    "LocalLimitExec",
    "NestedLoopJoinExec",
    "PartialSortExec",
    "ProjectionExec",
    "RepartitionExec",
    "SortExec",
    "SortMergeJoinExec",
    "SortPreservingMergeExec",
    "SymmetricHashJoinExec",
    "UnionExec",
    "UnnestExec",
    "WindowAggExec",
}


def boundary_kind(node: PlanNode) -> BoundaryKind | None:
    """The network boundary `node` becomes, or None if it stays inside its stage."""
    if node.name == "RepartitionExec" and "partitioning=Hash(" in node.line:
        # An order-preserving repartition promises sorted output partitions; reading a
        # partition as the concatenation of every producer's files would break that promise.
        return None if "preserve_order=true" in node.line else BoundaryKind.SHUFFLE
    if node.name == "CoalescePartitionsExec" and node.children:
        return BoundaryKind.COALESCE
    if node.name == "SortPreservingMergeExec" and node.children:
        return BoundaryKind.MERGE
    return None


def _collects_left(node: PlanNode) -> bool:
    if node.name == "HashJoinExec":
        return node.attribute("mode") == "CollectLeft"
    return node.name in ("NestedLoopJoinExec", "CrossJoinExec")


def whole_children(node: PlanNode) -> set[int]:
    """Children every task must read in full: the collected (build) side of a join."""
    return {0} if _collects_left(node) else set()


def split_hazard(node: PlanNode) -> str | None:
    """Why a stage holding `node` must not be split across tasks, or None if it may be."""
    if _collects_left(node) and node.attribute("join_type") in BUILD_SIDE_JOIN_TYPES:
        return (
            f"{node.name} join_type={node.attribute('join_type')} emits build-side rows that "
            "depend on every probe row"
        )
    if node.name == "InterleaveExec":
        return "InterleaveExec keeps the hash repartitions below it in its stage, which must see all rows"
    if node.name == "RepartitionExec" and "preserve_order=true" in node.line:
        return "an order-preserving hash repartition must see all of its input"
    if node.name not in SPLITTABLE_NODES:
        return f"{node.name} is not known to be safe to split across tasks"
    return None
