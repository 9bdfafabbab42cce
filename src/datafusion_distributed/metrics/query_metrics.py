"""A query's metrics: every task's report, and their totals per stage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..common.totals import total_of
from ..events.handlers import AdaptiveDecision
from .task_metrics import InputMetrics, NodeMetrics, TaskMetrics

COORDINATOR = "coordinator"  # the `worker` of the head stage, which runs in the coordinator


@dataclass(frozen=True)
class TaskReport:
    """One finished task, as the coordinator saw it.

    `rows`, `bytes` and `partitions` are what it wrote (per output partition: rows, bytes);
    for the head stage, the rows it returned and no bytes. `feed_units`: the work units of
    feeds it read."""

    stage: int
    task: int
    attempt: int
    worker: str
    rows: int
    bytes: int
    partitions: tuple[tuple[int, int], ...]
    metrics: TaskMetrics | None
    feed_units: int = 0

    @property
    def wall_seconds(self) -> float:
        """The task's time on its worker (0.0 without metrics)."""
        return self.metrics.wall_seconds if self.metrics else 0.0

    @property
    def queue_seconds(self) -> float:
        """The task's time outside its worker (0.0 without metrics)."""
        return self.metrics.queue_seconds if self.metrics else 0.0

    @property
    def inputs(self) -> tuple[InputMetrics, ...]:
        """What the task read of each input (empty without metrics)."""
        return self.metrics.inputs if self.metrics else ()

    @classmethod
    def of(cls, stage: int, task: int, attempt: int, worker: str, result: Any) -> TaskReport:
        """From a TaskResult (or anything with its `partitions` and `metrics`)."""
        parts = tuple((p.rows, p.bytes) for p in result.partitions)
        return cls(
            stage,
            task,
            attempt,
            worker,
            sum(r for r, _ in parts),
            sum(b for _, b in parts),
            parts,
            result.metrics,
        )


def merge_nodes(nodes: list[NodeMetrics | None]) -> NodeMetrics | None:
    """Node metrics of several tasks of one stage summed node by node (their plans have one
    shape; where they differ, the first task's shape wins and the others are left out there)."""
    present = [n for n in nodes if n is not None]
    if not present:
        return None
    first = present[0]
    same = [n for n in present if n.name == first.name]
    values: dict[str, int] = {}
    for node in same:
        for name, value in node.values.items():
            values[name] = values.get(name, 0) + value
    children = []
    for i in range(len(first.children)):
        merged = merge_nodes([n.children[i] for n in same if i < len(n.children)])
        if merged is not None:
            children.append(merged)
    return NodeMetrics(first.name, values, tuple(children))


@dataclass
class StageMetrics:
    """A stage's tasks (in task order) and their totals."""

    stage: int
    tasks: list[TaskReport]
    seconds: float = 0.0  # from its first task's dispatch to its last task's answer

    @property
    def _inputs(self) -> list[InputMetrics]:
        """What each task read of each of its inputs, task by task."""
        return [i for t in self.tasks for i in t.inputs]

    rows = total_of("tasks", "rows", "Rows the stage's tasks wrote.")
    bytes = total_of("tasks", "bytes", "Bytes the stage's tasks wrote.")
    fetched_bytes = total_of("_inputs", "fetched_bytes", "Bytes the stage's tasks fetched over the network.")
    read_bytes = total_of("_inputs", "bytes", "Bytes of input files read, over the network or in place.")

    def input_totals(self, index: int) -> InputMetrics:
        """Input `index` summed over the stage's tasks (fetch wall time: the longest)."""
        mine = [i for i in self._inputs if i.index == index]
        return InputMetrics(
            index,
            sum(i.fetched_bytes for i in mine),
            sum(i.local_bytes for i in mine),
            sum(i.files for i in mine),
            sum(i.fetch_seconds for i in mine),
            max((i.fetch_wall_seconds for i in mine), default=0.0),
        )

    @property
    def plan(self) -> NodeMetrics | None:
        """The stage's plan with each node's metrics summed over its tasks (None without metrics)."""
        return merge_nodes([t.metrics.plan if t.metrics else None for t in self.tasks])


@dataclass
class QueryMetrics:
    """Every stage's metrics, filled in as the query runs; complete once it has finished."""

    query_id: str
    stages: dict[int, StageMetrics] = field(default_factory=dict)
    # per stage reading a work-unit feed: the units each of its tasks read
    feed_units: dict[int, dict[int, int]] = field(default_factory=dict)
    seconds: float = 0.0
    finished: bool = False
    # what adaptive execution changed, in order, and the plan as it then ran (None: as planned)
    adaptations: list[AdaptiveDecision] = field(default_factory=list)
    plan_as_run: Any = None
    # workers found lost (their work recomputed) and workers found draining (routed around, their
    # outputs read as usual), in the order found; tasks run again because a worker was lost
    # (retried elsewhere, or their lost outputs recomputed)
    lost_workers: list[str] = field(default_factory=list)
    draining_workers: list[str] = field(default_factory=list)
    rerun_tasks: int = 0
    streamed_stages: list[int] = field(default_factory=list)  # stages whose outputs streamed to their reader

    def stage(self, stage_id: int) -> StageMetrics | None:
        """The metrics of stage `stage_id`, None if it has not started."""
        return self.stages.get(stage_id)
