"""The library's own policies, written as handlers: they answer after every user handler.

- `ScanSizeTaskCount`: a stage's task count from the bytes it scans and the stages it reads.
- `RoundRobinRouting`: task i of stage s on live worker (s + i + attempt) mod workers.
- `InputSizeAdaptation`: a stage's tasks from the bytes its inputs really hold, once they are
  written: small inputs coalesced, a small last step run in the coordinator, a small build side
  collected instead of shuffling the other side, skewed partitions shared out.

They are also the examples to copy when writing a handler of your own.
"""

from __future__ import annotations

import math
import statistics

from ..common.dealing import deal
from ..common.units import format_bytes
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
        """Enough tasks for the scanned bytes, and at least the inputs' task counts times the
        factor; `why` says which decided."""
        config = request.config
        per_task = config.bytes_per_partition * config.partitions_per_task
        desired, why = 1, "no scan or shuffle to size it by"
        if request.scanned_bytes:
            desired = math.ceil(request.scanned_bytes / per_task)
            why = f"{format_bytes(request.scanned_bytes)} to scan, {format_bytes(per_task)} a task: bytes_per_partition x partitions_per_task"
        if request.input_tasks:
            by_inputs = math.ceil(max(request.input_tasks) * config.cardinality_factor)
            if by_inputs > desired or not request.scanned_bytes:
                desired, why = by_inputs, f"its largest input stage's {max(request.input_tasks)} task(s)"
                if config.cardinality_factor != 1:
                    why += f" x cardinality_factor {config.cardinality_factor:g}"
        if request.feed_tasks:
            # a feed's work is unknown when planning: its units are spread by asking, so one
            # task per worker, unless the feed asks for a number
            by_feeds = max(tasks or request.workers for tasks in request.feed_tasks)
            if by_feeds > desired:
                desired, why = by_feeds, "a work-unit feed: one task per worker, or as the feed asks"
        return TaskCount(desired=max(1, desired), maximum=config.task_cap, why=why)


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
    - a partition holding, in an input that may be shared out by producer files, more than
      `skew_factor` times the median of that input's other partitions and at least
      `skew_min_bytes` is skewed, where the stage's plan allows sharing it out
      (`distributed_planner.skew`): it is shared out by producer files over as many tasks as
      it has producer files (at most one per worker or `max_tasks_per_stage`), when that
      leaves the busiest worker less to read, counting what each share reads whole of the
      other inputs (each builds that side again); the other partitions share the tasks as
      above.
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
        shares = [min(most, config.task_cap) for most in request.max_shares]
        skewed = [
            shares[q] > 1
            and any(
                side[q] >= config.skew_min_bytes and side[q] > config.skew_factor * _median_of_others(side, q)
                for side in request.skew_bytes
            )
            for q in range(len(sizes))
        ]
        split = tuple(
            (q, shares[q]) for q in range(len(sizes)) if skewed[q] and _worth_sharing(request, q, shares[q])
        )
        rest = sum(sizes) - sum(sizes[partition] for partition, _ in split)
        tasks = max(1, min(planned, math.ceil(rest / config.adaptive_task_bytes)))
        return Adaptation(tasks=tasks, split=split)


def _worth_sharing(request: AdaptRequest, partition: int, shares: int) -> bool:
    """Whether sharing `partition` out over `shares` tasks ends the stage sooner. Each share
    reads the partition of the stage's other inputs whole (a join builds its side of it again
    in each): that must weigh no more than each share of the largest side, and the shares
    must leave the busiest worker less to read than the partition whole does, the stage's
    other partitions dealt to the workers too (`busiest_worker`)."""
    sizes = request.partition_bytes
    largest = max(side[partition] for side in request.skew_bytes)
    rebuilt = sizes[partition] - largest
    if rebuilt > largest / shares:  # building the other side costs more than probing: measured
        return False
    others = [size for q, size in enumerate(sizes) if q != partition]
    shared = others + [rebuilt + largest / shares] * shares
    workers = request.config.workers
    return busiest_worker(shared, workers) < busiest_worker([*others, sizes[partition]], workers)


def busiest_worker(weights: list[float], workers: int) -> float:
    """What the busiest of `workers` gets when `weights` are dealt largest first, each to the
    least loaded worker.

    Examples:
        >>> busiest_worker([95, 58], 2), busiest_worker([63, 63, 58], 2)
        (95, 121)
    """
    return max(load for _, load in deal(enumerate(weights), workers))


def _median_of_others(sizes: tuple[int, ...], partition: int) -> float:
    """The median size of the partitions other than `partition` (0 when there are none)."""
    others = sizes[:partition] + sizes[partition + 1 :]
    return statistics.median(others) if others else 0


DEFAULT_HANDLERS = (ScanSizeTaskCount(), RoundRobinRouting(), InputSizeAdaptation())
