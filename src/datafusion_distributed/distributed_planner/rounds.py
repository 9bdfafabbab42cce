"""Whether a stage's output is the union of its outputs over any split of one of its leaves.

Two things rely on it. A stage may run in rounds over its feed scan: a task runs its plan once
per round, each round over the next units it is handed (one per partition of the scan), and
writes every round's output to the same files. And a skewed partition of an input may be
shared out by producer files across several tasks (`skew`), each reading the stage's other
inputs whole. Either gives the answer of one run over all the rows only when the stage's
output is the union of its outputs over any split of that leaf: rows go through filters, projections, shuffles,
partial aggregates (whose states the next stage merges, however many there are) and joins
that keep each feed row's matches apart, and every other input of the stage gives the same
rows each round. Anything else (a sort, a limit, a final aggregate, a window, a union with
another input, an outer join that pads the other side, a volatile function) keeps the stage
to one run over all its units.
"""

from __future__ import annotations

from ..execution_plans.plan_node import PlanNode

# nodes that pass on each input row's results on their own
_ROW_BY_ROW = {
    "FilterExec",
    "ProjectionExec",
    "CoalesceBatchesExec",
    "CoalescePartitionsExec",
    "RepartitionExec",
    "CooperativeExec",
}
_JOINS = {"HashJoinExec", "NestedLoopJoinExec", "CrossJoinExec"}
# join types whose output, for one side split, is the union of the outputs over the parts
_SPLITTABLE_SIDE = {
    "Inner": {0, 1},
    "Left": {0},
    "LeftSemi": {0},
    "LeftAnti": {0},
    "LeftMark": {0},
    "Right": {1},
    "RightSemi": {1},
    "RightAnti": {1},
    "RightMark": {1},
}
_VOLATILE = ("random(", "uuid(", "now(")


def runs_in_rounds(root: PlanNode, feed: PlanNode, cut: set[int]) -> bool:
    """Whether the stage whose plan is `root` (minus the subtrees of the nodes whose ids are in
    `cut`, read from other stages) may run in rounds over the units of the feed scan `feed`."""
    return splits_by_rows(root, feed, cut)


def splits_by_rows(root: PlanNode, leaf: PlanNode, cut: set[int]) -> bool:
    """Whether the output of the stage whose plan is `root` (minus the subtrees of the nodes
    whose ids are in `cut`, read from other stages and the same in every run) is the union of
    its outputs over any split of the rows of `leaf` (a feed scan, or one of the cut nodes)."""
    return _kind(root, leaf, cut) == "split"


def _kind(node: PlanNode, feed: PlanNode, cut: set[int]) -> str | None:
    """'split' if the node's output is the union of its outputs over any split of the feed's
    units, 'same' if it does not read the feed and gives the same rows each run, else None."""
    if node is feed:
        return "split"
    if id(node) in cut:
        return "same"  # another stage's output, read as written
    if any(call in node.line for call in _VOLATILE) or "fetch=" in node.line or "Limit" in node.name:
        return None
    kinds = [_kind(child, feed, cut) for child in node.children]
    if None in kinds:
        return None
    if "split" not in kinds:
        return "same"
    if node.name in _ROW_BY_ROW and len(kinds) == 1:
        return None if node.attribute("preserve_order") == "true" else "split"
    if (
        node.name == "AggregateExec"
        and node.attribute("mode") == "Partial"
        and "ordering_mode" not in node.line
    ):
        return "split"
    if node.name in _JOINS and len(kinds) == 2 and kinds.count("split") == 1:
        join_type = "Inner" if node.name == "CrossJoinExec" else node.attribute("join_type")
        if kinds.index("split") in _SPLITTABLE_SIDE.get(join_type or "", set()):
            return "split"
    return None
