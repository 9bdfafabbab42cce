"""Settings that force real distribution on tiny test data.

With the defaults, a query over a few kilobytes runs as one task in the coordinator. Tests of
correctness need the opposite: every stage split over as many tasks as it has workers and
partitions, every join side exchanged rather than computed in place, every partition that
adaptive execution may share out over several tasks shared out, and half of the joins that it
may switch to collecting their build side switched.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..distributed_planner.config import DistributedConfig
from ..events.handlers import Adaptation, AdaptRequest, DistributedHandler, TaskCount, TaskCountRequest

#: Every scan worth a task of its own, no join side computed in place or broadcast by size;
#: adaptive execution keeps every task it can (`SplitEveryStage` shares out what it can).
FORCED_CONFIG = DistributedConfig(
    bytes_per_partition=1,
    broadcast_inline_bytes=0,
    broadcast_total_rows=0,
    broadcast_total_bytes=0,
    adaptive_one_task_bytes=0,
    adaptive_task_bytes=1,
    skew_factor=1.0,
    skew_min_bytes=0,
)


class SplitEveryStage(DistributedHandler):
    """Ask for one task per worker at every stage (still capped by what a stage can split)."""

    def task_count(self, request: TaskCountRequest) -> TaskCount:
        """As many tasks as there are workers."""
        return TaskCount(desired=request.workers)

    def adapt_stage(self, request: AdaptRequest) -> Adaptation | None:
        """Switch every other join that may collect its build side to doing so, whatever the
        build side's size (of stages with even ids), so that both ways are exercised; share
        out every partition that may be shared out by producer files over two tasks; else
        let the built-in rules decide."""
        if request.build_size is not None and request.stage.id % 2 == 0:
            return Adaptation(tasks=request.stage.task_count, broadcast=True)
        split = tuple((q, 2) for q, most in enumerate(request.max_shares) if most > 1)
        return Adaptation(tasks=request.stage.task_count, split=split) if split else None


def forced_distribution(**config: Any) -> dict[str, Any]:
    """Keyword arguments for DistributedContext that force distribution; `config` overrides
    fields of FORCED_CONFIG (e.g. query_timeout)."""
    return {"config": replace(FORCED_CONFIG, **config), "handlers": [SplitEveryStage()]}
