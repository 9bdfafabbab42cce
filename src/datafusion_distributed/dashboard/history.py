"""The history of a coordinator's queries: each query's SQL, how it ended, its stages and every
task attempt, recorded from lifecycle events and kept for the last `history_length` finished
queries (running ones are always kept).

A query's events reach its record through a `QueryRecorder`, an ordinary handler added to the
run's chain; each event only updates counters under the history's lock. Readers (the web
server, the progress callbacks, the SQL tables) take copies as plain values under the same
lock, so they never see a record half-updated and never hold the lock while they format.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..events.handlers import AdaptiveDecision, DistributedHandler, Event, EventKind
from ..metrics.analyze import render_explain
from ..metrics.progress import outcome_of

if TYPE_CHECKING:
    from ..execution_plans.stage import DistributedPlan
    from ..metrics.query_metrics import QueryMetrics, TaskReport

RUNNING = "running"
SQL_CHARS = 100_000  # a query's text kept at most (a generated statement can be huge)
ERROR_CHARS = 4_000


@dataclass
class TaskAttempt:
    """One attempt of one task: where and when it ran, and how it ended.

    `state` is "running", "finished", "failed", or "stopped" (another attempt won, or the
    query ended before it answered)."""

    stage: int
    task: int
    attempt: int
    worker: str
    started: float  # time.time()
    ended: float | None = None
    state: str = RUNNING
    report: TaskReport | None = None
    error: str = ""


@dataclass
class StageRecord:
    """A stage as planned, and what its tasks have done so far.

    `state` is "waiting" (its inputs are not complete; the dashboard shows "starting" once they
    are), "running", "finished", "folded"
    (adaptive execution runs it inside another stage), or how its query ended ("failed",
    "cancelled", "timed out") when that stopped it."""

    id: int
    name: str  # the stage's top plan node
    output: str  # how its consumer reads it (shuffle, coalesce, ...), "result" for the last stage
    inputs: tuple[int, ...]  # the stages it reads
    planned_tasks: int
    reason: str  # why it has the task count it has
    tasks: int = 0  # tasks it runs as, once started
    state: str = "waiting"
    started: float | None = None
    seconds: float = 0.0
    adaptive: str = ""  # what adaptive execution changed, in a line
    done: int = 0
    running: int = 0
    retried: int = 0  # attempts after a task's first
    failed: int = 0  # attempts that failed
    rows: int = 0  # written by its finished tasks
    bytes: int = 0


@dataclass
class QueryRecord:
    """One query: its text, its state ("running", "finished", "failed", "cancelled" or "timed
    out"), its stages and task attempts, and totals so far."""

    query_id: str
    sql: str
    started: float  # time.time()
    stages: dict[int, StageRecord]
    final: int  # the id of its last stage
    single_node: str = ""  # why it runs on one node ("" when it is distributed)
    settings: tuple[str, ...] = ()
    state: str = RUNNING
    ended: float | None = None
    seconds: float = 0.0
    rows: int = 0  # rows of the result (the last stage's)
    rows_written: int = 0  # by every finished task: the progress line's rows
    bytes: int = 0  # written by every finished task: exchanged between stages
    error: str = ""
    attempts: dict[tuple[int, int, int], TaskAttempt] = field(default_factory=dict)
    decisions: list[str] = field(default_factory=list)  # adaptive decisions, in order
    lost_workers: list[str] = field(default_factory=list)
    # kept until the plan's text is asked for once (`QueryHistory.explain`), then dropped
    plan: DistributedPlan | None = None
    metrics: QueryMetrics | None = None
    explain: str | None = None

    @property
    def stages_total(self) -> int:
        """Stages that run on their own (those folded into another stage do not)."""
        return sum(1 for s in self.stages.values() if s.state != "folded")

    @property
    def stages_folded(self) -> int:
        """Stages planned that run inside another stage instead (adaptive execution)."""
        return sum(1 for s in self.stages.values() if s.state == "folded")

    @property
    def stages_done(self) -> int:
        """Stages finished."""
        return sum(1 for s in self.stages.values() if s.state == "finished")

    @property
    def tasks_running(self) -> int:
        """Task attempts running now."""
        return sum(s.running for s in self.stages.values())

    @property
    def tasks_done(self) -> int:
        """Tasks finished."""
        return sum(s.done for s in self.stages.values())


@dataclass(frozen=True)
class Progress:
    """Where a query stands, as `DistributedContext.on_progress` callbacks are given it.

    Attributes:
        query_id: the query.
        stages_done, stages_total: stages finished, of those that run on their own.
        tasks_running, tasks_done: task attempts running now, and tasks finished.
        rows, bytes: written by the finished tasks so far (bytes: exchanged between stages).
        seconds: since the query started (its whole time once done).
        done: whether the query has ended: the last call for it.
        state: "running", "finished", "failed", "cancelled" or "timed out".
    """

    query_id: str
    stages_done: int
    stages_total: int
    tasks_running: int
    tasks_done: int
    rows: int
    bytes: int
    seconds: float
    done: bool
    state: str


def _stage_records(plan: DistributedPlan) -> dict[int, StageRecord]:
    stages = {}
    for stage in plan.stages:
        output = stage.output.value if stage.output is not None else "result"
        stages[stage.id] = StageRecord(
            stage.id,
            stage.root.name,
            output,
            tuple(inp.producer for inp in stage.inputs),
            stage.task_count,
            stage.reason,
        )
    return stages


class QueryHistory:
    """The records of a coordinator's queries (see the module's docstring).

    Args:
        length: finished queries kept (`DistributedConfig.history_length`).
    """

    def __init__(self, length: int = 100) -> None:
        self.length = length
        self._queries: OrderedDict[str, QueryRecord] = OrderedDict()  # in the order they started
        self._lost: dict[str, float] = {}  # worker -> when a query last found it unreachable
        self._lock = threading.Lock()

    def recorder(self, plan: DistributedPlan, sql: str) -> QueryRecorder:
        """A handler recording the run of `plan` (whose text is `sql`) into this history."""
        return QueryRecorder(self, plan, sql)

    def set_length(self, length: int) -> None:
        """Keep `length` finished queries from now on (dropping the oldest beyond it now)."""
        with self._lock:
            self.length = length
            self._trim()

    def _trim(self) -> None:
        finished = [qid for qid, q in self._queries.items() if q.state != RUNNING]
        for query_id in finished[: max(0, len(finished) - self.length)]:
            del self._queries[query_id]

    # -- recording (the query's thread) -------------------------------------------------
    def _record(self, recorder: QueryRecorder, event: Event) -> None:
        with self._lock:
            if event.kind is EventKind.QUERY_STARTED:
                plan = recorder.plan
                self._queries[event.query_id] = QueryRecord(
                    event.query_id,
                    recorder.sql[:SQL_CHARS],
                    event.at,
                    _stage_records(plan),
                    plan.final.id,
                    plan.single_node,
                    plan.settings,
                    plan=plan,
                )
                return
            query = self._queries.get(event.query_id)
            if query is None:
                return
            _apply(query, event)
            if event.kind is EventKind.WORKER_UNREACHABLE and event.worker:
                self._lost[event.worker] = event.at
            if query.state != RUNNING:
                self._trim()

    # -- reading (any thread) -----------------------------------------------------------
    def read(self, fn: Callable[[list[QueryRecord]], Any]) -> Any:
        """`fn(records)` over every record kept, oldest first, under the history's lock: `fn`
        must only copy what it needs, quickly."""
        with self._lock:
            return fn(list(self._queries.values()))

    def query(self, query_id: str, fn: Callable[[QueryRecord], Any]) -> Any:
        """`fn(record)` of query `query_id` under the lock (see `read`); None when not kept."""
        with self._lock:
            record = self._queries.get(query_id)
            return None if record is None else fn(record)

    def lost_workers(self) -> dict[str, float]:
        """Workers a query found unreachable, and when it last did (`time.time()`)."""
        with self._lock:
            return dict(self._lost)

    def progress(self) -> list[Progress]:
        """Where each running query stands, and each ended one (its last state)."""
        now = time.time()
        return self.read(lambda records: [_progress(q, now) for q in records])

    def explain(self, query_id: str) -> str | None:
        """`explain(analyze=True)`'s text of a finished query (made the first time it is asked
        for, then its plan is dropped); None while it runs, or when it is not kept."""
        with self._lock:
            record = self._queries.get(query_id)
            if record is None or record.state == RUNNING:
                return None
            if record.explain is not None or record.plan is None:
                return record.explain
            plan, metrics = record.plan, record.metrics
        try:
            text = render_explain(plan, metrics) if metrics is not None else render_explain(plan)
        except Exception as exc:  # a page shows the rest of the query all the same
            text = f"(the plan could not be shown: {type(exc).__name__}: {exc})"
        with self._lock:
            record.explain, record.plan = text, None
        return text


def _progress(query: QueryRecord, now: float) -> Progress:
    done = query.state != RUNNING
    return Progress(
        query.query_id,
        query.stages_done,
        query.stages_total,
        query.tasks_running,
        query.tasks_done,
        query.rows_written,
        query.bytes,
        query.seconds if done else now - query.started,
        done,
        query.state,
    )


def _stop_running(query: QueryRecord, stage: int | None, at: float) -> None:
    """Attempts of `stage` (every stage when None) still running end as stopped: a race's
    loser, or tasks still out when the query ended."""
    for attempt in query.attempts.values():
        if attempt.state == RUNNING and (stage is None or attempt.stage == stage):
            attempt.state, attempt.ended = "stopped", at
            record = query.stages.get(attempt.stage)
            if record is not None:
                record.running = max(0, record.running - 1)


def _apply(query: QueryRecord, event: Event) -> None:
    """Update `query` with what `event` reports."""
    kind, at = event.kind, event.at
    stage = query.stages.get(event.stage) if event.stage is not None else None
    key = (event.stage or 0, event.task or 0, event.attempt or 0)  # a task's events name all three
    if kind is EventKind.STAGE_STARTED and stage is not None:
        stage.state, stage.started, stage.tasks = RUNNING, at, event.tasks or 0
    elif kind is EventKind.TASK_STARTED and stage is not None:
        query.attempts[key] = TaskAttempt(*key, event.worker or "", at)
        stage.running += 1
        if event.attempt:
            stage.retried += 1
    elif kind is EventKind.TASK_FINISHED and stage is not None:
        report: TaskReport | None = event.metrics
        attempt = query.attempts.get(key)
        if attempt is None:  # the last stage, run in the coordinator: it reports only its end
            wall = report.wall_seconds if report is not None else 0.0
            attempt = query.attempts[key] = TaskAttempt(*key, event.worker or "", at - wall)
            stage.started = stage.started or attempt.started
            stage.tasks = stage.tasks or 1
        elif attempt.state == RUNNING:
            stage.running = max(0, stage.running - 1)
        attempt.state, attempt.ended, attempt.report = "finished", at, report
        stage.done += 1
        if report is not None:
            stage.rows += report.rows
            stage.bytes += report.bytes
            query.rows_written += report.rows
            query.bytes += report.bytes
            if event.stage == query.final:
                query.rows += report.rows
    elif kind is EventKind.TASK_FAILED and stage is not None:
        attempt = query.attempts.get(key)
        if attempt is not None and attempt.state == RUNNING:
            stage.running = max(0, stage.running - 1)
            attempt.state, attempt.ended = "failed", at
            attempt.error = str(event.error or "")[:ERROR_CHARS]
        stage.failed += 1
    elif kind is EventKind.STAGE_FINISHED and stage is not None:
        _stop_running(query, event.stage, at)
        stage.state = "finished"
        stage.seconds = getattr(event.metrics, "seconds", 0.0) or (at - (stage.started or at))
    elif kind is EventKind.STAGE_ADAPTED and stage is not None:
        decision: AdaptiveDecision = event.metrics
        stage.adaptive = decision.describe()
        query.decisions.append(f"stage {decision.stage}: {stage.adaptive}")
        if decision.folded_into is not None:
            stage.state = "folded"
        else:
            stage.tasks = decision.tasks
    elif kind is EventKind.WORKER_UNREACHABLE and event.worker:
        if event.worker not in query.lost_workers:
            query.lost_workers.append(event.worker)
    elif kind in (EventKind.QUERY_FINISHED, EventKind.QUERY_FAILED):
        error = event.error if kind is EventKind.QUERY_FAILED else None
        query.state = outcome_of(error)
        query.ended = at
        query.metrics = event.metrics
        query.seconds = getattr(event.metrics, "seconds", 0.0) or (at - query.started)
        query.error = str(error)[:ERROR_CHARS] if error is not None else ""
        _stop_running(query, None, at)
        if error is not None:
            _mark_unfinished(query)


def _mark_unfinished(query: QueryRecord) -> None:
    """A query that ended with an error: its stages that had not finished, and its last stage
    (the coordinator reports it at its end, error or not), end as the query did."""
    for stage in query.stages.values():
        if stage.state in ("waiting", RUNNING) or stage.id == query.final:
            stage.state = query.state
    for attempt in query.attempts.values():
        if attempt.stage == query.final and attempt.state == "finished":
            attempt.state = query.state


class QueryRecorder(DistributedHandler):
    """Records one run's events into a `QueryHistory` (made by `QueryHistory.recorder`)."""

    def __init__(self, history: QueryHistory, plan: DistributedPlan, sql: str) -> None:
        self.history = history
        self.plan = plan
        self.sql = sql

    def on_event(self, event: Event) -> None:
        """Record `event` into the history."""
        self.history._record(self, event)
