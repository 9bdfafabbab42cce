"""The library's own policies, written as handlers: they answer after every user handler.

- `ScanSizeTaskCount`: a stage's task count from the bytes it scans and the stages it reads.
- `RoundRobinRouting`: task i of stage s on live worker (s + i + attempt) mod workers.
- `InputSizeAdaptation`: a stage's tasks from the bytes its inputs really hold, once they are
  written: small inputs coalesced, a small last step run in the coordinator, skewed partitions
  shared out.

They are also the examples to copy when writing a handler of your own.
"""

from __future__ import annotations

import math
import statistics

from .handlers import (
    Adaptation,
    AdaptRequest,
    DistributedHandler,
    RoutingRequest,
    TaskCount,
    TaskCountRequest,
)


class ScanSizeTaskCount(DistributedHandler):
    """One task per `bytes_per_partition * partitions_per_task` scanned bytes at leaf stages,
    and above a shuffle as many tasks as its largest input stage (times `cardinality_factor`);
    over a work-unit feed the tasks it asks for, or one per worker; at most one task per
    worker (or `max_tasks_per_stage`)."""

    def task_count(self, request: TaskCountRequest) -> TaskCount:
        """Enough tasks for the scanned bytes, and at least the inputs' task counts times the factor."""
        config = request.config
        desired = 1
        if request.scanned_bytes:
            desired = math.ceil(
                request.scanned_bytes / config.bytes_per_partition / config.partitions_per_task
            )
        if request.input_tasks:
            desired = max(desired, math.ceil(max(request.input_tasks) * config.cardinality_factor))
        if request.feed_tasks:
            # a feed's work is unknown when planning: its units are spread by asking, so one
            # task per worker, unless the feed asks for a number
            desired = max(desired, *(tasks or request.workers for tasks in request.feed_tasks))
        return TaskCount(desired=max(1, desired), maximum=config.task_cap)


class RoundRobinRouting(DistributedHandler):
    """Spread a stage's tasks over the live workers, shifted by stage so that single-task
    stages do not all land on the first worker; a retry moves to the next worker."""

    def route_task(self, request: RoutingRequest) -> str:
        """The live worker at (stage + task + attempt) mod workers."""
        workers = request.workers
        return workers[(request.stage.id + request.task + request.attempt) % len(workers)]


class InputSizeAdaptation(DistributedHandler):
    """A stage's tasks from the exact bytes its producers wrote for it:

    - inputs of at most `adaptive_one_task_bytes` in all: one task, or, when the stage reads
      only other stages and feeds the query's last step, run inside that step in the
      coordinator;
    - otherwise one task per `adaptive_task_bytes` of input, never more than planned;
    - a stage whose output is the probe side of a partitioned join whose build side turned out
      to fit the broadcast budget (`QueryPlanConfig.broadcast_thresholds`, per copy): not
      shuffled, the join collects its build side instead;
    - a partition larger than `skew_factor` times the median partition and than
      `skew_min_bytes` is shared out by producer files over as many tasks as it needs at
      `adaptive_task_bytes` each (at least 2; at most its producers' files, and one per
      worker or `max_tasks_per_stage`), where the stage's
      plan allows it (`distributed_planner.skew`); the other partitions share the tasks as above.
    """

    def adapt_stage(self, request: AdaptRequest) -> Adaptation:
        """Tasks for the bytes, and shares for the skewed partitions."""
        config, sizes = request.config, request.partition_bytes
        planned = request.stage.task_count
        thresholds = config.broadcast_thresholds()
        if request.build_size is not None and thresholds is not None:
            (rows, size), (most_rows, most_bytes) = request.build_size, thresholds
            if rows <= most_rows and size <= most_bytes:
                return Adaptation(tasks=planned, broadcast=True)
        if request.input_bytes <= config.adaptive_one_task_bytes:
            return Adaptation(tasks=1, fold=request.can_fold)
        median = statistics.median(sizes) if sizes else 0
        split = tuple(
            (partition, min(most, config.task_cap, max(2, math.ceil(size / config.adaptive_task_bytes))))
            for partition, (size, most) in enumerate(zip(sizes, request.max_shares, strict=True))
            if min(most, config.task_cap) > 1
            and size > config.skew_factor * median
            and size >= config.skew_min_bytes
        )
        rest = sum(sizes) - sum(sizes[partition] for partition, _ in split)
        tasks = max(1, min(planned, math.ceil(rest / config.adaptive_task_bytes)))
        return Adaptation(tasks=tasks, split=split)


DEFAULT_HANDLERS = (ScanSizeTaskCount(), RoundRobinRouting(), InputSizeAdaptation())
