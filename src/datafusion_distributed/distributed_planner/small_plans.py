"""A plan too small to split, found before it is cut: the small-query tax paid once.

Cutting a plan into stages (`plan_stages`, the fidelity check) costs a few milliseconds, which
a query of a few milliseconds pays in full when it then runs as one task anyway. The task
counts follow scanned bytes (`events.defaults.ScanSizeTaskCount`): a plan whose leaves are all
file scans (or read nothing) and scan, together, no more than one task's bytes gets one task
in every stage, and its stages fold into one run in the coordinator. Such a plan skips the cut.
Anything that could size a stage otherwise sends the plan through the cut: a memory table, a
work-unit feed, a write, a user's `task_count` handler, a `cardinality_factor` above 1.
"""

from __future__ import annotations

from datafusion.plan import ExecutionPlan

from ..codec import scan_kind
from ..codec.feed_scan import feed_scan_ref
from ..common.units import format_bytes
from ..events.chain import HandlerChain
from ..events.handlers import DistributedHandler
from ..execution_plans.plan_node import PlanNode
from .config import QueryPlanConfig
from .scan_size import scanned_bytes

READS_NOTHING = ("EmptyExec", "PlaceholderRowExec")  # leaves of no input (SELECT 1), never split


def one_task_anyway(plan: ExecutionPlan, config: QueryPlanConfig, handlers: HandlerChain) -> str | None:
    """Why `plan` (planned for the cluster) runs as one task without cutting it, in the words
    of a stage's task line; None when only cutting it can tell."""
    if config.cardinality_factor > 1 or any(_sizes_tasks(h) for h in handlers.user):
        return None
    if plan.display().split(":", 1)[0].strip().endswith("SinkExec"):
        return None  # a write: staged over tasks by the cut
    per_task = config.bytes_per_partition * config.partitions_per_task
    scanned, partitions, unsplittable = 0, [], ""
    pending = [plan]
    while pending:
        node = pending.pop()
        if children := node.children():
            pending.extend(children)
            continue
        try:
            leaf = PlanNode.from_plan(node, node.to_bytes())
        except Exception:  # a node of an extension: DataFusion raises plain Exception
            return None
        if leaf.name in READS_NOTHING:
            unsplittable = unsplittable or f"{leaf.name} is a source that cannot be split"
            continue
        if scan_kind(leaf.raw) is None or feed_scan_ref(leaf.raw) is not None:
            return None  # a memory table, a feed, a stream of rows: sized by the cut
        scanned += scanned_bytes(leaf)
        partitions.append(leaf.partitions)
        if scanned > per_task:
            return None
    if not partitions:
        return unsplittable or None
    return (
        f"desired=1 ({format_bytes(scanned)} to scan, {format_bytes(per_task)} a task: "
        f"bytes_per_partition x partitions_per_task), workers/cap={config.task_cap}, "
        f"splittable partitions={min(partitions)}"
    )


def _sizes_tasks(handler: object) -> bool:
    """Whether a user's handler answers `task_count` (the built-in ones leave it to the default)."""
    answer = getattr(type(handler), "task_count", None)
    return answer is not None and answer is not DistributedHandler.task_count
