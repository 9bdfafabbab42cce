"""Which stages DataFusion would never run: the probe side of a hash join whose build side
turns out empty.

A `HashJoinExec` reads its build side (child 0) first; when that holds no row and its join
type can emit nothing without build rows, DataFusion ends the join without reading its probe
side at all, so the probe side's errors (a cast that overflows, a division by zero) never
happen on one node. Distributed, the probe side is a stage of its own that runs beside the
build side's. The scheduler therefore holds a probe stage's failure until the build side is
known: empty, the probe stages are not needed (and their failure is not the query's); not
empty, the failure is the query's, as it would be on one node.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..execution_plans.plan_node import PlanNode
from ..execution_plans.stage import DistributedPlan, Stage

# Join types for which an empty build side means no output row, and DataFusion's HashJoinExec
# then never reads its probe side (checked against DataFusion 55 by the tests).
SKIPS_PROBE_WHEN_BUILD_EMPTY = frozenset({"Inner", "Left", "LeftSemi", "LeftAnti", "LeftMark", "RightSemi"})

# Nodes that make no row from inputs that have none (an aggregate without groups makes one).
_NO_ROWS_FROM_NO_ROWS = frozenset(
    {
        "ProjectionExec",
        "FilterExec",
        "CoalesceBatchesExec",
        "CooperativeExec",
        "RepartitionExec",
        "CoalescePartitionsExec",
        "SortExec",
        "SortPreservingMergeExec",
        "UnionExec",
        "GlobalLimitExec",
        "LocalLimitExec",
        "HashJoinExec",
    }
)


@dataclass(frozen=True)
class ProbeSkip:
    """A join's build side is made of the outputs of `build` (stages or shipped tables) only,
    and `probe` are the stages that only its probe side reads, directly or through others."""

    build: tuple[int, ...]
    probe: tuple[int, ...]


def probe_skips(plan: DistributedPlan) -> tuple[ProbeSkip, ...]:
    """Every join of `plan` whose probe stages need not run when its build side is empty."""
    consumers: dict[int, set[int]] = {}
    for stage in plan.stages:
        for inp in stage.inputs:
            consumers.setdefault(inp.producer, set()).add(stage.id)
    stage_ids = {stage.id for stage in plan.stages}
    skips = []
    for stage in plan.stages:
        boundaries = {id(inp.boundary_node): inp.producer for inp in stage.inputs if inp.boundary_node}
        for join in _joins(stage.root, boundaries):
            build = _only_inputs(join.children[0], boundaries)
            # stages whose output only this stage reads: no other consumer goes without it
            below = _inputs_below(join.children[1], boundaries)
            probe = [p for p in below if p in stage_ids and consumers.get(p) == {stage.id}]
            if not build or not probe or set(build) & set(probe):
                continue
            lineage = _exclusive_lineage(plan, probe, consumers, set(build))
            skips.append(ProbeSkip(tuple(build), tuple(sorted(lineage))))
    return tuple(skips)


def _joins(node: PlanNode, boundaries: dict[int, int]) -> Iterator[PlanNode]:
    """The hash joins of a stage that skip their probe side on an empty build side."""
    if id(node) in boundaries:
        return
    if (
        node.name == "HashJoinExec"
        and len(node.children) == 2
        and node.attribute("join_type") in SKIPS_PROBE_WHEN_BUILD_EMPTY
    ):
        yield node
    for child in node.children:
        yield from _joins(child, boundaries)


def _only_inputs(node: PlanNode, boundaries: dict[int, int]) -> list[int] | None:
    """The producers whose outputs are all that `node`'s subtree reads, when it makes no row
    from none of them; else None."""
    if id(node) in boundaries:
        return [boundaries[id(node)]]
    if node.name not in _NO_ROWS_FROM_NO_ROWS or not node.children:
        return None
    found = []
    for child in node.children:
        below = _only_inputs(child, boundaries)
        if below is None:
            return None
        found.extend(below)
    return found


def _inputs_below(node: PlanNode, boundaries: dict[int, int]) -> list[int]:
    if id(node) in boundaries:
        return [boundaries[id(node)]]
    return [p for child in node.children for p in _inputs_below(child, boundaries)]


def _exclusive_lineage(
    plan: DistributedPlan, probe: list[int], consumers: dict[int, set[int]], build: set[int]
) -> set[int]:
    """`probe` and the stages only they read, directly or through each other."""
    lineage = set(probe)
    frontier = list(probe)
    while frontier:
        stage: Stage = plan.stage(frontier.pop())
        for inp in stage.inputs:
            producer = inp.producer
            if producer in lineage or producer in build or inp.table is not None:
                continue
            if consumers.get(producer, set()) <= lineage:
                lineage.add(producer)
                frontier.append(producer)
    return lineage
