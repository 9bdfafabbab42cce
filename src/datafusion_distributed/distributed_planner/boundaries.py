"""Which plan nodes become network boundaries, which inputs tasks must see whole, and which
nodes forbid splitting a stage across tasks.

Invariant: cutting never changes the plan's shape. A boundary node stays in the plan (for a
coalesce or merge it runs in both producer and consumer; a shuffle's repartition runs in the
producer and its partitions are read by the consumer), so every stage stays a valid DataFusion
plan and one task over all inputs computes exactly what single-node DataFusion computes.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from ..codec import WireError
from ..codec.ordering import sort_keys, window_partition_keys
from ..codec.sink import file_sink
from ..execution_plans.plan_node import PlanNode, collects_left
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
    "ScalarSubqueryExec",
    "SortExec",
    "SortMergeJoinExec",
    "SortPreservingMergeExec",
    "SymmetricHashJoinExec",
    "UnionExec",
    "UnnestExec",
    "WindowAggExec",
}

# Nodes of compiled libraries (user extensions) their extension declares splittable likewise
# (its `splittable_nodes`): a node type is the same in every context of the process.
_DECLARED_SPLITTABLE: set[str] = set()
FOREIGN = "FFI_ExecutionPlan"  # how DataFusion shows a node of a compiled library, before its name


def declare_splittable(names: Iterable[str]) -> None:
    """Let stages holding nodes named `names` (of a compiled library, each computing over a
    share of its input partitions a share of its output) be split across tasks."""
    _DECLARED_SPLITTABLE.update(names)


def node_type(node: PlanNode) -> str:
    """`node`'s type: its name, or for a node of a compiled library the name it gives itself."""
    if node.name == FOREIGN:
        return node.line.split(":", 1)[-1].split(",", 1)[0].strip()
    return node.name


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


def rebuilds_alone(node: PlanNode) -> bool:
    """Whether DataFusion can rebuild `node`'s subtree from its bytes on its own.

    Below a ScalarSubqueryExec, expressions read the subquery's value from the surrounding
    node (`scalar_subquery(<pending>)`, not always shown in the plan's text), and DataFusion
    refuses to decode them without it: such a subtree cannot become a stage of its own."""
    try:
        ExecutionPlan.from_bytes(_decoding_session(), node.raw)
    except Exception:  # DataFusion raises plain Exception
        return False
    return True


@functools.cache
def _decoding_session() -> SessionContext:
    return SessionContext()


# Nodes between a window and the sort feeding it that keep their input's columns where they
# were (a window only appends its own) and its rows in order.
_ORDER_KEEPING_NODES = {"BoundedWindowAggExec", "WindowAggExec", "CoalesceBatchesExec", "CooperativeExec"}


def _partitions_sorted_in_stage(window: PlanNode) -> bool:
    """Whether every window function's PARTITION BY columns lead the sort below `window`."""
    below = window.children[0]
    while below.name in _ORDER_KEEPING_NODES and below.children:
        below = below.children[0]
    try:
        partitions = window_partition_keys(window.raw)
        if not any(partitions):
            return True
        if below.name not in ("SortExec", "SortPreservingMergeExec"):
            return False
        keys = sort_keys(below.raw)
    except WireError:
        return False  # bytes we cannot read: assume the worst
    return all(set(p) <= set(keys[: len(set(p))]) for p in partitions)


def ordering_from_below(node: PlanNode) -> str | None:
    """Why no exchange below `node` may be cut, or None.

    A WindowAggExec, and a BoundedWindowAggExec not in Linear mode, check when rebuilt or run
    that their input declares their PARTITION BY columns ordered. DataFusion may have found
    them ordered from facts set below an exchange: a column made constant by a filter (`WHERE
    a = 1`) or a projection (`1 AS a`), or equal to another (`WHERE a = c`), needs no sort key,
    so the sort below the window leaves it out, or there is no sort at all. An exchange carries
    rows, not such facts: once cut there, the consumer reads a scan that declares nothing, and
    the window fails ("Expects PARTITION BY expression to be ordered", "All partition by
    columns should have an ordering"). Keeping those exchanges in the window's stage (run as
    one task) gives it back the plan DataFusion made; sorting in the consumer instead would
    change that plan. Windows whose PARTITION BY columns lead the sort right below them, the
    usual plan, need nothing from below and are cut as before.
    """
    if node.name not in ("BoundedWindowAggExec", "WindowAggExec") or not node.children:
        return None
    if node.line.rsplit("mode=", 1)[-1].startswith("[Linear]"):
        return None  # a linear window groups rows by hashing: it needs no order
    if _partitions_sorted_in_stage(node):
        return None
    return (
        f"{node.name} relies on its PARTITION BY columns being ordered by what happens below an "
        "exchange, which an exchange does not carry"
    )


def write_hazard(node: PlanNode, is_plan_root: bool) -> str | None:
    """Why a DataSinkExec may not be split across tasks (each task writing its share of the
    rows into a staging folder of its own), or None if it may be."""
    sink = file_sink(node.raw)
    if sink is None:
        return "DataSinkExec writes to a sink other than Parquet, CSV or JSON files"
    if not is_plan_root:
        return "DataSinkExec is not the root of the plan"
    if not sink.destination:
        return f"DataSinkExec writes to {len(sink.table_paths)} paths at once"
    if not sink.destination.startswith(("file://", "s3://")):
        return (
            f"DataSinkExec writes to an object store ({sink.destination}) other than S3: written "
            "from one node"
        )
    if not sink.writes_folder:
        return f"DataSinkExec writes a single file ({sink.destination})"
    return None


def splits_write(node: PlanNode, is_plan_root: bool) -> bool:
    """Whether `node` is a file write each task may run over its share of the rows."""
    return node.name == "DataSinkExec" and write_hazard(node, is_plan_root) is None


def split_hazard(node: PlanNode, is_plan_root: bool = False) -> str | None:
    """Why a stage holding `node` must not be split across tasks, or None if it may be."""
    if node.name == "DataSinkExec":
        return write_hazard(node, is_plan_root)
    if collects_left(node) and node.attribute("join_type") in BUILD_SIDE_JOIN_TYPES:
        return (
            f"{node.name} join_type={node.attribute('join_type')} emits build-side rows that "
            "depend on every probe row"
        )
    if node.name == "InterleaveExec":
        return "InterleaveExec keeps the hash repartitions below it in its stage, which must see all rows"
    if node.name == "RepartitionExec" and "preserve_order=true" in node.line:
        return "an order-preserving hash repartition must see all of its input"
    if node.name not in SPLITTABLE_NODES and node_type(node) not in _DECLARED_SPLITTABLE:
        return f"{node_type(node)} is not known to be safe to split across tasks"
    return None
