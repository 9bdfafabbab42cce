"""Run a distributed plan on workers: stages start when their inputs are complete, independent
stages run at once, tasks spread over workers, and the final stage streams the result.

The workers are asked of the resolver again as each stage starts (`membership`): workers that
joined take its tasks, and workers found draining (`draining`) get none, without any wait: a
task one refuses goes elsewhere at once, and the outputs it holds are read as usual.

Stages are materialised, so a lost worker costs only its work: a task that fails because a
worker is unreachable, or whose worker stops answering liveness probes (`liveness`), is retried
on another worker, and outputs the lost worker held are first recomputed from their inputs
(lineage). Any other error fails the query at once. A query's spool data is released, on every
worker it sent a task to, when the query ends, fails or is abandoned.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait

import pyarrow as pa
import pyarrow.compute as pc

from ..common.threads import kept_threads
from ..distributed_planner.config import QueryPlanConfig
from ..errors import (
    WORKER_ERRORS,
    FeedFailed,
    QueryFailed,
    WorkerError,
    WorkerUnreachable,
    as_query_failure,
    said_all,
)
from ..events.chain import HandlerChain
from ..events.handlers import RoutingRequest
from ..execution_plans.stage import DistributedPlan, Stage, StageInput, TaskPlan
from ..protocol.flight import draining_worker, lost_worker
from ..protocol.messages import FeedTask, RunTask, TaskKey, TaskResult
from ..runtime import streams
from .adapting import StageAdapter
from .cancellation import POLL_SECONDS
from .empty_builds import NOT_RUN, ProbeHolds
from .feed_tasks import RunFeeds
from .head import HeadStage
from .object_store_writes import staged_write
from .release import release_query, stop_attempt
from .run_state import RunState
from .services import RunServices
from .shipping import TableShipper
from .speculation import Speculation
from .streamed_head import HeadEnd, StreamedHead
from .streaming import StreamBroken, StreamPlan, close_stage, is_echo

log = logging.getLogger("datafusion_distributed.coordinator")
# how long a failed write waits for its stopped tasks to end before deleting its staging (a
# stopped task ends at its next batch; one that does not within this is left to its worker)
WRITE_STOP_SECONDS = 10.0
# how long a task failure that only echoes another's (a stream it read broke off) waits for
# the failure that caused it, which is the one the query reports
ECHO_WAIT_SECONDS = 5.0


class QueryRun:
    """One execution of a distributed plan over a list of workers: the stage DAG, where each
    task runs, and what is retried when a worker is lost. The final stage's result comes from
    `HeadStage`; failures go through one `RetryPolicy`; `liveness` (the coordinator's monitor,
    or one of the run's own) says which workers stopped answering."""

    def __init__(
        self,
        plan: DistributedPlan,
        workers: Sequence[str],
        services: RunServices,
        config: QueryPlanConfig | None = None,
        handlers: HandlerChain | None = None,
    ) -> None:
        if not workers:
            raise ValueError("no workers to run the query on")
        self.handlers = handlers or HandlerChain()
        self.state = RunState.start(
            plan, workers, services, config or QueryPlanConfig(workers=len(workers)), self.handlers
        )
        self.tasks_run: dict[int, tuple[TaskPlan, ...]] = {}
        self.stage_seconds: dict[int, float] = {}
        final = plan.final
        final_here = plan.write is None and not plan.in_memory and final.task_count == 1
        config = self.state.config
        self.state.streams = StreamPlan.of(plan, config.exchange, self._streams_reach, final_here)
        self.head = HeadStage(self.state, recompute=self.recompute_lost_outputs)
        self.shipper = TableShipper(self.state)  # the plan's large memory tables, provided as producers
        # a file write split over the final stage's tasks: staged per attempt, committed at the end
        self.write = (
            staged_write(plan.write, self.state.query_id, plan.object_stores)
            if plan.write is not None
            else None
        )
        self._unfinished: list[Future] = []  # task calls still running when the stages stopped
        self.adapter = StageAdapter(self.state, self.handlers)  # re-plans stages as they start
        self.feeds = RunFeeds(self.state)
        self._input_holders: dict[Future, set[str]] = {}  # per attempt, the workers its inputs are on
        self.probes = ProbeHolds()  # failures of probe stages a join may never have needed
        # second attempts of stragglers, checked on every turn of `run_stages`
        self.speculation = Speculation(
            self.state, self.tasks_run, self._submit, self._worker_for, self._given_up
        )
        self.progress = threading.Condition()  # notified as stages start and finish

    def _streams_reach(self) -> bool:
        """Whether streams reach every worker of the run and this process: all in this process,
        or each serving a data plane."""
        data_plane = self.state.services.data_plane
        if self.state.services.in_process:
            return True
        if data_plane is None:
            return False
        try:
            for worker in self.state.workers:
                data_plane(worker)
        except WORKER_ERRORS as exc:
            log.info("exchanges spooled: %s", exc)
            return False
        return True

    def _worker_for(self, stage: Stage, task: int, attempt: int = 0, exclude: str | None = None) -> str:
        live = self.state.live_workers(exclude)
        if not live:
            raise self.state.no_worker_left()
        request = RoutingRequest(stage, task, attempt, tuple(live), self.state.query_id)
        worker = self.handlers.route_task(request)  # events.defaults.RoundRobinRouting unless a user answers
        self.state.contacted.add(worker)  # before the task is sent, so a cancel never misses it
        self.state.liveness.watch(self.state.query_id, worker)  # probed, and its lease renewed, from now on
        return worker

    def _given_up(self, worker: str) -> WorkerUnreachable | None:
        """Why the task calls to `worker` should no longer be waited for, if they should not: it
        was found lost in this query, or it has stopped answering liveness probes."""
        if worker in self.state.dead:
            return WorkerUnreachable(worker, "lost earlier in this query")
        return self.state.liveness.unreachable(worker) if self.state.liveness.lost(worker) else None

    def _inputs_given_up(self, attempt: Future) -> WorkerUnreachable | None:
        """Why a running attempt should no longer be waited for because a worker holding
        outputs it fetches has stopped answering, if it should: it would wait on that worker
        until its own fetch timed out. Outputs read in place (a spool shared on this host) do
        not need their worker. The task is then tried again once those outputs are recomputed."""
        if self.state.services.local_spools:
            return None
        for holder in sorted(self._input_holders.get(attempt, ())):
            if (lost := self._given_up(holder)) is not None:
                return lost
        return None

    # -- running stages ---------------------------------------------------------------------
    def _sent_plan(self, stage: Stage, task: TaskPlan) -> bytes:
        """The plan bytes an attempt of `task` is sent: a write's task writes to a new staging
        folder each attempt. Called where attempts are started, never from a task's thread."""
        if self.write is not None and stage.id == self.state.plan.final.id:
            return self.write.task_plan(task)
        return task.plan

    def _submit(self, stage: Stage, task: TaskPlan, worker: str, attempt: int) -> Future:
        """Start an attempt of `task` on `worker`, in a thread of its own."""
        plan, feeds = self._sent_plan(stage, task), self.feeds.tasks(stage, task)
        future = kept_threads.submit(self._run_task, stage, task, worker, attempt, plan, feeds)
        # where its inputs are as it starts: a recompute moves them, the attempt reads them here
        self._input_holders[future] = {
            holder for inp in stage.inputs for holder in self.state.placement.get(inp.producer, ())
        }
        return future

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
            query_id=self.state.query_id,
            stage=stage.id,
            task=task.index,
            attempt=attempt,
            plan=task.plan if plan is None else plan,
            inputs=self.state.task_inputs(stage, task),
            worker=worker,
            compression=self.state.compression,
            settings=self.state.plan.task_settings,
            object_stores=self.state.plan.object_stores,
            feeds=feeds,
            stream_output=stage.id in self.state.streams.producers,
        )
        return self.state.services.clients.get(worker).run_task(message)

    def _run_watched(self, stage: Stage, task: TaskPlan, worker: str, attempt: int) -> TaskResult:
        """`_run_task`, given up on when the query is cancelled or the worker stops answering
        (it then fails as a lost worker; a late answer of the call is never read)."""
        future = self._submit(stage, task, worker, attempt)
        while not wait([future], timeout=POLL_SECONDS).done:
            self.state.cancel_scope.check()
            if (lost := self._given_up(worker)) is not None:
                raise lost
        return future.result()

    def _start_stage(self, stage: Stage) -> dict[Future, tuple[Stage, int]]:
        self.state.refresh_workers()  # workers that joined since the query started take tasks too
        tasks = self.tasks_run[stage.id] = self.state.tasks_of(stage)
        self.state.placement[stage.id] = [self._worker_for(stage, t.index) for t in tasks]
        log.debug("stage %d: %d task(s) started", stage.id, len(tasks))
        self.state.events.stage_started(stage.id, self.state.placement[stage.id])
        with self.progress:
            self.progress.notify_all()
        placement, attempts = self.state.placement[stage.id], self.state.attempts
        # attempt 0, unless the stage runs again after a broken stream
        return {
            self._submit(stage, t, placement[t.index], attempts.get((stage.id, t.index), 0)): (stage, t.index)
            for t in tasks
        }

    def run_stages(self, stage_ids: Sequence[int], head: HeadEnd | None = None) -> None:
        """Run the stages of `stage_ids` on workers, each as soon as its producers are
        complete, as re-planned then (`adapted`); until `head`, a head stage reading their
        streams, says it ended."""
        waiting = list(stage_ids)
        running: dict[Future, tuple[Stage, int]] = {}
        partial: dict[int, list[TaskResult | None]] = {}
        started: dict[int, float] = {}
        attempts = self.state.attempts  # shared with speculation and recomputes: numbers stay unique
        echoes: list[tuple[float, Stage, int, BaseException]] = []  # failures echoing another's
        try:
            while waiting or running or echoes:
                if head is not None and head.stops(bool(waiting)):
                    return  # the head needs no more: what still runs stops with the query's release
                for stage_id in list(waiting):
                    stage = self.state.plan.stage(stage_id)
                    ready = all(self.readable(inp) for inp in stage.inputs)
                    if ready and not self.adapter.held(stage):
                        waiting.remove(stage_id)
                        adapted = self.adapter.adapted(stage)
                        if adapted is None:
                            continue  # it runs inside another stage
                        started[adapted.id] = time.perf_counter()
                        new = self._start_stage(adapted)
                        partial[adapted.id] = [None] * len(new)
                        running.update(new)
                if echoes and (not running or time.perf_counter() - echoes[0][0] > ECHO_WAIT_SECONDS):
                    _, echoed, echoed_task, echo = echoes[0]  # no failure came that caused it
                    self.state.retry.after_failure(echo, 1, f"stage {echoed.id} task {echoed_task}")
                if not running:
                    if not waiting:
                        break  # the rest were folded into the last stage
                    raise QueryFailed("stages wait on inputs that never run (a cycle in the plan?)")
                self.speculation.check(running)  # may race a straggler's call with a second attempt
                wake = head.wake() if head is not None else ()
                done, _ = wait([*running, *wake], timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
                self.state.cancel_scope.check()
                for future in done - set(wake):
                    stage, index = running.pop(future)
                    self._input_holders.pop(future, None)
                    worker = self.state.placement[stage.id][index]
                    try:
                        result = future.result()
                    except WORKER_ERRORS as exc:
                        if self.state.streams.producers and lost_worker(exc) is None and is_echo(exc):
                            echoes.append((time.perf_counter(), stage, index, exc))  # the cause follows
                            continue
                        self._check_streams(stage, exc)
                        if self._holds(stage, exc):
                            self.probes.hold(stage.id, exc)  # decided once the build side is known
                            continue
                        running[self._retry_task(stage, index, worker, exc, attempts)] = (stage, index)
                        continue
                    units = self.feeds.commit(stage, index)
                    attempt = self.speculation.attempt_of(stage.id, index, attempts.get((stage.id, index), 0))
                    partial[stage.id][index] = result = self.state.events.task_finished(
                        stage.id, index, worker, attempt, result, units
                    )
                    if all(r is not None for r in partial[stage.id]):
                        self._finish_stage(stage, partial.pop(stage.id), started[stage.id])
                self._skip_unneeded_probes(waiting, running, partial)
                for future, (stage, index) in list(running.items()):
                    worker = self.state.placement[stage.id][index]
                    watched = future.done() or self.speculation.racing(future)  # a race watches its own
                    # an answer in is read next turn
                    lost = None if watched else self._given_up(worker) or self._inputs_given_up(future)
                    if lost is not None:
                        self._check_streams(stage, lost)
                        del running[future]  # stop waiting: a late answer is never read
                        self._input_holders.pop(future, None)
                        if lost.url != worker:  # the task waits on a lost worker's outputs: stop it
                            key = TaskKey(
                                self.state.query_id, stage.id, index, attempts.get((stage.id, index), 0)
                            )
                            stop_attempt(self.state, worker, key)
                        running[self._retry_task(stage, index, worker, lost, attempts)] = (stage, index)
        finally:
            for future in running:
                future.cancel()  # not started yet: never will
            # Stopped early (cancelled, failed): `execute` releases the query at once, which
            # stops the tasks still running; their calls end then, and only a write waits for
            # them, so that no file is staged after its staging folder is deleted.
            self._unfinished.extend(running)

    def readable(self, inp: StageInput) -> bool:
        """Whether a stage may start reading its input `inp`: its producers are complete, or,
        streamed, have started."""
        if self.state.streams.streams(inp):
            return inp.producer in self.state.placement
        return inp.producer in self.state.results

    def _check_streams(self, stage: Stage, exc: BaseException) -> None:
        """Raise StreamBroken when a task of a stage that streams (or reads a stream) lost its
        worker, or was refused by a draining one: its streams cannot be resumed nor moved, only
        run again. Its own error (bad data, a UDF raising) fails the query as any task's does."""
        if stage.id not in self.state.streams.pinned or not self.state.streams.producers:
            return
        if isinstance(exc, WorkerError) and lost_worker(exc) is None and draining_worker(exc) is None:
            return
        raise StreamBroken(f"stage {stage.id} lost a worker while stages streamed: {exc}") from exc

    def _holds(self, stage: Stage, exc: BaseException) -> bool:
        """Whether the failure `exc` of a task of `stage` (its own error, not a lost or
        draining worker) waits: DataFusion may never run the stage (see `empty_builds`)."""
        return (
            lost_worker(exc) is None
            and draining_worker(exc) is None
            and self.probes.may_hold(self.state.plan, stage.id, self.state.results)
        )

    def _skip_unneeded_probes(
        self,
        waiting: list[int],
        running: dict[Future, tuple[Stage, int]],
        partial: dict[int, list[TaskResult | None]],
    ) -> None:
        """Stop running the probe stages of joins whose build side was written empty (or
        raise the held failure of one whose build side holds rows): they count as written,
        with no row, and their consumers read nothing in their place."""
        for stage_id in self.probes.settle(self.state.plan, self.state.results):
            if stage_id in waiting:
                waiting.remove(stage_id)
            for future in [f for f, (stage, _) in running.items() if stage.id == stage_id]:
                del running[future]
                self._unfinished.append(future)  # its output is released with the query
            partial.pop(stage_id, None)
            self.tasks_run[stage_id] = ()  # nothing of it to recompute
            results = self.state.results[stage_id] = [NOT_RUN] * self.state.plan.stage(stage_id).task_count
            log.info("stage %d not needed: the join reading it has an empty build side", stage_id)
            if stage_id in self.state.placement:  # started: its end is reported, with no row
                self.state.events.stage_finished(stage_id, results, 0.0, self.state.placement[stage_id])

    def _retry_task(
        self, stage: Stage, index: int, worker: str, exc: BaseException, attempts: dict[tuple[int, int], int]
    ) -> Future:
        """Try task `index` of `stage` again on another worker after `exc` ended its try on
        `worker` (lost outputs are recomputed first), or raise QueryFailed. A task a draining
        worker refused did nothing there: it goes to another worker as the same attempt,
        neither failed nor counted against `task_attempts`."""
        self.feeds.abandon(stage, index)
        if draining_worker(exc) is not None:
            attempt = attempts.get((stage.id, index), 0)
            self.state.note_draining(worker, stage.id, index)
        else:
            attempt = attempts[stage.id, index] = attempts.get((stage.id, index), 0) + 1
            self.state.events.task_failed(stage.id, index, worker, attempt - 1, exc)
            self.state.retry.after_failure(exc, attempt, f"stage {stage.id} task {index} on {worker}")
            self.state.events.task_rerun()
        self.recompute_lost_outputs()
        task = self.tasks_run[stage.id][index]
        retry = self._worker_for(stage, index, attempt)
        self.state.placement[stage.id][index] = retry
        self.state.events.task_started(stage.id, index, retry, attempt)
        return self._submit(stage, task, retry, attempt)

    def recompute_lost_outputs(self) -> None:
        """Rerun, on live workers, completed tasks whose outputs were on lost workers (lineage).

        Stages are visited producers first, so each rerun reads inputs that are already safe;
        shipped memory tables, which read nothing, come first.
        """
        self.shipper.reship_lost()
        for stage in self.state.plan.stages:
            for task in self.tasks_run.get(stage.id, ()) if stage.id in self.state.results else ():
                tries = 0
                if self.state.placement[stage.id][task.index] in self.state.dead:
                    self.state.events.task_rerun()  # once, however many tries it takes
                while self.state.placement[stage.id][task.index] in self.state.dead:
                    tries += 1
                    attempt = self.state.new_attempt(stage.id, task.index)  # numbered apart from any before
                    worker = self._worker_for(stage, task.index, attempt)
                    try:
                        self.state.results[stage.id][task.index] = self._run_watched(
                            stage, task, worker, attempt
                        )
                        self.state.placement[stage.id][task.index] = worker
                        self.feeds.commit(stage, task.index)
                        log.info("recomputed stage %d task %d on %s", stage.id, task.index, worker)
                    except WORKER_ERRORS as exc:
                        self.feeds.abandon(stage, task.index)
                        if draining_worker(exc) is not None:  # refused: another worker, not another try
                            self.state.note_draining(worker, stage.id, task.index)
                            tries -= 1
                            continue
                        what = f"recomputing stage {stage.id} task {task.index}"
                        self.state.retry.after_failure(exc, tries, what)
                        self.recompute_lost_outputs()  # an input of this task may be gone too

    def _finish_stage(self, stage: Stage, results: list, started: float) -> None:
        self.state.results[stage.id] = results
        with self.progress:
            self.progress.notify_all()
        for inp in stage.inputs:
            if self.state.streams.streams(inp):  # what it never read lets its producers end
                workers = self.state.placement.get(inp.producer, [])
                close_stage(self.state.query_id, inp.producer, self.state.services, workers)
        self.feeds.finish_stage(stage)
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
        self.state.events.stage_finished(
            stage.id, results, self.stage_seconds[stage.id], self.state.placement[stage.id]
        )

    # -- the result ---------------------------------------------------------------------------
    def execute(self, on_restart: Callable[[], None] | None = None) -> Iterator[pa.RecordBatch]:
        """Yield the query's result batches; release the query's spool data at the end.

        `on_restart`, from a caller that hands nothing out before the whole result is read,
        lets a worker lost after batches were yielded be recovered: it is called to drop the
        batches yielded so far, and the result is yielded again from its start. Without it such
        a loss raises ResultStreamLost."""
        self.state.events.query_started(len(self.state.plan.stages))
        try:
            self.feeds.start()
            yield from self.head.in_memory() if self.state.plan.in_memory else self._run(on_restart)
            self.state.events.query_finished()
        except GeneratorExit:  # the reader stopped early: the query is done
            self.state.events.query_finished()
            raise
        except BaseException as exc:
            if self.write is not None:
                self.write.abort()  # before anything else: the destination stays as it was
            failure = as_query_failure(exc)
            if (
                self.state.feeds is not None
                and self.state.feeds.failure is not None
                and isinstance(failure, QueryFailed)
            ):
                failure = FeedFailed.of_feed(self.state.feeds.failure)  # the cause, named, not its echo
            self.state.events.query_failed(failure)
            log.debug("query %s failed", self.state.query_id, exc_info=exc)  # the whole chain
            if failure is not exc:
                raise failure from (None if said_all(exc) else exc)
            if (
                isinstance(failure, QueryFailed)
                and failure.__cause__ is not None
                and said_all(failure.__cause__)
            ):
                # a task's error, relayed: its message says it all, without the frames that relayed it
                raise failure.with_traceback(None) from None
            raise
        finally:
            self.feeds.finish()
            try:
                self.head.close()
            finally:  # whatever happened, every worker that ran a task is told
                release_query(self.state, self.shipper)
                if self.write is not None:
                    # again, once the tasks the release stopped have ended: they may have staged more
                    wait(self._unfinished, timeout=WRITE_STOP_SECONDS)
                    self.write.abort()

    def _run(self, on_restart: Callable[[], None] | None) -> Iterator[pa.RecordBatch]:
        self.shipper.ship_all()
        self.state.metrics.streamed_stages = sorted(self.state.streams.producers)
        final_id = self.state.plan.final.id
        if self.state.streams.head:  # it runs here, reading streams as its producers run
            yield from StreamedHead(self, on_restart).run()
            return
        if final_id in self.state.streams.pinned:  # it reads streams: it starts with its producers
            self._run_streaming([stage.id for stage in self.state.plan.stages])
            yield from self.head.gather(on_restart)
            return
        self._run_streaming([stage.id for stage in self.state.plan.stages[:-1]])
        final = self.adapter.adapted(self.state.plan.final)
        assert final is not None  # the final stage runs inside no other
        if self.write is not None:
            yield self._written()
        elif len(self.state.tasks_of(final)) == 1:
            yield from self.head.single_task()
        else:
            self.run_stages([final.id])
            yield from self.head.gather(on_restart)

    def _run_streaming(self, stage_ids: list[int]) -> None:
        """`run_stages`; when a worker is lost while stages stream, their streams stop and the
        stages still needed run again, spooled."""
        try:
            self.run_stages(stage_ids)
        except StreamBroken as broken:
            self.run_spooled(broken, stage_ids)

    def run_spooled(self, broken: StreamBroken, stage_ids: list[int]) -> None:
        """After `broken`, stop this run's streams and forget what the streamed stages made (it
        was read by tasks that did not finish), marking the lost worker dead and recomputing
        the files it held; then run the stages of `stage_ids` still needed, and all stages from
        now on, with spooled exchanges."""
        log.warning("%s; running them again with spooled exchanges", broken)
        self.state.events.task_rerun()
        cause = broken.__cause__ if broken.__cause__ is not None else broken
        self.state.retry.after_failure(cause, 1, "a streamed run")  # the lost worker is dead now
        streams.release(self.state.query_id)  # every sink and source of the query here stops
        for stage_id in self.state.streams.producers:  # and on the workers: their readers break off
            workers = [w for w in self.state.placement.get(stage_id, []) if w not in self.state.dead]
            close_stage(self.state.query_id, stage_id, self.state.services, workers)
            self.state.results.pop(stage_id, None)
        for stage_id in self.state.streams.pinned:
            for task in self.state.plan.stage(stage_id).tasks:
                self.state.new_attempt(stage_id, task.index)  # never the numbers of the broken run
        self.state.streams = StreamPlan()
        self.state.metrics.streamed_stages = []
        self.recompute_lost_outputs()
        self.run_stages(self._still_needed(stage_ids))

    def _still_needed(self, stage_ids: list[int]) -> list[int]:
        """The stages of `stage_ids` not complete whose output some stage still needs: the
        last one, and those that an incomplete needed stage reads."""
        plan, done = self.state.plan, self.state.results
        needed: set[int] = set()
        pending = [plan.final.id]
        while pending:
            stage_id = pending.pop()
            if stage_id in needed or stage_id in done:
                continue
            needed.add(stage_id)
            pending.extend(inp.producer for inp in plan.stage(stage_id).inputs)
        return [i for i in stage_ids if i in needed]

    def _written(self) -> pa.RecordBatch:
        """Run the write stage on the workers, commit its files, and answer as DataFusion
        does: one row, the `count` of rows written (the sum of every task's count)."""
        final = self.state.plan.final
        self.run_stages([final.id])
        counts: list[pa.RecordBatch] = []
        for batch in self.head.gather(on_restart=counts.clear):  # a recomputed task counts once
            counts.append(batch)
        total = sum(pc.sum(batch.column(0)).as_py() or 0 for batch in counts)
        assert self.write is not None  # see `_run`
        self.write.commit(task.index for task in self.tasks_run[final.id])
        schema = counts[0].schema if counts else pa.schema([pa.field("count", pa.uint64())])
        return pa.record_batch([pa.array([total], schema.field(0).type)], schema=schema)
