"""Which partitioned hash join of a stage may collect its build side whole instead, and the
stage's plan if it does: the planner's part of switching a shuffled join to a broadcast once
the build side turns out small (`adaptive.broadcast_switched` does the switch).

DataFusion shuffles both sides of a join it estimates large, and its estimates of a CSV table
or a filtered side may be far off. A `Partitioned` HashJoinExec whose two sides are read from
shuffles can instead collect its left side whole (`CollectLeft`) in every task: then the right
side needs no shuffle, and the stage that would write it runs inside the join's stage, each of
its tasks one of the stage's. That gives the same answer only when:

- the join emits no row decided by all of its right side's rows: its type is Inner, Right,
  RightSemi, RightAnti or RightMark (as `boundaries.BUILD_SIDE_JOIN_TYPES` says of CollectLeft
  joins split across tasks);
- the stage's output is the union of its outputs over any split of the right side's rows
  (`rounds.splits_by_rows`): nothing above the join relies on its rows being hash partitioned;
- nothing but filters, projections and batch coalescing stands between the join and each input;
- the stage shares out nothing but those two inputs (no other shuffle, no scan, no feed), and
  may be split at all (no hazard);
- the right side's producer reads no feed and writes no files.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..codec.joins import coalesced, collect_left
from ..execution_plans.plan_node import PlanNode, replace_nodes
from ..execution_plans.stage import BoundaryKind, BroadcastJoin, StageInput
from .boundaries import BUILD_SIDE_JOIN_TYPES
from .rounds import splits_by_rows

# nodes between a join and an input that change no row's partition
_PASS_THROUGH = {"ProjectionExec", "FilterExec", "CoalesceBatchesExec", "CooperativeExec"}
BROADCAST_JOIN_TYPES = {"Inner", "Right", "RightSemi", "RightAnti", "RightMark"}
assert not BROADCAST_JOIN_TYPES & BUILD_SIDE_JOIN_TYPES


def _input_below(node: PlanNode, boundaries: Sequence[PlanNode]) -> int | None:
    """The index of the boundary reached from `node` through pass-through nodes only."""
    while True:
        for index, boundary in enumerate(boundaries):
            if boundary is node:
                return index
        if node.name not in _PASS_THROUGH or len(node.children) != 1:
            return None
        node = node.children[0]


def broadcast_join(
    root: PlanNode,
    boundaries: Sequence[PlanNode],
    inputs: Sequence[StageInput],
    markers: dict[int, bytes],
    producers_ok: Sequence[bool],
    shares_only_inputs: bool,
) -> BroadcastJoin | None:
    """The join of the stage `root` that may collect its build side instead (see the module),
    if there is one. `boundaries[i]` is where `inputs[i]` is read; `markers` the bytes that
    replace every cut node (inputs and feeds) in the stage's plan, by node id; `producers_ok[i]`
    whether input i's producer may run inside the stage; `shares_only_inputs` whether the
    stage's tasks share out nothing but inputs."""
    split = [i for i, inp in enumerate(inputs) if inp.split]
    if not shares_only_inputs or len(split) != 2:
        return None
    cut = {id(node) for node in boundaries}
    for join in root.walk():
        if (
            join.name != "HashJoinExec"
            or join.attribute("mode") != "Partitioned"
            or join.attribute("join_type") not in BROADCAST_JOIN_TYPES
        ):
            continue
        build, probe = (_input_below(child, boundaries) for child in join.children)
        if (
            build is None
            or probe is None
            or sorted((build, probe)) != split
            or any(inputs[i].where.kind is not BoundaryKind.SHUFFLE for i in (build, probe))
            or not producers_ok[probe]
            or not splits_by_rows(root, boundaries[probe], cut)
        ):
            continue
        return _variant(root, join, boundaries[build], boundaries[probe], markers, build, probe)
    return None


def _variant(
    root: PlanNode,
    join: PlanNode,
    build_node: PlanNode,
    probe_node: PlanNode,
    markers: dict[int, bytes],
    build: int,
    probe: int,
) -> BroadcastJoin:
    """The stage's plan and its display with `join` collecting its build side (see `BroadcastJoin`)."""
    below = {id(node) for node in join.walk()}
    inner = {key: raw for key, raw in markers.items() if key in below}
    inner[id(build_node)] = coalesced(markers[id(build_node)])
    switched = collect_left(replace_nodes(join.raw, list(join.walk()), inner))
    outer = {key: raw for key, raw in markers.items() if key not in below}
    plan = replace_nodes(root.raw, list(root.walk()), {**outer, id(join): switched})
    return BroadcastJoin(build, probe, plan, _shown(root, join, build_node, probe_node))


def _shown(node: PlanNode, join: PlanNode, build_node: PlanNode, probe_node: PlanNode) -> PlanNode:
    """`node` as the switched plan runs it: the join collecting its left side, a coalesce over
    the build input, the probe's producer's work (below its repartition) in the probe's place.
    For display only: nodes that changed keep their old bytes."""
    if node is build_node:
        return PlanNode("CoalescePartitionsExec", "CoalescePartitionsExec", 1, b"", (node,))
    if node is probe_node:
        return node.children[0]
    children = tuple(_shown(child, join, build_node, probe_node) for child in node.children)
    line = node.line.replace("mode=Partitioned", "mode=CollectLeft") if node is join else node.line
    if line == node.line and all(new is old for new, old in zip(children, node.children, strict=True)):
        return node
    return dataclasses.replace(node, line=line, children=children)
