"""The history's records as plain rows (dicts of numbers and strings): what the dashboard's
pages are sent as JSON and what the `distributed.*` SQL tables hold. Queries and stages are
made under the history's lock (a few numbers each); task attempts, which a large query has
thousands of, are copied under it and formatted outside, so a page never holds up a query's
events for long."""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any

from ..metrics.explain import SUMMARY, format_value
from .history import RUNNING, QueryHistory, QueryRecord, StageRecord, TaskAttempt
from .workers import WorkerState

SQL_PREVIEW_CHARS = 300  # of a query's text in the list of queries


def _seconds(query: QueryRecord, now: float) -> float:
    return query.seconds if query.state != RUNNING else now - query.started


def query_row(query: QueryRecord, now: float, sql_chars: int | None = None) -> dict[str, Any]:
    """One query: its id, text, state, times, totals and error."""
    sql = query.sql if sql_chars is None else query.sql[:sql_chars]
    return {
        "query_id": query.query_id,
        "sql": sql,
        "state": query.state,
        "started": query.started,
        "ended": query.ended,
        "seconds": _seconds(query, now),
        "stages_done": query.stages_done,
        "stages_total": query.stages_total,
        "stages_folded": query.stages_folded,
        "tasks_running": query.tasks_running,
        "tasks_done": query.tasks_done,
        "rows": query.rows,
        "rows_written": query.rows_written,
        "bytes_exchanged": query.bytes,
        "error": query.error,
        "distributed": not query.single_node,
    }


def _stage_state(query: QueryRecord, stage: StageRecord) -> str:
    """The stage's state. A waiting stage whose inputs are all done is "starting" (its tasks
    are being placed), or running when it is the last stage, which runs in the coordinator
    without a start event."""
    if stage.state != "waiting" or query.state != RUNNING:
        return stage.state
    producers = [query.stages.get(p) for p in stage.inputs]
    if all(p is not None and p.state in ("finished", "folded") for p in producers):
        return RUNNING if stage.id == query.final else "starting"
    return stage.state


def stage_row(query: QueryRecord, stage: StageRecord, now: float) -> dict[str, Any]:
    """One stage: what it is, and its tasks' progress."""
    state = _stage_state(query, stage)
    if stage.state == "finished" or stage.started is None:
        seconds = stage.seconds
    else:
        seconds = (query.ended or now) - stage.started
    return {
        "query_id": query.query_id,
        "stage": stage.id,
        "name": stage.name,
        "output": stage.output,
        "inputs": list(stage.inputs),
        "state": state,
        "planned_tasks": stage.planned_tasks,
        "tasks": stage.tasks or stage.planned_tasks,
        "tasks_done": stage.done,
        "tasks_running": stage.running,
        "tasks_retried": stage.retried,
        "tasks_failed": stage.failed,
        "rows": stage.rows,
        "bytes": stage.bytes,
        "seconds": seconds,
        "reason": stage.reason,
        "adaptive": stage.adaptive,
    }


def _metrics_text(attempt: TaskAttempt) -> str:
    """DataFusion's main metrics of each node the task ran, a line per node."""
    report = attempt.report
    plan = report.metrics.plan if report is not None and report.metrics is not None else None
    if plan is None:
        return ""
    lines = []
    for node in plan.walk():
        shown = [f"{k}={format_value(k, v)}" for k, v in node.values.items() if k in SUMMARY]
        lines.append(f"{node.name}: {', '.join(shown)}" if shown else node.name)
    return "\n".join(lines)


def task_row(query_id: str, attempt: TaskAttempt, now: float) -> dict[str, Any]:
    """One task attempt: where, when, how long, what it read and wrote, and its metrics."""
    report = attempt.report
    metrics = report.metrics if report is not None else None
    inputs = metrics.inputs if metrics is not None else ()
    seconds = (attempt.ended or now) - attempt.started
    if metrics is not None:
        seconds = metrics.wall_seconds + metrics.queue_seconds
    return {
        "query_id": query_id,
        "stage": attempt.stage,
        "task": attempt.task,
        "attempt": attempt.attempt,
        "worker": attempt.worker,
        "state": attempt.state,
        "started": attempt.started,
        "ended": attempt.ended,
        "seconds": seconds,
        "queue_seconds": metrics.queue_seconds if metrics is not None else None,
        "input_bytes": sum(i.bytes for i in inputs),
        "fetched_bytes": sum(i.fetched_bytes for i in inputs),
        "output_rows": report.rows if report is not None else None,
        "output_bytes": report.bytes if report is not None else None,
        "error": attempt.error,
        "metrics": _metrics_text(attempt),
    }


def queries(history: QueryHistory, sql_chars: int | None = SQL_PREVIEW_CHARS) -> list[dict[str, Any]]:
    """Every query kept, newest first, each with the first `sql_chars` of its text (None: all)."""
    now = time.time()
    return history.read(lambda rs: [query_row(q, now, sql_chars) for q in reversed(rs)])


def query_detail(history: QueryHistory, query_id: str) -> dict[str, Any] | None:
    """A query with its stages, task attempts, adaptive decisions and (once it has ended) the
    text of `explain(analyze=True)`; None when it is not kept."""
    now = time.time()

    def detail(query: QueryRecord) -> tuple[dict[str, Any], list[TaskAttempt]]:
        row = query_row(query, now)
        row["stages"] = [stage_row(query, s, now) for s in sorted(query.stages.values(), key=lambda s: s.id)]
        row["decisions"] = list(query.decisions)
        row["single_node"] = query.single_node
        row["settings"] = list(query.settings)
        row["lost_workers"] = list(query.lost_workers)
        return row, _copies(query)

    found = history.query(query_id, detail)
    if found is None:
        return None
    row, attempts = found
    row["tasks"] = [task_row(query_id, a, now) for a in attempts]  # formatted outside the lock
    if row["state"] != RUNNING:
        row["explain"] = history.explain(query_id)
    return row


def _copies(query: QueryRecord) -> list[TaskAttempt]:
    """The query's task attempts as they are now, in order: copies, read outside the lock."""
    return [copy.copy(a) for a in sorted(query.attempts.values(), key=lambda a: (a.stage, a.task, a.attempt))]


def all_stages(history: QueryHistory) -> list[dict[str, Any]]:
    """Every stage of every query kept."""
    now = time.time()
    return history.read(
        lambda rs: [stage_row(q, s, now) for q in rs for s in sorted(q.stages.values(), key=lambda s: s.id)]
    )


def all_tasks(history: QueryHistory) -> list[dict[str, Any]]:
    """Every task attempt of every query kept."""
    now = time.time()
    attempts = history.read(lambda rs: [(q.query_id, _copies(q)) for q in rs])
    return [task_row(query_id, a, now) for query_id, copies in attempts for a in copies]


def worker_row(state: WorkerState) -> dict[str, Any]:
    """One worker."""
    return dataclasses.asdict(state)
