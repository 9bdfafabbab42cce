"""The settings that shape a distributed plan, each written, defaulted and validated here once.

`PlanningConfig` holds them. The public `DistributedConfig` extends it with the runtime
settings; `QueryPlanConfig`, what the planner takes, extends it with the number of workers one
query is planned for, and says which DataFusion settings that query is planned with.
"""

from __future__ import annotations

import difflib
import numbers
import types
import typing
from dataclasses import dataclass, fields
from typing import Any

from ..common.units import parse_bytes

MiB = 1024 * 1024  #: bytes in a mebibyte, for the defaults below
_KINDS = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}


def is_byte_size(name: str) -> bool:
    """Whether setting `name` is a number of bytes: it then also takes text such as "64MiB"."""
    return name == "bytes_per_partition" or name.endswith("_bytes")


def _accepts(kind: type, value: object) -> bool:
    """Whether `value` is a `kind` (a NumPy integer is an integer; a boolean is no number)."""
    if kind is bool or isinstance(value, bool):
        return kind is bool and isinstance(value, bool)
    if kind in (int, float):
        return isinstance(value, numbers.Integral if kind is int else numbers.Real)
    return isinstance(value, kind)


def check_types(config: Any) -> None:
    """Check each field of the settings dataclass `config` against its annotation, naming the
    setting, before any range is checked; a byte size written as text ("64MiB", read by
    `common.units.parse_bytes`) becomes its number.

    Raises:
        ValueError: a setting's value is not of its type ("partitions_per_task must be an
            integer, got '4'").
    """
    hints = typing.get_type_hints(type(config))
    for f in fields(config):
        value = getattr(config, f.name)
        if isinstance(value, str) and is_byte_size(f.name):
            try:
                value = parse_bytes(value)
            except ValueError:
                raise ValueError(
                    f"{f.name} must be a byte count such as 1048576 or 64MiB, got {value!r}"
                ) from None
            object.__setattr__(config, f.name, value)  # frozen: set once, while being made
        hint = hints[f.name]
        kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        if value is None and type(None) in kinds:
            continue
        if not any(_accepts(kind, value) for kind in kinds if kind in _KINDS):
            rule = " or ".join(_KINDS[k] for k in kinds if k in _KINDS)
            rule += " (or None)" if type(None) in kinds else ""
            shown = "a value" if f.name == "auth_token" else repr(value)  # a secret is not shown
            raise ValueError(f"{f.name} must be {rule}, got {shown}")


def unknown_setting(name: str, known: typing.Iterable[str], prefix: str = "") -> str:
    """The message for a setting `name` that is none of `known`: the nearest name, if one is
    near, else every name."""
    known = sorted(known)
    near = difflib.get_close_matches(name, known, n=1)
    if near:
        return f"unknown setting {prefix}{name}; did you mean {prefix}{near[0]}?"
    return f"unknown setting {prefix}{name}; the settings are: {', '.join(prefix + k for k in known)}"


def require(valid: bool, name: str, rule: str, value: object) -> None:
    """Raise ValueError naming the setting `name` unless `valid`, so that a bad setting fails
    where the settings are made rather than at the first query.

    Raises:
        ValueError: "`name` must be `rule`, got `value`".
    """
    if not valid:
        raise ValueError(f"{name} must be {rule}, got {value!r}")


