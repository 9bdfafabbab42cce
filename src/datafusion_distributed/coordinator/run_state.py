"""The state one run of a query shares between its parts: the scheduler that places tasks, the
head stage that ends the query here, and the shipper of its memory tables.

Each part is given this state, not the run: where the tasks' outputs are (`results`,
`placement`), which workers were contacted or lost, and the run's events, retries and
cancellation. The scheduler alone decides what runs next."""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from datafusion import SessionContext

from ..codec import replace_subtree
from ..distributed_planner.config import QueryPlanConfig
from ..distributed_planner.empty_inputs import read_in_place_of_nothing
from ..distributed_planner.planner import single_task
from ..errors import QueryFailed
from ..events.chain import HandlerChain
from ..execution_plans.object_stores import ObjectStores
from ..execution_plans.stage import DistributedPlan, InputBoundary, Stage, StageInput, TaskPlan
from ..metrics.query_metrics import QueryMetrics
from ..protocol.messages import FileLocation, TaskInput, TaskResult
from ..runtime.session_settings import TaskSettings
from ..runtime.streams import declared_schema
from ..work_unit_feed.dispatch import FeedRun
from .cancellation import CancelScope
from .inputs import exchange_schema, input_groups, needs_single_task
from .lifecycle import QueryCollector
from .liveness import LivenessMonitor
from .retry import RetryPolicy
from .services import RunServices, exchange_compression
from .streaming import StreamPlan, streamed_input

log = logging.getLogger("datafusion_distributed.coordinator")


