"""Measure one task where it runs (a worker, or the coordinator for the head stage)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .task_metrics import FileRead, NodeMetrics, TaskMetrics, input_metrics, plan_metrics

log = logging.getLogger("datafusion_distributed.metrics")


class TaskRecorder:
    """Times a task's input reads and turns them, with its executed plan, into TaskMetrics.

    `inputs` are the task's inputs (TaskInput messages or the like: anything with `groups`
    of file locations that have a `size`)."""

    def __init__(self, worker: str, inputs: Sequence[Any]) -> None:
        self.worker = worker
        self.started = time.perf_counter()
        self.inputs = len(inputs)
        self._index = {loc: i for i, inp in enumerate(inputs) for g in (inp.groups or ()) for loc in g}
        self._reads: list[FileRead] = []
        self._lock = threading.Lock()

    def read(self, location: Any, locate: Callable[..., tuple[Any, int]], *args: Any) -> tuple[Any, int]:
        """Call `locate(*args)` -> (file, bytes fetched over the network) and record it."""
        start = time.perf_counter()
        found = locate(*args)
        self.record(location, remote=found[1] > 0, start=start)
        return found

    def record(self, location: Any, remote: bool, start: float) -> None:
        """Record that the file at `location` was read (fetched if `remote`) from `start` until now."""
        read = FileRead(self._index.get(location, 0), location.size, remote, start, time.perf_counter())
        with self._lock:
            self._reads.append(read)

    def finish(self, plan: Any = None, metrics: NodeMetrics | None = None) -> TaskMetrics:
        """The task's metrics; `plan` is the executed ExecutionPlan (its nodes' metrics), or
        `metrics` its nodes' metrics when they are already known."""
        return TaskMetrics(
            worker=self.worker,
            wall_seconds=time.perf_counter() - self.started,
            plan=safe_plan_metrics(plan) if metrics is None else metrics,
            inputs=input_metrics(self.inputs, self._reads),
        )


def safe_plan_metrics(plan: Any) -> NodeMetrics | None:
    """The plan's node metrics, or None (logged) if DataFusion cannot give them."""
    if plan is None:
        return None
    try:
        return plan_metrics(plan)
    except Exception as exc:  # metrics are an observation: never fail a task over them
        log.warning("could not read the plan's metrics: %s", exc)
        return None
