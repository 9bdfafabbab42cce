"""The scheduler's observer: it turns what happens to a query into lifecycle events for the
handler chain and into the query's metrics (QueryMetrics).

Every call comes from the thread that drives the query, so handlers see events in the order
they happened: query started, then for each stage: stage started, its tasks started and
finished (or failed), stage finished; and last query finished or failed.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from ..events.chain import HandlerChain
from ..events.handlers import AdaptiveDecision, Event, EventKind
from ..metrics.query_metrics import COORDINATOR, QueryMetrics, StageMetrics, TaskReport
from ..metrics.task_metrics import TaskMetrics

log = logging.getLogger("datafusion_distributed.coordinator")


class QueryCollector:
    """One query's observer: the scheduler reports to it, and it tells the handlers and fills in `metrics`."""

    def __init__(self, query_id: str, handlers: HandlerChain | None = None) -> None:
        self.query_id = query_id
        self.handlers = handlers or HandlerChain()
        self.metrics = QueryMetrics(query_id)
        self._dispatched: dict[tuple[int, int, int], float] = {}  # (stage, task, attempt) -> sent at
        self._started = time.perf_counter()
        self._ended = False

    def _emit(self, kind: EventKind, **fields: Any) -> None:
        self.handlers.notify(Event(kind, self.query_id, **fields))

    # -- query ----------------------------------------------------------------------------
    def query_started(self, stages: int) -> None:
        """The query starts with `stages` stages; its clock starts now."""
        self._started = time.perf_counter()
        self._emit(EventKind.QUERY_STARTED, tasks=stages)

    def query_finished(self) -> None:
        """The query succeeded: record its time and tell the handlers (once, however often called)."""
        if self._ended:
            return
        self._ended = True
        self.metrics.seconds = time.perf_counter() - self._started
        self.metrics.finished = True
        self._emit(EventKind.QUERY_FINISHED, metrics=self.metrics)

    def query_failed(self, error: BaseException) -> None:
        """The query failed with `error`: record its time and tell the handlers (once)."""
        if self._ended:
            return
        self._ended = True
        self.metrics.seconds = time.perf_counter() - self._started
        self._emit(EventKind.QUERY_FAILED, metrics=self.metrics, error=error)

    # -- stages ---------------------------------------------------------------------------
    def stage_started(self, stage: int, workers: list[str]) -> None:
        """A stage's tasks were sent, task i to `workers[i]`; each task counts as started too."""
        self.metrics.stages[stage] = StageMetrics(stage, [])
        self._emit(EventKind.STAGE_STARTED, stage=stage, tasks=len(workers))
        for task, worker in enumerate(workers):
            self.task_started(stage, task, worker, 0)

    def stage_finished(self, stage: int, results: list, seconds: float, workers: list[str]) -> None:
        """Every task of a stage answered (`results[i]` from `workers[i]`) after `seconds`."""
        reports = [
            TaskReport.of(stage, task, 0, worker, result)
            for task, (worker, result) in enumerate(zip(workers, results, strict=True))
        ]
        metrics = self.metrics.stages.setdefault(stage, StageMetrics(stage, []))
        # keep the attempt numbers and feed units the finished-task reports had
        before = {r.task: r for r in metrics.tasks}
        metrics.tasks = [
            dataclasses.replace(r, attempt=before[r.task].attempt, feed_units=before[r.task].feed_units)
            if r.task in before
            else r
            for r in reports
        ]
        metrics.seconds = seconds
        self._emit(EventKind.STAGE_FINISHED, stage=stage, tasks=len(reports), metrics=metrics)

    def stage_adapted(self, decision: AdaptiveDecision, plan: Any) -> None:
        """A stage was re-planned from its inputs' sizes (`decision`); `plan` is the query's
        plan as it now runs."""
        self.metrics.adaptations.append(decision)
        self.metrics.plan_as_run = plan
        self._emit(EventKind.STAGE_ADAPTED, stage=decision.stage, tasks=decision.tasks, metrics=decision)

    # -- tasks ----------------------------------------------------------------------------
    def task_started(self, stage: int, task: int, worker: str, attempt: int) -> None:
        """A task (attempt) was sent to `worker`; its queue time is measured from now."""
        self._dispatched[stage, task, attempt] = time.perf_counter()
        self._emit(EventKind.TASK_STARTED, stage=stage, task=task, worker=worker, attempt=attempt)

    def task_finished(
        self, stage: int, task: int, worker: str, attempt: int, result: Any, feed_units: int = 0
    ) -> Any:
        """The result with its queue time filled in (round trip minus the worker's wall time);
        `feed_units` the work units of feeds the task read."""
        dispatched = self._dispatched.pop((stage, task, attempt), None)
        metrics: TaskMetrics | None = getattr(result, "metrics", None)
        if metrics is not None and dispatched is not None:
            round_trip = time.perf_counter() - dispatched
            metrics = dataclasses.replace(metrics, queue_seconds=max(0.0, round_trip - metrics.wall_seconds))
            result = dataclasses.replace(result, metrics=metrics)
        report = dataclasses.replace(
            TaskReport.of(stage, task, attempt, worker, result), feed_units=feed_units
        )
        stage_metrics = self.metrics.stages.setdefault(stage, StageMetrics(stage, []))
        stage_metrics.tasks = [t for t in stage_metrics.tasks if t.task != task] + [report]
        log.debug(
            "stage %d task %d done on %s (%.3fs, %d rows, %d bytes written, %d bytes fetched)",
            stage,
            task,
            worker,
            result.seconds,
            report.rows,
            report.bytes,
            result.fetched_bytes,
        )
        self._emit(
            EventKind.TASK_FINISHED, stage=stage, task=task, worker=worker, attempt=attempt, metrics=report
        )
        return result

    def task_failed(self, stage: int, task: int, worker: str, attempt: int, error: BaseException) -> None:
        """A task attempt failed on `worker` with `error`."""
        self._dispatched.pop((stage, task, attempt), None)
        self._emit(EventKind.TASK_FAILED, stage=stage, task=task, worker=worker, attempt=attempt, error=error)

    def worker_unreachable(self, worker: str, error: BaseException | None = None) -> None:
        """Worker `worker` was lost (`error`: how it showed); the query goes on without it."""
        self.metrics.lost_workers.append(worker)
        self._emit(EventKind.WORKER_UNREACHABLE, worker=worker, error=error)

    def worker_draining(self, worker: str, stage: int | None = None, task: int | None = None) -> None:
        """Worker `worker` drains: the query sends it nothing more (task `task` of `stage`, which
        it refused, runs elsewhere) and reads the outputs it holds as usual."""
        self.metrics.draining_workers.append(worker)
        log.info("worker %s drains: the query sends it no more tasks", worker)
        self._emit(EventKind.WORKER_DRAINING, stage=stage, task=task, worker=worker)

    def task_rerun(self) -> None:
        """A task runs again because a worker was lost (retried, or its outputs recomputed)."""
        self.metrics.rerun_tasks += 1

    # -- the head stage, run here -----------------------------------------------------------
    def head_finished(self, stage: int, rows: int, metrics: TaskMetrics | None) -> None:
        """The head stage, run in the coordinator, returned `rows` rows: one task and its stage finished."""
        report = TaskReport(stage, 0, 0, COORDINATOR, rows, 0, (), metrics)
        seconds = metrics.wall_seconds if metrics else 0.0
        self.metrics.stages[stage] = StageMetrics(stage, [report], seconds)
        log.info("stage %d: done in the coordinator in %.3fs, %d rows", stage, seconds, rows)
        self._emit(
            EventKind.TASK_FINISHED, stage=stage, task=0, worker=COORDINATOR, attempt=0, metrics=report
        )
        self._emit(EventKind.STAGE_FINISHED, stage=stage, tasks=1, metrics=self.metrics.stages[stage])
