"""The library's own policies, written as handlers: they answer after every user handler.

- `ScanSizeTaskCount`: a stage's task count from the bytes it scans and the stages it reads.
- `RoundRobinRouting`: task i of stage s on live worker (s + i + attempt) mod workers.

They are also the examples to copy when writing a handler of your own.
"""

from __future__ import annotations

import math

from .handlers import DistributedHandler, RoutingRequest, TaskCount, TaskCountRequest


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


DEFAULT_HANDLERS = (ScanSizeTaskCount(), RoundRobinRouting())
