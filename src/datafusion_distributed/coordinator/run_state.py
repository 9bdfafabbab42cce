"""The state one run of a query shares between its parts: the scheduler that places tasks, the
head stage that ends the query here, and the shipper of its memory tables.

Each part is given this state, not the run: where the tasks' outputs are (`results`,
`placement`), which workers were contacted or lost, and the run's events, retries and
cancellation. The scheduler alone decides what runs next."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from datafusion import SessionContext

from ..distributed_planner.planner import single_task
from ..events.chain import HandlerChain
from ..execution_plans.object_stores import ObjectStores
from ..execution_plans.stage import DistributedPlan, Stage, TaskPlan
from ..metrics.query_metrics import QueryMetrics
from ..protocol.messages import FileLocation, TaskInput, TaskResult
from ..runtime.session_settings import TaskSettings
from ..work_unit_feed.dispatch import FeedRun
from .cancellation import CancelScope
from .inputs import exchange_schema, input_groups, needs_single_task
from .lifecycle import QueryCollector
from .liveness import LivenessMonitor
from .retry import RetryPolicy
from .services import RunOptions, RunServices


@dataclass
class RunState:
    """One run's shared state (see the module's docstring)."""

    plan: DistributedPlan
    workers: list[str]
    services: RunServices
    options: RunOptions
    query_id: str
    events: QueryCollector  # lifecycle events and metrics
    liveness: LivenessMonitor
    retry: RetryPolicy
    cancel_scope: CancelScope = field(default_factory=CancelScope)  # cancel() from any thread
    results: dict[int, list[TaskResult]] = field(default_factory=dict)
    placement: dict[int, list[str]] = field(default_factory=dict)  # stage -> worker URL of each task
    contacted: set[str] = field(default_factory=set)  # workers chosen for a task: they hold its data
    feeds: FeedRun | None = None  # the units of the plan's feeds, from when it runs

    @classmethod
    def start(
        cls,
        plan: DistributedPlan,
        workers: Sequence[str],
        services: RunServices,
        options: RunOptions,
        handlers: HandlerChain,
    ) -> RunState:
        """The state of a new run of `plan`, with an id of its own."""
        query_id = uuid.uuid4().hex
        events = QueryCollector(query_id, handlers)
        liveness = services.liveness or LivenessMonitor(services.clients)
        retry = RetryPolicy(
            options.task_attempts, events, on_lost=functools.partial(liveness.forget, query_id)
        )
        return cls(plan, list(workers), services, options, query_id, events, liveness, retry)

    @property
    def metrics(self) -> QueryMetrics:
        """What the run measured so far (complete once it has ended)."""
        return self.events.metrics

    def head_session(self, settings: TaskSettings = (), stores: ObjectStores = ()) -> SessionContext:
        """The session the head stage runs in, given the settings and object stores its tasks carry."""
        return self.services.head_sessions.session(settings, stores)

    @property
    def dead(self) -> set[str]:
        """Workers found lost during this query."""
        return self.retry.dead

    # -- building task messages -------------------------------------------------------------
    def tasks_of(self, stage: Stage) -> tuple[TaskPlan, ...]:
        """The tasks `stage` runs as: one when a split input turned out empty."""
        return (single_task(stage),) if needs_single_task(stage.inputs, self.results) else stage.tasks

    def _location(self, producer: int) -> Callable[[int, Any], FileLocation]:
        def locate(task: int, part: Any) -> FileLocation:
            return FileLocation(
                self.placement[producer][task], producer, task, part.partition, part.path, part.bytes
            )

        return locate

    def task_inputs(self, stage: Stage, task: TaskPlan) -> tuple[TaskInput, ...]:
        """The inputs of one task of `stage`, naming where each file is now."""
        inputs = []
        for index, (inp, parts) in enumerate(zip(stage.inputs, task.input_partitions, strict=True)):
            produced = self.results[inp.producer]
            schema = exchange_schema(produced)
            where = inp.where
            if inp.table is not None and schema is not None:
                where = where.without_boundary()  # the table's data: read from its files instead
            inputs.append(
                TaskInput.of(
                    where,
                    schema=schema,
                    groups=input_groups(
                        inp, parts, produced, self._location(inp.producer), task.producers(index)
                    ),
                )
            )
        return tuple(inputs)