@dataclass(frozen=True)
class PlanningConfig:
    """How plans are cut into stages and tasks, whatever the number of workers.

    Attributes:
        partitions_per_task: partitions (threads) each task runs on its worker. The plan is
            made with `workers * partitions_per_task` target partitions, so exchanges fan out
            to the whole cluster. At least 1. Default 2.
        bytes_per_partition: scanned bytes that justify one partition at a leaf stage; a leaf
            stage gets `ceil(bytes / bytes_per_partition / partitions_per_task)` tasks. A
            Parquet scan of local files counts only its columns' bytes (`scan_size`). At
            least 1. Default 16 MiB.
        cardinality_factor: task count of a stage relative to its largest input stage (1.0
            keeps it; below 1 shrinks stages after reductions). Positive. Default 1.0.
        max_tasks_per_stage: cap on any stage's task count; 0 means the number of workers,
            which is also the cap whatever this is. At least 0. Default 0.
        broadcast_inline_bytes: a join's build side that scans at most this many bytes and
            reads no other stage is computed by every consumer task instead of being a stage of
            its own (0 always makes it a stage). At least 0. Default 8 MiB.
        broadcast_total_rows, broadcast_total_bytes, broadcast_row_bytes: when a hash join
            collects its smaller side whole in every task of the other side (a broadcast)
            instead of shuffling both sides; `QueryPlanConfig.broadcast_thresholds` has the rule. The totals
            are a memory budget: what all the copies of a broadcast side together (one per
            worker) may add up to. `broadcast_row_bytes` is what one row of a side is assumed
            to take when DataFusion cannot estimate the side's bytes (any string column), so
            that the byte budget bounds such sides too. At least 0 (`broadcast_row_bytes` at
            least 1). Defaults 4000000 rows, 128 MiB and 64 bytes: on 2 workers, 64 MiB or
            1048576 rows per copy. `broadcast_total_rows=None` leaves DataFusion's settings
            as they are.
        memory_table_inline_bytes: a memory table (`from_pandas`, `register_record_batches`,
            a MemTable) whose data is larger than this is written once by the coordinator, as
            Arrow IPC files its workers read like an exchange's outputs, instead of travelling
            inside every task's plan. At least 0. Default 1 MiB.
        adaptive: re-plan each stage once the stages it reads are written, from the exact
            bytes and rows they hold (see docs/how-a-query-runs.md): fewer tasks for small
            inputs, a small last step run in the coordinator, a shuffled join whose build side
            fits the broadcast budget collecting it instead, skewed partitions shared out.
            Default True.
        adaptive_one_task_bytes: a stage whose inputs hold at most this many bytes runs as
            one task (and, when it reads only other stages and feeds the query's last step,
            inside that step in the coordinator). At least 0. Default 4 MiB.
        adaptive_task_bytes: input bytes that justify one task of a stage that reads other
            stages; a stage keeps at most its planned tasks. At least 1. Default 32 MiB.
        skew_factor, skew_min_bytes: a partition of a stage's input holding more than
            `skew_factor` times the median of that input's other partitions and at least
            `skew_min_bytes` is skewed, and shared out by producer files over several tasks
            where the stage's plan allows it and it is worth it. `skew_factor` at least 1,
            `skew_min_bytes` at least 0. Defaults 2.0 and 16 MiB.

    Raises:
        ValueError: a setting is not of its type or out of range (the message names it).
    """

    partitions_per_task: int = 2
    bytes_per_partition: int = 16 * MiB
    cardinality_factor: float = 1.0
    max_tasks_per_stage: int = 0
    broadcast_inline_bytes: int = 8 * MiB
    broadcast_total_rows: int | None = 4_000_000
    broadcast_total_bytes: int = 128 * MiB
    broadcast_row_bytes: int = 64
    memory_table_inline_bytes: int = 1 * MiB
    adaptive: bool = True
    adaptive_one_task_bytes: int = 4 * MiB
    adaptive_task_bytes: int = 32 * MiB
    skew_factor: float = 2.0
    skew_min_bytes: int = 16 * MiB

    def __post_init__(self) -> None:
        check_types(self)
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
        require(self.broadcast_row_bytes >= 1, "broadcast_row_bytes", "at least 1", self.broadcast_row_bytes)
        require(
            self.memory_table_inline_bytes >= 0,
            "memory_table_inline_bytes",
            "at least 0",
            self.memory_table_inline_bytes,
        )

        require(isinstance(self.adaptive, bool), "adaptive", "True or False", self.adaptive)
        for name in ("adaptive_one_task_bytes", "skew_min_bytes"):
            require(getattr(self, name) >= 0, name, "at least 0", getattr(self, name))
        require(self.adaptive_task_bytes >= 1, "adaptive_task_bytes", "at least 1", self.adaptive_task_bytes)
        require(self.skew_factor >= 1, "skew_factor", "at least 1", self.skew_factor)

    def planner(self, workers: int) -> QueryPlanConfig:
        """These settings for a query planned on `workers` workers."""
        shared = {f.name: getattr(self, f.name) for f in fields(PlanningConfig)}
        return QueryPlanConfig(workers=workers, **shared)


@dataclass(frozen=True)
class QueryPlanConfig(PlanningConfig):
    """The planning settings of one query: `PlanningConfig` and the number of workers.

    Attributes:
        workers: number of workers the tasks of a stage can spread over. At least 1. Default 2.

    Examples:
        >>> QueryPlanConfig(workers=3, broadcast_total_rows=None).datafusion_settings()
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

    def broadcast_thresholds(self) -> tuple[int, int] | None:
        """The largest join side, in (rows, bytes) per copy, that is broadcast rather than
        shuffled, or None when `broadcast_total_rows` is None (DataFusion's settings stay).

        The cost model: a broadcast puts a copy of the side on every worker, so it costs
        `side bytes x workers` of memory (and of transfer, once); a shuffle moves both sides
        once and holds each row of the side on one worker only. DataFusion builds on the
        smaller side, so on 2 workers a broadcast never moves more than the shuffle it
        replaces, and memory decides: a side is broadcast only while all of its copies stay
        within `broadcast_total_bytes`. On more workers the copies grow with the cluster while
        a shuffle does not, and the same budget, divided by more workers, admits only smaller
        sides. DataFusion compares its estimate of a side's bytes with the byte threshold
        and, only when it has no such estimate (a side with a string column, or below a join),
        its row estimate with the row threshold: the rows the budget holds at
        `broadcast_row_bytes` a row, so that a side of unknown size is not copied past the
        budget (TPC-H q18's 1.5 M-row customer-orders side, about 1 GB built in each worker,
        is shuffled on 2 workers, while `part`, `customer` and `partsupp` stay broadcast).
        `broadcast_total_rows` caps the rows whatever the row size."""
        if self.broadcast_total_rows is None:
            return None
        budget_rows = min(self.broadcast_total_rows, self.broadcast_total_bytes // self.broadcast_row_bytes)
        return budget_rows // self.workers, self.broadcast_total_bytes // self.workers

    def datafusion_settings(self) -> dict[str, str]:
        """The DataFusion settings the query is planned with, over the session's own (see
        docs/configuration.md): the target partitions and, unless `broadcast_total_rows` is
        None, the hash join thresholds of a broadcast (`broadcast_thresholds`)."""
        settings = {"datafusion.execution.target_partitions": str(self.target_partitions)}
        thresholds = self.broadcast_thresholds()
        if thresholds is not None:
            rows, size = thresholds
            settings["datafusion.optimizer.hash_join_single_partition_threshold_rows"] = str(rows)
            settings["datafusion.optimizer.hash_join_single_partition_threshold"] = str(size)
        return settings
