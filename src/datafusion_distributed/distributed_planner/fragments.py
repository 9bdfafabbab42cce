"""A plan cut at its boundaries: fragments, each the subtree a stage may run, joined by
edges, the boundaries between a consumer and its producers. The planner's passes fill them in
(see `planner`); `cut_edges` and `stage_leaves` look through the boundaries folded back."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..codec import file_groups
from ..codec.memory import MemoryScan
from ..execution_plans.plan_node import PlanNode
from ..execution_plans.stage import BoundaryKind


@dataclass(eq=False)
class Edge:
    """A boundary between a consumer fragment and the producer `fragment` it reads."""

    node: PlanNode  # the boundary node in the consumer's subtree
    fragment: Fragment
    whole: bool  # every consumer task reads all of it (a join's collected side)
    inline: bool = False  # folded back into the consumer (a 1 -> 1 boundary)


@dataclass(eq=False)
class Fragment:
    """The subtree from `root` (a boundary, or the plan's root) down to the next boundaries: a
    stage, unless folded back into its consumer; the passes fill in its tasks and reason."""

    root: PlanNode
    kind: BoundaryKind | None
    edges: list[Edge] = field(default_factory=list)
    scans: list[tuple[PlanNode, bool]] = field(default_factory=list)  # (scan, whole)
    feeds: list[tuple[PlanNode, bool]] = field(default_factory=list)  # (work-unit feed scan, whole)
    hazards: list[str] = field(default_factory=list)
    tasks: int = 1
    reason: str = ""
    reads_leaves: bool = False  # splits scans or feeds of its own (see `fold_boundaries`)
    stage_id: int = -1
    table: MemoryScan | None = None  # a memory table the coordinator ships: no stage of its own
    path: tuple[int, ...] = ()  # child indices from the plan's root to `root`
    union_scans: set[int] = field(default_factory=set)  # ids of its scans below a union, row by row


# Nodes that compute each output row from one input row: between a union and a scan they
# keep the scan's partitions independent of each other (a round-robin repartition only moves
# batches between the partitions of one task).
ROW_BY_ROW = {"ProjectionExec", "FilterExec", "CoalesceBatchesExec", "CooperativeExec"}


def row_by_row(node: PlanNode) -> bool:
    """Whether `node` computes each output row from one input row (see ROW_BY_ROW)."""
    return node.name in ROW_BY_ROW or (node.name == "RepartitionExec" and "RoundRobinBatch(" in node.line)


def split_union_scans(fragment: Fragment) -> list[PlanNode]:
    """The scans whose partitions the fragment's tasks share out together, as one list: its
    split scans when there are several, all below a union through row-by-row nodes only, and
    it splits nothing else (a union of per-file scans, as a Delta table's). Each partition is
    still read by exactly one task; a task may read none of one scan. [] otherwise."""
    split = [scan for scan, whole in fragment.scans if not whole]
    others = any(not e.whole for e in fragment.edges) or any(not whole for _, whole in fragment.feeds)
    if len(split) < 2 or others or not all(id(scan) in fragment.union_scans for scan in split):
        return []
    return split


def union_partitions(scans: list[PlanNode]) -> list[tuple[PlanNode, int]]:
    """The partitions of `scans`, shared out together (see `split_union_scans`), in order, as
    (scan, file group index): those that read a file. A partition that file pruning left with
    none is read by no task."""
    return [(scan, index) for scan in scans for index, files in enumerate(file_groups(scan.raw)) if files]


def edge_units(edge: Edge) -> int:
    """Partitions of an input that tasks can share out."""
    if edge.fragment.kind in (BoundaryKind.SHUFFLE, BoundaryKind.MEMORY):
        return edge.node.partitions
    return 1  # a coalesce or merge yields one partition in the consumer


def cut_edges(fragment: Fragment) -> list[Edge]:
    """Boundaries that stay cut in this stage, looking through folded ones. What a folded
    boundary's producer read is read whole when the consumer reads that boundary whole (a
    join's collected side folded back reads all of its inputs in every task)."""
    cut = []
    for edge in fragment.edges:
        if not edge.inline:
            cut.append(edge)
            continue
        inner = cut_edges(edge.fragment)
        cut.extend(replace(e, whole=True) if edge.whole and not e.whole else e for e in inner)
    return cut


def stage_leaves(fragment: Fragment, kind: str) -> list[tuple[PlanNode, bool]]:
    """The fragment's leaves of `kind` ("scans" or "feeds"), looking through folded edges,
    each with whether the stage reads it whole."""
    leaves = list(getattr(fragment, kind))
    for edge in fragment.edges:
        if edge.inline:
            leaves.extend((leaf, whole or edge.whole) for leaf, whole in stage_leaves(edge.fragment, kind))
    return leaves


def count_stages(fragment: Fragment) -> int:
    """The stages `fragment` and the fragments it reads become (shipped tables are none)."""
    return 1 + sum(count_stages(e.fragment) for e in cut_edges(fragment) if e.fragment.table is None)
