"""Run a distributed plan on workers: stages start when their inputs are complete, independent
stages run at once, tasks spread over workers, and the final stage streams the result.

Stages are materialised, so a lost worker costs only its work: a task that fails because a
worker is unreachable, or whose worker stops answering liveness probes (`liveness`), is retried
on another worker, and outputs the lost worker held are first recomputed from their inputs
(lineage). Any other error fails the query at once. A query's spool data is released, on every
worker it sent a task to, when the query ends, fails or is abandoned.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

import cloudpickle
import pyarrow as pa
import pyarrow.compute as pc
from datafusion import SessionContext

from ..common.threads import kept_threads, map_concurrently
from ..distributed_planner.planner import single_task
from ..events.chain import HandlerChain
from ..events.handlers import RoutingRequest
from ..execution_plans.object_stores import ObjectStores
from ..execution_plans.stage import DistributedPlan, Stage, TaskPlan
from ..protocol.flight import ClientPool, WorkerUnreachable
from ..protocol.messages import FeedTask, FileLocation, RunTask, TaskInput, TaskResult
from ..runtime.session import task_session
from ..runtime.session_settings import TaskSessions, TaskSettings
from ..work_unit_feed.dispatch import FeedRun
from ..work_unit_feed.reading import scan_fields
from ..work_unit_feed.service import FeedService
from .cancellation import POLL_SECONDS, CancelScope
from .errors import FeedFailed, QueryFailed, as_query_failure
from .head import WORKER_ERRORS, HeadStage
from .inputs import exchange_schema, input_groups, needs_single_task
from .lifecycle import QueryCollector
from .liveness import LivenessMonitor
from .object_store_writes import staged_write
from .retry import RetryPolicy
from .shipping import TableShipper

log = logging.getLogger("datafusion_distributed.coordinator")
# how long a failed write waits for its stopped tasks to end before deleting its staging (a
# stopped task ends at its next batch; one that does not within this is left to its worker)
WRITE_STOP_SECONDS = 10.0


class QueryRun:
    """One execution of a distributed plan over a list of workers: the stage DAG, where each
    task runs, and what is retried when a worker is lost. The final stage's result comes from
    `HeadStage`; failures go through one `RetryPolicy`; `liveness` (the coordinator's monitor,
    or one of the run's own) says which workers stopped answering."""

    def __init__(
        self,
        plan: DistributedPlan,
        workers: Sequence[str],
        clients: ClientPool,
        compression: str | None = "lz4",
        head_session: Callable[[TaskSettings, ObjectStores], SessionContext] | None = None,
        task_attempts: int = 3,
        handlers: HandlerChain | None = None,
        local_spools: Sequence[str] = (),
        liveness: LivenessMonitor | None = None,
        feeds: FeedService | None = None,
    ):
        if not workers:
            raise ValueError("no workers to run the query on")
        self.plan = plan
        self.workers = list(workers)
        self.clients = clients
        self.compression = compression
        # the session the head stage runs in, given the settings and object stores its tasks carry
        self.head_session = head_session or TaskSessions(task_session).session
        self.local_spools = tuple(local_spools)  # workers' spools this process reads in place
        self.contacted: set[str] = set()  # workers chosen for a task: the ones holding its data
        self.tasks_run: dict[int, tuple[TaskPlan, ...]] = {}
        self.query_id = uuid.uuid4().hex
        self.results: dict[int, list[TaskResult]] = {}
        self.placement: dict[int, list[str]] = {}  # stage -> worker URL of each task
        self.stage_seconds: dict[int, float] = {}
        self.cancel_scope = CancelScope()  # cancel() from any thread; a timeout via start()
        self.handlers = handlers or HandlerChain()
        self.events = QueryCollector(self.query_id, self.handlers)  # lifecycle events and metrics
        self.metrics = self.events.metrics
        self.liveness = liveness or LivenessMonitor(clients)
        self.retry = RetryPolicy(
            task_attempts, self.events, on_lost=functools.partial(self.liveness.forget, self.query_id)
        )
        self.head = HeadStage(self)
        self.shipper = TableShipper(self)  # the plan's large memory tables, provided as producers
        # a file write split over the final stage's tasks: staged per attempt, committed at the end
        self.write = (
            staged_write(plan.write, self.query_id, plan.object_stores) if plan.write is not None else None
        )
        self._unfinished: list[Future] = []  # task calls still running when the stages stopped
        self.feed_service = feeds
        self.feeds: FeedRun | None = None  # the units of the plan's feeds, from when it runs
        self._readers: dict[str, bytes] = {}  # each feed's reader, pickled once for its tasks

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
        for inp, parts in zip(stage.inputs, task.input_partitions, strict=True):
            produced = self.results[inp.producer]
            schema = exchange_schema(produced)
            where = inp.where
            if inp.table is not None and schema is not None:
                where = where.without_boundary()  # the table's data: read from its files instead
            inputs.append(
                TaskInput.of(
                    where,
                    schema=schema,
                    groups=input_groups(inp, parts, produced, self._location(inp.producer)),
                )
            )
        return tuple(inputs)

    def _worker_for(self, stage: Stage, task: int, attempt: int = 0) -> str:
        live = [w for w in self.workers if w not in self.dead]
        if not live:
            raise QueryFailed(f"every worker is unreachable: {', '.join(self.workers)}")
        request = RoutingRequest(stage, task, attempt, tuple(live), self.query_id)
        worker = self.handlers.route_task(request)  # events.defaults.RoundRobinRouting unless a user answers
        self.contacted.add(worker)  # before the task is sent, so a cancel never misses it
        self.liveness.watch(self.query_id, worker)  # probed, and its lease renewed, from now on
        return worker

    def _given_up(self, worker: str) -> WorkerUnreachable | None:
        """Why the task calls to `worker` should no longer be waited for, if they should not: it
        was found lost in this query, or it has stopped answering liveness probes."""
        if worker in self.dead:
            return WorkerUnreachable(worker, "lost earlier in this query")
        return self.liveness.unreachable(worker) if self.liveness.lost(worker) else None

    # -- running stages ---------------------------------------------------------------------
    def _sent_plan(self, stage: Stage, task: TaskPlan) -> bytes:
        """The plan bytes an attempt of `task` is sent: a write's task writes to a new staging
        folder each attempt. Called where attempts are started, never from a task's thread."""
        if self.write is not None and stage is self.plan.final:
            return self.write.task_plan(task)
        return task.plan

    def _feed_tasks(self, stage: Stage, task: TaskPlan) -> tuple[FeedTask, ...]:
        """The feed scans of a new attempt of `task`, asking for units with a token of its own.
        Called where attempts are started, never from a task's thread."""
        if not stage.feeds:
            return ()
        token = self.feeds.begin(stage.id, task.index)
        url = self.feed_service.url
        count = len(self.tasks_of(stage))
        tasks = []
        for scan in stage.feeds:
            feed = self.feeds.feed_of(scan.scan_id)
            if feed.id not in self._readers:
                try:
                    self._readers[feed.id] = cloudpickle.dumps(feed.reader)
                except Exception as exc:  # pickling raises anything its objects raise
                    raise QueryFailed(
                        f"the reader of feed {feed.name!r} cannot be pickled to travel to the workers: {exc}"
                    ) from exc
            reader = self._readers[feed.id]
            partitions = scan.task_partitions(task.index, count)
            tasks.append(
                FeedTask(
                    url=url,
                    token=token,
                    reader=reader,
                    partitions=partitions,
                    rounds=scan.rounds,
                    connect_timeout=self.clients.settings.timeout,
                    **scan_fields(scan),
                )
            )
        return tuple(tasks)

    def _submit(self, stage: Stage, task: TaskPlan, worker: str, attempt: int) -> Future:
        """Start an attempt of `task` on `worker`, in a thread of its own."""
        plan, feeds = self._sent_plan(stage, task), self._feed_tasks(stage, task)
        return kept_threads.submit(self._run_task, stage, task, worker, attempt, plan, feeds)

    def _run_task(
        self,
        stage: Stage,
        task: TaskPlan,
        worker: str,
        attempt: int = 0,
        plan: bytes | None = None,
        feeds: tuple[FeedTask, ...] = (),
    ) -> TaskResult:
        message = RunTask(
            query_id=self.query_id,
            stage=stage.id,
            task=task.index,
            attempt=attempt,
            plan=task.plan if plan is None else plan,
            inputs=self.task_inputs(stage, task),
            worker=worker,
            compression=self.compression,
            settings=self.plan.task_settings,
            object_stores=self.plan.object_stores,
            feeds=feeds,
        )
        return self.clients.get(worker).run_task(message)

    def _run_watched(self, stage: Stage, task: TaskPlan, worker: str, attempt: int) -> TaskResult:
        """`_run_task`, given up on when the query is cancelled or the worker stops answering
        (it then fails as a lost worker; a late answer of the call is never read)."""
        future = self._submit(stage, task, worker, attempt)
        while not wait([future], timeout=POLL_SECONDS).done:
            self.cancel_scope.check()
            if (lost := self._given_up(worker)) is not None:
                raise lost
        return future.result()

    def _start_stage(self, stage: Stage) -> dict[Future, tuple[Stage, int]]:
        tasks = self.tasks_run[stage.id] = self.tasks_of(stage)
        self.placement[stage.id] = [self._worker_for(stage, t.index) for t in tasks]
        log.debug("stage %d: %d task(s) started", stage.id, len(tasks))
        self.events.stage_started(stage.id, self.placement[stage.id])
        return {self._submit(stage, t, self.placement[stage.id][t.index], 0): (stage, t.index) for t in tasks}

    def run_stages(self, stages: Sequence[Stage]) -> None:
        """Run `stages` on workers, each as soon as its producers are complete."""
        waiting = {stage.id: stage for stage in stages}
        running: dict[Future, tuple[Stage, int]] = {}
        partial: dict[int, list[TaskResult | None]] = {}
        started: dict[int, float] = {}
        attempts: dict[tuple[int, int], int] = {}
        try:
            while waiting or running:
                for stage in list(waiting.values()):
                    if all(inp.producer in self.results for inp in stage.inputs):
                        del waiting[stage.id]
                        started[stage.id] = time.perf_counter()
                        new = self._start_stage(stage)
                        partial[stage.id] = [None] * len(new)
                        running.update(new)
                if not running:
                    raise QueryFailed("stages wait on inputs that never run (a cycle in the plan?)")
                done, _ = wait(running, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
                self.cancel_scope.check()
                for future in done:
                    stage, index = running.pop(future)
                    worker = self.placement[stage.id][index]
                    try:
                        result = future.result()
                    except WORKER_ERRORS as exc:
                        running[self._retry_task(stage, index, worker, exc, attempts)] = (stage, index)
                        continue
                    units = 0
                    if stage.feeds:
                        self.feeds.commit(stage.id, index)  # its units are its own from now on
                        units = self.feeds.units_per_task(stage.id).get(index, 0)
                    partial[stage.id][index] = result = self.events.task_finished(
                        stage.id, index, worker, attempts.get((stage.id, index), 0), result, units
                    )
                    if all(r is not None for r in partial[stage.id]):
                        self._finish_stage(stage, partial.pop(stage.id), started[stage.id])
                for future, (stage, index) in list(running.items()):
                    worker = self.placement[stage.id][index]
                    lost = None if future.done() else self._given_up(worker)  # an answer in is read next turn
                    if lost is not None:
                        del running[future]  # stop waiting: a late answer is never read
                        running[self._retry_task(stage, index, worker, lost, attempts)] = (stage, index)
        finally:
            for future in running:
                future.cancel()  # not started yet: never will
            # Stopped early (cancelled, failed): `execute` releases the query at once, which
            # stops the tasks still running; their calls end then, and only a write waits for
            # them, so that no file is staged after its staging folder is deleted.
            self._unfinished.extend(running)

    def _retry_task(
        self, stage: Stage, index: int, worker: str, exc: BaseException, attempts: dict[tuple[int, int], int]
    ) -> Future:
        """Try task `index` of `stage` again on another worker after `exc` ended its try on
        `worker` (lost outputs are recomputed first), or raise QueryFailed."""
        attempt = attempts[stage.id, index] = attempts.get((stage.id, index), 0) + 1
        if stage.feeds:
            self.feeds.abandon(stage.id, index)  # its units go back, for the others or its next try
        self.events.task_failed(stage.id, index, worker, attempt - 1, exc)
        self.retry.after_failure(exc, attempt, f"stage {stage.id} task {index} on {worker}")
        self.recompute_lost_outputs()
        task = self.tasks_run[stage.id][index]
        retry = self._worker_for(stage, index, attempt)
        self.placement[stage.id][index] = retry
        self.events.task_started(stage.id, index, retry, attempt)
        return self._submit(stage, task, retry, attempt)

    def recompute_lost_outputs(self) -> None:
        """Rerun, on live workers, completed tasks whose outputs were on lost workers (lineage).

        Stages are visited producers first, so each rerun reads inputs that are already safe;
        shipped memory tables, which read nothing, come first.
        """
        self.shipper.reship_lost()
        for stage in self.plan.stages:
            for task in self.tasks_run.get(stage.id, ()) if stage.id in self.results else ():
                attempt = 0
                while self.placement[stage.id][task.index] in self.dead:
                    attempt += 1
                    worker = self._worker_for(stage, task.index, attempt)
                    try:
                        self.results[stage.id][task.index] = self._run_watched(stage, task, worker, attempt)
                        self.placement[stage.id][task.index] = worker
                        if stage.feeds:
                            self.feeds.commit(stage.id, task.index)
                        log.info("recomputed stage %d task %d on %s", stage.id, task.index, worker)
                    except WORKER_ERRORS as exc:
                        if stage.feeds:
                            self.feeds.abandon(stage.id, task.index)
                        what = f"recomputing stage {stage.id} task {task.index}"
                        self.retry.after_failure(exc, attempt, what)
                        self.recompute_lost_outputs()  # an input of this task may be gone too

    def _finish_stage(self, stage: Stage, results: list, started: float) -> None:
        self.results[stage.id] = results
        if stage.feeds:
            self.metrics.feed_units[stage.id] = self.feeds.units_per_task(stage.id)
        self.stage_seconds[stage.id] = time.perf_counter() - started
        rows = sum(p.rows for r in results for p in r.partitions)
        written = sum(p.bytes for r in results for p in r.partitions)
        log.info(
            "stage %d: %d task(s) done in %.3fs, %d rows, %d bytes written",
            stage.id,
            len(results),
            self.stage_seconds[stage.id],
            rows,
            written,
        )
        self.events.stage_finished(stage.id, results, self.stage_seconds[stage.id], self.placement[stage.id])

    # -- the result ---------------------------------------------------------------------------
    def execute(self, on_restart: Callable[[], None] | None = None) -> Iterator[pa.RecordBatch]:
        """Yield the query's result batches; release the query's spool data at the end.

        `on_restart`, from a caller that hands nothing out before the whole result is read,
        lets a worker lost after batches were yielded be recovered: it is called to drop the
        batches yielded so far, and the result is yielded again from its start. Without it such
        a loss raises ResultStreamLost."""
        self.events.query_started(len(self.plan.stages))
        try:
            self._start_feeds()
            yield from self.head.in_memory() if self.plan.in_memory else self._run(on_restart)
            self.events.query_finished()
        except GeneratorExit:  # the reader stopped early: the query is done
            self.events.query_finished()
            raise
        except BaseException as exc:
            if self.write is not None:
                self.write.abort()  # before anything else: the destination stays as it was
            failure = as_query_failure(exc)
            if self.feeds is not None and self.feeds.failure is not None and isinstance(failure, QueryFailed):
                failure = FeedFailed.of_feed(self.feeds.failure)  # the cause, named, not its echo
            self.events.query_failed(failure)
            if failure is exc:
                raise
            raise failure from exc
        finally:
            if self.feeds is not None:
                self.feed_service.finish(self.feeds)  # stops the providers
            try:
                self.head.close()
            finally:  # whatever happened, every worker that ran a task is told
                self.release()
                if self.write is not None:
                    # again, once the tasks the release stopped have ended: they may have staged more
                    wait(self._unfinished, timeout=WRITE_STOP_SECONDS)
                    self.write.abort()

    def _start_feeds(self) -> None:
        """Get the units of the plan's feeds ready to hand out (their providers start as the
        first task asks), served to workers when tasks run there."""
        if not self.plan.feeds:
            return
        if self.feed_service is None:
            raise QueryFailed("the plan reads a work-unit feed, but the run was given no feed service")
        if self.plan.is_distributed and _feed_would_leak_token(self.feed_service.host, self.workers):
            raise QueryFailed(
                "the plan reads a work-unit feed, and the workers are reached over TLS, but the "
                f"coordinator's feed service serves plain gRPC on {self.feed_service.host}: workers would "
                "send it the cluster's token unencrypted. Run the workers where they reach the "
                "coordinator on loopback (feed_host 127.0.0.1), or read the data as a table"
            )
        try:
            self.feeds = self.feed_service.start(
                self.query_id, self.plan.feeds, serve=self.plan.is_distributed
            )
        except LookupError as exc:
            raise QueryFailed(str(exc)) from exc

    def _run(self, on_restart: Callable[[], None] | None) -> Iterator[pa.RecordBatch]:
        self.shipper.ship_all()
        self.run_stages(self.plan.stages[:-1])
        if self.write is not None:
            yield self._written()
        elif len(self.tasks_of(self.plan.final)) == 1:
            yield from self.head.single_task()
        else:
            self.run_stages([self.plan.final])
            yield from self.head.gather(on_restart)

    def _written(self) -> pa.RecordBatch:
        """Run the write stage on the workers, commit its files, and answer as DataFusion
        does: one row, the `count` of rows written (the sum of every task's count)."""
        final = self.plan.final
        self.run_stages([final])
        counts: list[pa.RecordBatch] = []
        for batch in self.head.gather(on_restart=counts.clear):  # a recomputed task counts once
            counts.append(batch)
        total = sum(pc.sum(batch.column(0)).as_py() or 0 for batch in counts)
        self.write.commit(task.index for task in self.tasks_run[final.id])
        schema = counts[0].schema if counts else pa.schema([pa.field("count", pa.uint64())])
        return pa.record_batch([pa.array([total], schema.field(0).type)], schema=schema)

    def release(self) -> None:
        """Delete this query's data on the workers it ran tasks on, all at once. A query run
        wholly in the coordinator calls no worker. Lost workers are sent it too, in the
        background (one may have come back), without waiting; their TTL sweep is the backstop.

        Sent as `cancel`, which also stops any task of the query still running (after an error,
        a cancellation or an early close) and refuses late ones."""
        self.liveness.forget(self.query_id)
        self.shipper.discard()
        for url in sorted(self.contacted & self.dead):
            kept_threads.submit(self._cancel_on, url)  # bounded by connect_timeout; errors ignored
        live = sorted(self.contacted - self.dead)
        for url, error in zip(live, map_concurrently(self._cancel_on, live, len(live)), strict=True):
            if error is not None:
                log.warning("could not release query %s on %s: %s", self.query_id, url, error)

    def _cancel_on(self, url: str) -> Exception | None:
        try:
            self.clients.get(url).cancel(self.query_id)
        except WORKER_ERRORS as exc:
            return exc
        return None


def _feed_would_leak_token(feed_host: str, workers: Sequence[str]) -> bool:
    """Whether workers reached over TLS would ask a feed service that is not on loopback (it
    serves plain gRPC, and every call carries the cluster's token)."""
    if not any(url.startswith("grpc+tls://") for url in workers):
        return False
    try:
        return not ipaddress.ip_address(feed_host).is_loopback
    except ValueError:  # a host name
        return feed_host != "localhost"
