"""What handlers are asked and told, and the base class of handlers.

A handler is any object with some of the methods of `DistributedHandler`: the decisions
`task_count`, `route_task`, `rewrite_plan` and `adapt_stage` (each given one of the requests
below) and the notification `on_event` (given an `Event`). `events.chain` asks and tells them
in order.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..common.units import format_bytes

if TYPE_CHECKING:
    from datafusion import SessionContext
    from datafusion.plan import ExecutionPlan

    from ..execution_plans.plan_node import PlanNode
    from ..execution_plans.stage import Stage


@dataclass(frozen=True)
class TaskCountRequest:
    """What the planner knows about a stage when it picks the stage's task count.

    Attributes:
        root: the stage's top plan node (its subtree is the stage, inputs included).
        scanned_bytes: bytes the stage's split file scans read (0 when it scans nothing); a
            Parquet scan of local files counts only the columns it reads (see `scan_size`).
        input_tasks: task counts of the shuffle stages this stage reads and splits.
        splittable_partitions: the most tasks the stage can be split into.
        workers: workers in the cluster.
        config: the `QueryPlanConfig` in use.
        feed_tasks: for each work-unit feed the stage reads a share of, the tasks it asks for
            (0: no number asked; the default handler then gives one task per worker).
    """

    root: PlanNode
    scanned_bytes: int
    input_tasks: tuple[int, ...]
    splittable_partitions: int
    workers: int
    config: Any
    feed_tasks: tuple[int, ...] = ()


@dataclass(frozen=True)
class TaskCount:
    """A stage's task count: `desired` is a wish (still bounded by `maximum` and by the
    partitions the stage can split); `maximum` is a hard cap (None: the workers, or
    `max_tasks_per_stage`); `why` says what `desired` comes from, for `explain()`."""

    desired: int
    maximum: int | None = None
    why: str = ""

    def __post_init__(self) -> None:
        if self.desired < 1:
            raise ValueError("a stage needs at least one task (desired >= 1)")
        if self.maximum is not None and self.maximum < 1:
            raise ValueError("maximum must be at least 1 (or None)")


@dataclass(frozen=True)
class AdaptRequest:
    """What the coordinator knows of a stage once its inputs are complete, before it runs: the
    exact sizes its producers wrote (adaptive execution; see docs/how-a-query-runs.md).

    Attributes:
        stage: the stage as planned (`stage.task_count` tasks).
        partition_bytes, partition_rows: per partition of the inputs the stage's tasks share
            out, what its producers wrote for it (summed over those inputs). Empty when the
            stage shares out no input (its tasks split scans, or it reads everything whole):
            such a stage runs as planned.
        whole_bytes: bytes of the inputs every task reads whole (a broadcast side).
        max_shares: per partition, how many tasks it could be shared out over by producer
            files (1 where it cannot: no input of the stage may be split that way, or one
            producer wrote it all).
        can_fold: whether the stage could instead run inside its consumer, the query's last
            stage run as one task in the coordinator (it reads no files, only other stages).
        config: the query's `QueryPlanConfig` (`adaptive_one_task_bytes`,
            `adaptive_task_bytes`, `skew_factor`, `skew_min_bytes`, and the broadcast budget).
        build_size: when the stage's output is the probe side of a partitioned hash join that
            could collect its build side whole instead, the (rows, bytes) that build side
            holds; None otherwise.
        skew_bytes: for each input that may be shared out by producer files
            (`stage.skew_inputs`), the bytes of each partition: skew shows there rather than
            in the sum over inputs.
    """

    stage: Stage
    partition_bytes: tuple[int, ...]
    partition_rows: tuple[int, ...]
    whole_bytes: int
    max_shares: tuple[int, ...]
    can_fold: bool
    config: Any
    build_size: tuple[int, int] | None = None
    skew_bytes: tuple[tuple[int, ...], ...] = ()

    @property
    def input_bytes(self) -> int:
        """Bytes of every input the stage reads, shared out or whole."""
        return sum(self.partition_bytes) + self.whole_bytes

    @property
    def input_rows(self) -> int:
        """Rows of the inputs the stage's tasks share out."""
        return sum(self.partition_rows)


@dataclass(frozen=True)
class Adaptation:
    """How a stage runs, decided from its inputs' sizes (`AdaptRequest`).

    Attributes:
        tasks: tasks over the partitions not split below (at least 1; at most the planned
            count: a stage is never given more tasks than planned). The planned count with
            nothing split keeps the stage as planned.
        split: (partition, shares) pairs: a skewed partition shared out by producer files
            over `shares` tasks of its own (at most the request's `max_shares` for it).
        fold: run the stage inside its consumer instead (only when the request's `can_fold`);
            `tasks` and `split` are then ignored.
        broadcast: do not shuffle the stage's output: its consumer's join collects its build
            side whole and the stage runs inside it (only when the request has a
            `build_size`); the rest is then ignored.
    """

    tasks: int
    split: tuple[tuple[int, int], ...] = ()
    fold: bool = False
    broadcast: bool = False

    def __post_init__(self) -> None:
        if self.tasks < 1:
            raise ValueError("a stage needs at least one task (tasks >= 1)")
        if any(shares < 2 for _, shares in self.split):
            raise ValueError("a split partition is shared out over at least 2 tasks")


