"""What handlers are asked and told, and the base class of handlers.

A handler is any object with some of the methods of `DistributedHandler`: the decisions
`task_count`, `route_task` and `rewrite_plan` (each given one of the requests below) and the
notification `on_event` (given an `Event`). `events.chain` asks and tells them in order.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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
    `max_tasks_per_stage`)."""

    desired: int
    maximum: int | None = None

    def __post_init__(self) -> None:
        if self.desired < 1:
            raise ValueError("a stage needs at least one task (desired >= 1)")
        if self.maximum is not None and self.maximum < 1:
            raise ValueError("maximum must be at least 1 (or None)")


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
    """What happened, in an `Event`: a query, stage or task started, finished or failed, or a worker was unreachable."""

    QUERY_STARTED = "query_started"
    QUERY_FINISHED = "query_finished"
    QUERY_FAILED = "query_failed"
    STAGE_STARTED = "stage_started"
    STAGE_FINISHED = "stage_finished"
    TASK_STARTED = "task_started"
    TASK_FINISHED = "task_finished"
    TASK_FAILED = "task_failed"
    WORKER_UNREACHABLE = "worker_unreachable"


@dataclass(frozen=True)
class Event:
    """A lifecycle notification.

    Attributes:
        kind: what happened.
        query_id: the query it belongs to.
        stage, task, attempt: where (None for query events).
        worker: the worker involved (a task's worker, or the unreachable one).
        tasks: for stage_started, the stage's task count; for query_started, the stage count.
        metrics: task_finished: the task's `TaskReport`; stage_finished: the `StageMetrics`;
            query_finished: the `QueryMetrics`.
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

    def on_event(self, event: Event) -> None:
        """Hear of a lifecycle event; an exception raised here is logged and ignored."""
        return None
