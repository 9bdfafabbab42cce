"""Pass 3 of planning: give each fragment a task count: from scanned bytes at leaves, from
input stages above them, capped by the workers and by the partitions a stage can split; 1 if
anything in it forbids splitting. Handlers may choose the count (see `events`)."""

from __future__ import annotations

from ..codec.feed_scan import collected_feed_scan
from ..events.chain import HandlerChain
from ..events.handlers import TaskCountRequest
from ..execution_plans.stage import BoundaryKind
from .config import QueryPlanConfig
from .fragments import Fragment, edge_units, split_union_scans, union_partitions
from .scan_size import scanned_bytes


def assign_task_counts(fragment: Fragment, config: QueryPlanConfig, handlers: HandlerChain) -> None:
    """Give `fragment` and the fragments it reads their task counts and the reason shown."""
    if fragment.table is not None:
        return  # written by the coordinator, not run as tasks
    for edge in fragment.edges:
        assign_task_counts(edge.fragment, config, handlers)
    split_scans = [scan for scan, whole in fragment.scans if not whole]
    split_edges = [edge for edge in fragment.edges if not edge.whole]
    # a feed scan's partitions are shared out like a file scan's; its units go to whichever
    # of those partitions asks first
    split_feeds = [feed for feed, whole in fragment.feeds if not whole]
    feed_tasks = tuple(collected_feed_scan(feed.raw).tasks for feed in split_feeds)
    together = split_union_scans(fragment)  # shared out as one list of partitions
    units = [len(union_partitions(together))] if together else [s.partitions for s in split_scans]
    units += [edge_units(e) for e in split_edges]
    units += [feed.partitions for feed in split_feeds]
    if fragment.hazards:
        fragment.tasks, fragment.reason = 1, fragment.hazards[0]
        return
    if not units:
        fragment.tasks, fragment.reason = 1, "nothing to split: every input is read whole"
        return
    shuffles = [e.fragment.tasks for e in split_edges if e.fragment.kind is BoundaryKind.SHUFFLE]
    # a shipped memory table is read like a scan: its bytes count toward the stage's size
    tables = sum(e.fragment.table.data_bytes for e in split_edges if e.fragment.table is not None)
    request = TaskCountRequest(
        fragment.root,
        sum(scanned_bytes(s) for s in split_scans) + tables,
        tuple(shuffles),
        min(units),
        config.workers,
        config,
        feed_tasks,
    )
    count, handler = handlers.task_count(request)  # events.defaults.ScanSizeTaskCount unless a user answers
    fragment.reads_leaves = bool(split_scans or split_feeds)  # sized by its own scans, not inputs
    cap = config.task_cap if count.maximum is None else count.maximum
    fragment.tasks = max(1, min(count.desired, cap, min(units)))
    desired = f"{count.desired} ({count.why})" if count.why else count.desired
    limits = {"desired": desired, "workers/cap": cap, "splittable partitions": min(units)}
    fragment.reason = ", ".join(f"{k}={v}" for k, v in limits.items())
    if handler in handlers.user:
        fragment.reason += f" (by {type(handler).__name__})"
