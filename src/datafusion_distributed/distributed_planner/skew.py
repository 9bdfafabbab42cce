"""Which inputs of a stage may have a skewed partition shared out over several tasks.

A task given a share of partition q of such an input reads q's files from some of its
producers only, and partition q of the stage's other split inputs whole (the stage's whole
inputs as always). Together the shares compute what one task over all of q computes only when
the stage's output is the union of its outputs over any split of that input's rows
(`rounds.splits_by_rows`): a partitioned hash join may split the side whose rows it emits on
their own (either side of an inner join; the left of a left, left semi, left anti or left mark
join; the right of their right mirrors; neither side of a full join), and the nodes above it
may only filter, project, repartition or aggregate partially. A final aggregate, a window, a
sort or a limit over the input keeps it whole: partial aggregation already absorbs a hot
group key before the shuffle, and a final aggregate split by rows would emit a group twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..execution_plans.plan_node import PlanNode
from ..execution_plans.stage import BoundaryKind, StageInput
from .rounds import splits_by_rows


def skew_inputs(
    root: PlanNode, boundaries: Sequence[PlanNode], inputs: Sequence[StageInput], splits_leaves: bool
) -> tuple[int, ...]:
    """The indices of `inputs` (read where `boundaries` stand in the stage's plan `root`)
    whose partitions may be shared out by producer files. None when the stage's tasks also
    share out scans or feeds (`splits_leaves`): a share of one partition would have no share
    of them to read."""
    if splits_leaves:
        return ()
    cut = {id(node) for node in boundaries}
    return tuple(
        index
        for index, (node, inp) in enumerate(zip(boundaries, inputs, strict=True))
        if inp.split and inp.where.kind is BoundaryKind.SHUFFLE and splits_by_rows(root, node, cut)
    )