@dataclass(frozen=True)
class AdaptiveDecision:
    """What adaptive execution changed in a stage, and from which sizes: carried by the
    `stage_adapted` event, kept in the query's metrics and shown by EXPLAIN ANALYZE."""

    stage: int
    planned_tasks: int
    tasks: int  # tasks it runs as (0 when folded into its consumer)
    input_bytes: int
    input_rows: int
    split: tuple[tuple[int, int], ...] = ()  # (partition, shares) of skewed partitions split
    folded_into: int | None = None  # the stage it runs inside, when folded
    # (stage, rows, bytes) of the build side its consumer's join collects whole instead
    broadcast: tuple[int, int, int] | None = None
    by: str = ""  # the handler that decided

    def describe(self) -> str:
        """One line: what changed and why, e.g. `2 tasks -> 1: inputs 1.2 MiB, 30000 rows`."""
        by = f" (by {self.by})" if self.by else ""
        if self.broadcast is not None:
            build, rows, collected = self.broadcast
            return (
                f"runs inside stage {self.folded_into}, whose join collects stage {build} whole "
                f"({rows} rows, {format_bytes(collected)}) instead of shuffling both sides{by}"
            )
        size = f"inputs {format_bytes(self.input_bytes)}, {self.input_rows} rows"
        if self.folded_into is not None:
            what = f"runs inside stage {self.folded_into}"
        else:
            what = f"{self.planned_tasks} task{'s' if self.planned_tasks != 1 else ''} -> {self.tasks}"
        if self.split:
            parts = ", ".join(f"partition {p} over {n} tasks" for p, n in self.split)
            what += f" (skewed {parts})"
        return f"{what}: {size}{by}"


@dataclass(frozen=True)
class RoutingRequest:
    """Which worker should run task `task` of `stage` (attempt `attempt`, 0 for the first).

    `workers` are the live workers, in the resolver's order; an answer that is not one of them
    is ignored (the next handler is asked)."""

    stage: Stage
    task: int
    attempt: int
    workers: tuple[str, ...]
    query_id: str


@dataclass(frozen=True)
class PlanRewriteRequest:
    """A task's plan on the worker, just before it runs (its inputs already spliced in).

    A handler may return a replacement: an `ExecutionPlan` or plan bytes (rebuilt with `ctx`).
    """

    query_id: str
    stage: int
    task: int
    attempt: int
    plan: ExecutionPlan
    ctx: SessionContext
    worker: str

    @property
    def plan_bytes(self) -> bytes:
        """The plan serialised (made on demand: most handlers never look)."""
        return self.plan.to_bytes()


class EventKind(str, enum.Enum):
    """What happened, in an `Event`: a query, stage or task started, finished or failed, a
    stage was re-planned from its inputs' sizes, a worker was unreachable, a worker was
    found draining (it takes no new task; the query routes around it and loses nothing), or a
    lost worker was quarantined for later queries, or restored once it answered (these two
    belong to the context, not to one query: their `query_id` is "")."""

    QUERY_STARTED = "query_started"
    QUERY_FINISHED = "query_finished"
    QUERY_FAILED = "query_failed"
    STAGE_STARTED = "stage_started"
    STAGE_FINISHED = "stage_finished"
    STAGE_ADAPTED = "stage_adapted"
    TASK_STARTED = "task_started"
    TASK_FINISHED = "task_finished"
    TASK_FAILED = "task_failed"
    WORKER_UNREACHABLE = "worker_unreachable"
    WORKER_DRAINING = "worker_draining"
    WORKER_QUARANTINED = "worker_quarantined"
    WORKER_RESTORED = "worker_restored"


@dataclass(frozen=True)
class Event:
    """A lifecycle notification.

    Attributes:
        kind: what happened.
        query_id: the query it belongs to.
        stage, task, attempt: where (None for query events).
        worker: the worker involved (a task's worker, or the unreachable or draining one).
        tasks: for stage_started and stage_adapted, the stage's task count; for
            query_started, the stage count.
        metrics: task_finished: the task's `TaskReport`; stage_finished: the `StageMetrics`;
            stage_adapted: the `AdaptiveDecision`; query_finished: the `QueryMetrics`.
        error: the exception, for failures.
        at: `time.time()` when it happened.
    """

    kind: EventKind
    query_id: str
    stage: int | None = None
    task: int | None = None
    attempt: int | None = None
    worker: str | None = None
    tasks: int | None = None
    metrics: Any = None
    error: BaseException | None = None
    at: float = field(default_factory=time.time)


class DistributedHandler:
    """Base class of handlers: every method answers None ("no opinion") or does nothing.

    Subclass it and override what you need; any object with some of these methods works too.
    """

    def task_count(self, request: TaskCountRequest) -> TaskCount | None:
        """The stage's task count, or None to let the next handler decide."""
        return None

    def route_task(self, request: RoutingRequest) -> str | None:
        """The URL of the worker to run the task on, or None to let the next handler decide."""
        return None

    def rewrite_plan(self, request: PlanRewriteRequest) -> ExecutionPlan | bytes | None:
        """A replacement for the task's plan (a plan or plan bytes), or None to keep it."""
        return None

    def adapt_stage(self, request: AdaptRequest) -> Adaptation | None:
        """How the stage runs given its inputs' real sizes, or None to let the next handler decide."""
        return None

    def on_event(self, event: Event) -> None:
        """Hear of a lifecycle event; an exception raised here is logged and ignored."""
        return None
