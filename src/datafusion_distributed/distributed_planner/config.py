"""Every setting of the distributed planner, in one typed object with documented defaults."""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024


@dataclass(frozen=True)
class PlannerConfig:
    """How a physical plan is cut into stages and how many tasks each stage gets.

    Attributes:
        workers: number of workers the tasks of a stage can spread over.
        partitions_per_task: partitions each task runs (threads on its worker). The plan is made
            with `workers * partitions_per_task` target partitions, so exchanges fan out to the
            whole cluster.
        bytes_per_partition: scanned bytes that justify one partition at a leaf stage
            (default 16 MiB); a leaf stage gets `ceil(bytes / bytes_per_partition /
            partitions_per_task)` tasks.
        cardinality_factor: scale of a stage's task count relative to its largest input
            stage (1.0 keeps it; below 1 shrinks stages after reductions).
        max_tasks_per_stage: hard cap on any stage's task count (0 means the worker count).
        broadcast_inline_bytes: a join's collected (build) side that scans at most this many
            bytes and reads no other stage is computed by every consumer task instead of being
            a stage of its own (default 8 MiB; 0 always makes it a stage).
    """

    workers: int = 2
    partitions_per_task: int = 2
    bytes_per_partition: int = 16 * MiB
    cardinality_factor: float = 1.0
    max_tasks_per_stage: int = 0
    broadcast_inline_bytes: int = 8 * MiB

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError("workers must be at least 1")
        if self.partitions_per_task < 1:
            raise ValueError("partitions_per_task must be at least 1")
        if self.bytes_per_partition < 1:
            raise ValueError("bytes_per_partition must be positive")
        if self.cardinality_factor <= 0:
            raise ValueError("cardinality_factor must be positive")

    @property
    def target_partitions(self) -> int:
        return self.workers * self.partitions_per_task

    @property
    def task_cap(self) -> int:
        cap = self.workers
        if self.max_tasks_per_stage > 0:
            cap = min(cap, self.max_tasks_per_stage)
        return cap
