"""Pass 1 of planning: repair the bytes DataFusion serialises wrongly, before any stage is
cut from them."""

from __future__ import annotations

from datafusion.plan import ExecutionPlan

from ..codec.generate_series import repaired_series
from ..execution_plans.plan_node import PlanNode, replace_leaves


def with_series_repaired(root: PlanNode) -> PlanNode:
    """`root` with the bytes of every series generator DataFusion serialises wrongly repaired
    (see `codec.generate_series`), and so those of its ancestors: every stage, task and
    boundary subtree is cut from these bytes, so all of them rebuild as planned."""
    repairs: dict[int, bytes] = {}
    for node in root.walk():
        fixed = None if node.children else repaired_series(node.raw)
        if fixed is not None:
            repairs[id(node)] = fixed
    return replace_leaves(root, repairs)


def as_sent(plan: ExecutionPlan) -> PlanNode:
    """`plan` as the planner cuts stages from it: its bytes repaired where DataFusion
    serialises them wrongly."""
    return with_series_repaired(PlanNode.from_plan(plan))


def bytes_as_sent(plan: ExecutionPlan) -> bytes:
    """The bytes of `plan` as the planner cuts stages from them (repairs included)."""
    return as_sent(plan).raw