@dataclass
class RunState:
    """One run's shared state (see the module's docstring)."""

    plan: DistributedPlan
    workers: list[str]
    services: RunServices
    config: QueryPlanConfig  # the config the query was planned with, read by its run
    query_id: str
    events: QueryCollector  # lifecycle events and metrics
    liveness: LivenessMonitor
    retry: RetryPolicy
    cancel_scope: CancelScope = field(default_factory=CancelScope)  # cancel() from any thread
    results: dict[int, list[TaskResult]] = field(default_factory=dict)
    placement: dict[int, list[str]] = field(default_factory=dict)  # stage -> worker URL of each task
    contacted: set[str] = field(default_factory=set)  # workers chosen for a task: they hold its data
    attempts: dict[tuple[int, int], int] = field(default_factory=dict)  # (stage, task) -> last attempt number
    feeds: FeedRun | None = None  # the units of the plan's feeds, from when it runs
    # by input marker: where an input left empty is read, its subtree reading nothing (or None)
    no_rows: dict[bytes, InputBoundary | None] = field(default_factory=dict)
    draining_seen: set[str] = field(default_factory=set)  # draining workers this query was told of
    streams: StreamPlan = field(default_factory=StreamPlan)  # the exchanges that stream (see `streaming`)
    stream_schemas: dict[bytes, bytes] = field(default_factory=dict)  # input marker -> its leaf's schema

    @classmethod
    def start(
        cls,
        plan: DistributedPlan,
        workers: Sequence[str],
        services: RunServices,
        config: QueryPlanConfig,
        handlers: HandlerChain,
    ) -> RunState:
        """The state of a new run of `plan`, with an id of its own."""
        query_id = uuid.uuid4().hex
        events = QueryCollector(query_id, handlers)
        liveness = services.liveness or LivenessMonitor(services.clients)
        retry = RetryPolicy(
            config.task_attempts, events, on_lost=functools.partial(_lost, liveness, query_id)
        )
        return cls(plan, list(workers), services, config, query_id, events, liveness, retry)

    @property
    def compression(self) -> str | None:
        """The codec of the run's exchange files (see `exchange_compression`)."""
        return exchange_compression(self.config.compression, bool(self.services.local_spools))

    @property
    def metrics(self) -> QueryMetrics:
        """What the run measured so far (complete once it has ended)."""
        return self.events.metrics

    def head_session(self, settings: TaskSettings = (), stores: ObjectStores = ()) -> SessionContext:
        """The session the head stage runs in, given the settings and object stores its tasks carry."""
        return self.services.head_sessions.session(settings, stores)

    def new_attempt(self, stage: int, task: int) -> int:
        """The number of a new attempt of a task, one no attempt of it had in this run (a worker
        keeps each attempt's files apart by it); the first attempt is 0."""
        self.attempts[stage, task] = self.attempts.get((stage, task), 0) + 1
        return self.attempts[stage, task]

    @property
    def dead(self) -> set[str]:
        """Workers found lost during this query."""
        return self.retry.dead

    # -- which workers take tasks -----------------------------------------------------------
    def live_workers(self, exclude: str | None = None) -> list[str]:
        """The workers a task may be sent to now: listed, neither lost in this query nor
        draining (those found draining are reported, once per query), and not `exclude`; of
        those, the ones not quarantined by an earlier query, if any."""
        draining = self.liveness.draining.marked()
        for worker in self.workers:
            if worker in draining:
                self.note_draining(worker)
        live = [w for w in self.workers if w not in self.dead and w not in draining and w != exclude]
        # lost by an earlier query: avoided while others serve (tried when none is left)
        quarantined = self.liveness.quarantine.marked()
        return [w for w in live if w not in quarantined] or live

    def no_worker_left(self) -> QueryFailed:
        """The error of a query that has no worker left to send a task to."""
        draining = any(w in self.liveness.draining for w in self.workers)
        what = "unreachable or draining" if draining else "unreachable"
        return QueryFailed(f"every worker is {what}: {', '.join(self.workers)}")

    def note_draining(self, worker: str, stage: int | None = None, task: int | None = None) -> None:
        """`worker` drains (it refused task `task` of `stage`, or a probe said so): it gets no
        new task, from this query or any other of the coordinator; reported once per query."""
        self.liveness.draining.mark(worker)
        if worker not in self.draining_seen:
            self.draining_seen.add(worker)
            self.events.worker_draining(worker, stage, task)

    def refresh_workers(self) -> None:
        """Ask the resolver again (its answer reused up to `worker_refresh_seconds`) as a stage
        starts: workers that joined take tasks from now on, workers no longer listed get none
        (the outputs they hold are read as usual). A failing or empty answer keeps the list."""
        membership = self.services.membership
        if membership is None:
            return
        try:
            urls = membership.recent(self.config.worker_refresh_seconds)
        except Exception as exc:  # any resolver's error: the stage runs on the workers it had
            log.warning(
                "could not ask the resolver for workers (going on with %d): %s", len(self.workers), exc
            )
            return
        if urls and urls != self.workers:
            joined, left = set(urls) - set(self.workers), set(self.workers) - set(urls)
            log.info(
                "workers changed: %d joined %s, %d left %s",
                len(joined),
                sorted(joined),
                len(left),
                sorted(left),
            )
            self.workers = list(urls)

    # -- building task messages -------------------------------------------------------------
    def tasks_of(self, stage: Stage) -> tuple[TaskPlan, ...]:
        """The tasks `stage` runs as: one when a split input turned out empty."""
        spooled = [inp for inp in stage.inputs if not self.streams.streams(inp)]  # a stream is never replaced
        return (single_task(stage),) if needs_single_task(spooled, self.results) else stage.tasks

    def _location(self, producer: int) -> Callable[[int, Any], FileLocation]:
        def locate(task: int, part: Any) -> FileLocation:
            return FileLocation(
                self.placement[producer][task], producer, task, part.partition, part.path, part.bytes
            )

        return locate

    def task_inputs(self, stage: Stage, task: TaskPlan) -> tuple[TaskInput, ...]:
        """The inputs of one task of `stage`, naming where each file is now. The memory tables
        an empty input's subtree reads come last, after the inputs of the stage itself (whose
        order the task's metrics follow), each spliced in once that subtree is."""
        inputs, tables = [], []
        for index, (inp, parts) in enumerate(zip(stage.inputs, task.input_partitions, strict=True)):
            message, below = self._task_input(inp, parts, task.producers(index))
            inputs.append(message)
            tables.extend(below)
        return (*inputs, *tables)

    def _task_input(
        self, inp: StageInput, parts: Sequence[int], producers: Sequence[int] | None = None
    ) -> tuple[TaskInput, list[TaskInput]]:
        """One input of a task (its `parts` from `producers`, default all), and the inputs its
        subtree reads when it runs in the input's place. Read from files, an input carries no
        subtree (see `read_from_files`). An empty exchange carries its subtree, to run in its
        place: reading nothing where it can (see `empty_inputs`), else as planned, with each
        memory table shipped inside it read from the table's files rather than carried as rows."""
        if self.streams.streams(inp):
            tasks = (
                list(producers) if producers is not None else list(range(len(self.placement[inp.producer])))
            )
            address = self._stream_address(inp.producer)
            return streamed_input(inp, self._stream_schema(inp), parts, tasks, self.attempts, address), []
        produced = self.results[inp.producer]
        schema = exchange_schema(produced)
        if schema is not None:
            groups = input_groups(inp, parts, produced, self._location(inp.producer), producers)
            return TaskInput.of(inp.where.read_from_files(), schema, groups), []
        if inp.table is not None:  # a shipped table of no rows: its scan is small
            return TaskInput.of(inp.where, None, None), []
        if inp.where.marker not in self.no_rows:
            self.no_rows[inp.where.marker] = read_in_place_of_nothing(inp)
        if (where := self.no_rows[inp.where.marker]) is not None:
            return TaskInput.of(where, None, None), []
        subtree, below = inp.where.boundary, []
        for table in self._tables_below(inp.producer):
            assert table.table is not None  # `_tables_below` gives the inputs of shipped tables
            subtree = replace_subtree(subtree, table.table.scan, table.where.marker)
            below.extend(self._whole_table(table))
        where = replace(inp.where, boundary=subtree, boundary_child=b"")
        return TaskInput.of(where, None, None), below

    def _stream_address(self, producer: int) -> Callable[[int], str]:
        """Where each task of stage `producer` serves its streams: "" in this process, else its
        worker's data plane (WorkerUnreachable when it serves none)."""
        data_plane = self.services.data_plane
        if data_plane is None:
            return lambda task: ""
        return lambda task: data_plane(self.placement[producer][task])

    def _stream_schema(self, inp: StageInput) -> bytes:
        """The schema the leaf of the streamed input `inp` declares: the one DataFusion planned
        for the subtree it stands for (worked out once per input)."""
        if inp.where.marker not in self.stream_schemas:
            where = inp.where
            stands_for = where.boundary_child if where.runs_boundary else where.boundary
            self.stream_schemas[where.marker] = declared_schema(
                self.services.head_sessions.base(), stands_for
            )
        return self.stream_schemas[inp.where.marker]

    def _whole_table(self, table: StageInput) -> list[TaskInput]:
        """The inputs reading every partition of a shipped table."""
        message, below = self._task_input(table, range(table.partitions))
        return [message, *below]

    def _tables_below(self, producer: int) -> Iterator[StageInput]:
        """The inputs of the shipped tables stage `producer` or the stages it reads read:
        those inside the subtree that stands for its output."""
        for inp in self.plan.stage(producer).inputs:
            if inp.table is not None:
                yield inp
            else:
                yield from self._tables_below(inp.producer)


def _lost(liveness: LivenessMonitor, query_id: str, worker: str) -> None:
    """A query found `worker` lost: it stops probing it, and later queries avoid it."""
    liveness.forget(query_id, worker)
    liveness.quarantine.add(worker)
