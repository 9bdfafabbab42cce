"""Settings of a DistributedContext: planning, runtime and the embedded cluster."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..distributed_planner.config import MiB, PlannerConfig
from ..protocol.auth import token_from_env


@dataclass(frozen=True)
class DistributedConfig:
    """Every setting of a distributed query, with its default.

    Attributes:
        partitions_per_task: partitions (threads) each task runs on its worker. Default 2.
        bytes_per_partition: scanned bytes per partition at leaf stages. Default 16 MiB.
        cardinality_factor: task count of a stage relative to its largest input. Default 1.0.
        max_tasks_per_stage: cap on tasks per stage; 0 means the number of workers. Default 0.
        broadcast_inline_bytes: a join build side scanning at most this many bytes, and reading
            no other stage, is computed by each consumer task instead of exchanged. Default 8 MiB.
        broadcast_total_rows, broadcast_total_bytes: what all the copies of a broadcast join
            side may add up to. A hash join side DataFusion estimates under these divided by the
            number of workers is broadcast (collected whole by each task of the other side)
            instead of both sides being shuffled: they set DataFusion's
            `hash_join_single_partition_threshold_rows` / `hash_join_single_partition_threshold`
            on the wrapped context (its own defaults are 131072 rows and 1 MiB, tuned for one
            machine). Dividing by the workers keeps a broadcast cheaper than the shuffle it
            replaces as the cluster grows. Defaults 4000000 rows and 128 MiB (2000000 rows and
            64 MiB per copy on 2 workers); `broadcast_total_rows=None` leaves DataFusion's
            settings as they are.
        embedded_workers: workers the embedded cluster starts when no workers are given. Default 2.
        compression: codec of exchanged Arrow IPC files: "lz4", "zstd", None, or "auto": None
            when the workers' outputs are read in place (a cluster the library started on this
            host), "lz4" otherwise. Default "auto".
        connect_timeout: seconds to wait for a worker to answer a short call. Default 30.
        task_timeout: seconds a task may run before the query fails. Default 600.
        task_attempts: tries of a task whose worker was lost (the task reruns on another
            worker; outputs the lost worker held are recomputed). Errors of the query itself
            (bad SQL, a UDF raising) fail at once. Default 3.
        query_timeout: seconds a query may run before it is cancelled (QueryTimedOut); None for
            no limit. Default None.
        auth_token: the workers' shared token. Default: the environment variable
            DATAFUSION_DISTRIBUTED_TOKEN; a cluster the library starts (embedded or LocalCluster)
            brings its own. Not shown in the repr.
        tls_root_certs: path of a PEM file of the CAs that signed the workers' certificates, for
            `grpc+tls://` workers. Default None (the system's CAs).
    """

    partitions_per_task: int = 2
    bytes_per_partition: int = 16 * MiB
    cardinality_factor: float = 1.0
    max_tasks_per_stage: int = 0
    broadcast_inline_bytes: int = 8 * MiB
    broadcast_total_rows: int | None = 4_000_000
    broadcast_total_bytes: int = 128 * MiB
    embedded_workers: int = 2
    compression: str | None = "auto"
    connect_timeout: float = 30.0
    task_timeout: float = 600.0
    task_attempts: int = 3
    query_timeout: float | None = None
    auth_token: str | None = field(default_factory=token_from_env, repr=False)
    tls_root_certs: str | None = None

    def __post_init__(self) -> None:
        if (
            self.broadcast_total_rows is not None and self.broadcast_total_rows < 0
        ) or self.broadcast_total_bytes < 0:
            raise ValueError("broadcast_total_rows and broadcast_total_bytes must not be negative")
        if self.embedded_workers < 1:
            raise ValueError("embedded_workers must be at least 1")
        if self.compression not in (None, "lz4", "zstd", "auto"):
            raise ValueError("compression must be None, 'lz4', 'zstd' or 'auto'")
        if self.task_attempts < 1:
            raise ValueError("task_attempts must be at least 1")
        if self.connect_timeout <= 0 or self.task_timeout <= 0:
            raise ValueError("timeouts must be positive")
        if self.query_timeout is not None and self.query_timeout <= 0:
            raise ValueError("query_timeout must be positive (or None for no limit)")

    def planner(self, workers: int) -> PlannerConfig:
        return PlannerConfig(
            workers=workers,
            partitions_per_task=self.partitions_per_task,
            bytes_per_partition=self.bytes_per_partition,
            cardinality_factor=self.cardinality_factor,
            max_tasks_per_stage=self.max_tasks_per_stage,
            broadcast_inline_bytes=self.broadcast_inline_bytes,
        )
