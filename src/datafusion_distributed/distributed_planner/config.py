"""The settings that shape a distributed plan, each written, defaulted and validated here once.

`PlanningSettings` holds them. The public `DistributedConfig` extends it with the runtime
settings; `PlannerConfig`, what the planner takes, extends it with the number of workers one
query is planned for, and says which DataFusion settings that query is planned with.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

MiB = 1024 * 1024  #: bytes in a mebibyte, for the defaults below


def require(valid: bool, name: str, rule: str, value: object) -> None:
    """Raise ValueError naming the setting `name` unless `valid`, so that a bad setting fails
    where the settings are made rather than at the first query.

    Raises:
        ValueError: "`name` must be `rule`, got `value`".
    """
    if not valid:
        raise ValueError(f"{name} must be {rule}, got {value!r}")


@dataclass(frozen=True)
class PlanningSettings:
    """How plans are cut into stages and tasks, whatever the number of workers.

    Attributes:
        partitions_per_task: partitions (threads) each task runs on its worker. The plan is
            made with `workers * partitions_per_task` target partitions, so exchanges fan out
            to the whole cluster. At least 1. Default 2.
        bytes_per_partition: scanned bytes that justify one partition at a leaf stage; a leaf
            stage gets `ceil(bytes / bytes_per_partition / partitions_per_task)` tasks. At
            least 1. Default 16 MiB.
        cardinality_factor: task count of a stage relative to its largest input stage (1.0
            keeps it; below 1 shrinks stages after reductions). Positive. Default 1.0.
        max_tasks_per_stage: cap on any stage's task count; 0 means the number of workers,
            which is also the cap whatever this is. At least 0. Default 0.
        broadcast_inline_bytes: a join's build side that scans at most this many bytes and
            reads no other stage is computed by every consumer task instead of being a stage of
            its own (0 always makes it a stage). At least 0. Default 8 MiB.
        broadcast_total_rows, broadcast_total_bytes: what all the copies of a broadcast join
            side may add up to. A hash join side DataFusion estimates under these divided by
            the number of workers is broadcast (collected whole by each task of the other side)
            instead of both sides being shuffled: they set DataFusion's
            `hash_join_single_partition_threshold_rows` / `hash_join_single_partition_threshold`
            for planning (its own defaults, 131072 rows and 1 MiB, suit one machine). Dividing
            by the workers keeps a broadcast cheaper than the shuffle it replaces as the cluster
            grows. At least 0. Defaults 4000000 rows and 128 MiB (2000000 rows and 64 MiB per
            copy on 2 workers); `broadcast_total_rows=None` leaves DataFusion's settings as
            they are.
        memory_table_inline_bytes: a memory table (`from_pandas`, `register_record_batches`,
            a MemTable) whose data is larger than this is written once by the coordinator, as
            Arrow IPC files its workers read like an exchange's outputs, instead of travelling
            inside every task's plan. At least 0. Default 1 MiB.

    Raises:
        ValueError: a setting is out of range (the message names it).
    """

    partitions_per_task: int = 2
    bytes_per_partition: int = 16 * MiB
    cardinality_factor: float = 1.0
    max_tasks_per_stage: int = 0
    broadcast_inline_bytes: int = 8 * MiB
    broadcast_total_rows: int | None = 4_000_000
    broadcast_total_bytes: int = 128 * MiB
    memory_table_inline_bytes: int = 1 * MiB

    def __post_init__(self) -> None:
        require(self.partitions_per_task >= 1, "partitions_per_task", "at least 1", self.partitions_per_task)
        require(self.bytes_per_partition >= 1, "bytes_per_partition", "at least 1", self.bytes_per_partition)
        require(self.cardinality_factor > 0, "cardinality_factor", "positive", self.cardinality_factor)
        require(self.max_tasks_per_stage >= 0, "max_tasks_per_stage", "at least 0", self.max_tasks_per_stage)
        require(
            self.broadcast_inline_bytes >= 0,
            "broadcast_inline_bytes",
            "at least 0",
            self.broadcast_inline_bytes,
        )
        rows = self.broadcast_total_rows
        require(rows is None or rows >= 0, "broadcast_total_rows", "at least 0 (or None)", rows)
        require(
            self.broadcast_total_bytes >= 0, "broadcast_total_bytes", "at least 0", self.broadcast_total_bytes
        )
        require(
            self.memory_table_inline_bytes >= 0,
            "memory_table_inline_bytes",
            "at least 0",
            self.memory_table_inline_bytes,
        )

    def planner(self, workers: int) -> PlannerConfig:
        """These settings for a query planned on `workers` workers."""
        shared = {f.name: getattr(self, f.name) for f in fields(PlanningSettings)}
        return PlannerConfig(workers=workers, **shared)


@dataclass(frozen=True)
class PlannerConfig(PlanningSettings):
    """The planning settings of one query: `PlanningSettings` and the number of workers.

    Attributes:
        workers: number of workers the tasks of a stage can spread over. At least 1. Default 2.

    Examples:
        >>> PlannerConfig(workers=3, broadcast_total_rows=None).datafusion_settings()
        {'datafusion.execution.target_partitions': '6'}
    """

    workers: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.workers >= 1, "workers", "at least 1", self.workers)

    @property
    def target_partitions(self) -> int:
        """Partitions the plan is made with: `workers * partitions_per_task`."""
        return self.workers * self.partitions_per_task

    @property
    def task_cap(self) -> int:
        """The most tasks any stage may have: the workers, or `max_tasks_per_stage` if fewer."""
        cap = self.workers
        if self.max_tasks_per_stage > 0:
            cap = min(cap, self.max_tasks_per_stage)
        return cap

    def datafusion_settings(self) -> dict[str, str]:
        """The DataFusion settings the query is planned with, over the session's own (see
        docs/configuration.md): the target partitions and, unless `broadcast_total_rows` is
        None, the hash join thresholds of a broadcast."""
        settings = {"datafusion.execution.target_partitions": str(self.target_partitions)}
        if self.broadcast_total_rows is not None:
            # A join side this small is broadcast (collected whole by every task) rather than
            # both sides shuffled: copying a small side to each worker beats moving every row
            # of a big one, as long as all the copies together stay small.
            rows = self.broadcast_total_rows // self.workers
            settings["datafusion.optimizer.hash_join_single_partition_threshold_rows"] = str(rows)
            settings["datafusion.optimizer.hash_join_single_partition_threshold"] = str(
                self.broadcast_total_bytes // self.workers
            )
        return settings
