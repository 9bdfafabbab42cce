"""The end of a query, in the coordinator: the final stage's result, streamed to the caller.

A final stage of one task runs here (its inputs fetched from the workers, or read where they
lie), so the result never makes an extra hop; a plan kept on one node runs here from
DataFusion's in-memory plan; a final stage of several tasks ran on the workers and its
outputs are gathered here in task order.

A worker lost while the result is read costs a recomputation when nothing read was handed out
yet: the final stage's inputs are all fetched before it runs here, and a gathered result is
read again from its start (ResultStreamLost when a stream had already handed batches out).
"""

from __future__ import annotations

import functools
import itertools
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, wait

import pyarrow as pa
from datafusion.plan import ExecutionPlan

from ..codec import ScannedFile
from ..common import exits
from ..common.errors import failure_message, is_failure, readable_message
from ..common.threads import kept_threads
from ..errors import (
    WORKER_ERRORS,
    QueryCancelled,
    QueryFailed,
    ResultStreamLost,
    WorkerUnreachable,
)
from ..execution_plans.object_stores import with_store_hint
from ..metrics.query_metrics import COORDINATOR
from ..metrics.recorder import TaskRecorder
from ..protocol.fetch import fetch_input, readable_in_place
from ..protocol.flight import LocalWriteError, lost_worker
from ..protocol.messages import FileLocation, Ticket
from ..runtime.inputs import ResolvedInput, resolve_inputs
from ..runtime.run import run_task
from ..runtime.streaming import stream_partitions
from ..work_unit_feed.reading import FeedToRead, LocalUnits, read_feeds
from .cancellation import POLL_SECONDS
from .gather import read_file, restore_names
from .run_state import RunState


class HeadStage:
    """Produces a query's result batches once its other stages are complete."""

    def __init__(self, run: RunState, recompute: Callable[[], None]) -> None:
        self.run = run
        self._recompute = recompute  # recomputes the outputs lost workers held (the scheduler's)
        self._scratch: str | None = None  # where fetched inputs go, made on first use
        self._scratch_exit_key: int | None = None
        self._scratch_lock = threading.Lock()

    def single_task(self) -> Iterator[pa.RecordBatch]:
        """Run a single-task final stage here, over its inputs fetched from the workers. Its
        failures (a panic inside DataFusion included) are QueryFailed naming the stage and task."""
        run = self.run
        task = run.tasks_of(run.plan.final)[0]
        run.events.stage_started(run.plan.final.id, [COORDINATOR])
        resolved, recorder = self._inputs(task)
        ctx = run.head_session(run.plan.task_settings, run.plan.object_stores)
        try:
            ran = run_task(
                ctx, task.plan, resolved, self._read_feeds(task.index), check=run.cancel_scope.check
            )
            assert ran.batches is not None  # a task run without `write_to` streams its batches
            yield from self._run_here(ran.batches, ran.plan, recorder)
        except (QueryFailed, QueryCancelled):
            raise
        except BaseException as exc:  # a panic inside DataFusion fails the query like any error
            if not is_failure(exc):
                raise
            name = f"stage {run.plan.final.id} task {task.index} on the coordinator"
            message = readable_message(with_store_hint(failure_message(exc)))
            raise QueryFailed(f"{name} failed: {message}") from exc

    def _read_feeds(self, task: int) -> list[tuple[bytes, bytes]]:
        """Read the final stage's feed scans here, asking the query's feed run for units
        directly; returns each scan's (marker, leaf) to splice into the task's plan."""
        run = self.run
        final = run.plan.final
        if not final.feeds:
            return []
        assert run.feeds is not None  # a plan with feeds runs with its feed run
        token = run.feeds.begin(final.id, task)
        feeds = [  # all the scan's partitions: the head runs a stage as its only task
            FeedToRead.of(
                scan,
                run.feeds.feed_of(scan.scan_id).reader,
                scan.partitions,
                LocalUnits(run.feeds, token, scan.scan_id),
            )
            for scan in final.feeds
        ]
        folder = tempfile.mkdtemp(prefix="feeds-", dir=self._scratch_dir())
        leaves = read_feeds(feeds, folder, run.cancel_scope.check)
        run.feeds.commit(final.id, task)
        run.metrics.feed_units[final.id] = {task: sum(leaf.units for leaf in leaves)}
        return [(leaf.marker, leaf.leaf) for leaf in leaves]

    def in_memory(self) -> Iterator[pa.RecordBatch]:
        """Run a plan of one task here, from DataFusion's in-memory plan, in the session it was
        planned in: no bytes, no worker."""
        plan = self.run.plan
        assert plan.session is not None and plan.physical is not None  # see `DistributedPlan.in_memory`
        self.run.events.stage_started(plan.final.id, [COORDINATOR])
        batches = stream_partitions(plan.session, plan.physical, check=self.run.cancel_scope.check)
        yield from self._run_here(batches, plan.physical, TaskRecorder(COORDINATOR, ()))

    def gather(self, on_restart: Callable[[], None] | None = None) -> Iterator[pa.RecordBatch]:
        """Stream a multi-task final stage's outputs from the workers that hold them (read from
        disk where they are when the workers share this machine).

        A worker lost on the way has its outputs recomputed, and the read starts again from the
        first output, if nothing read was handed out yet, or if the caller gave `on_restart`: it
        is called first, to drop what the caller received (collect() gathers the whole result
        before handing it out). Otherwise the loss raises ResultStreamLost."""
        delivered = 0
        for attempt in itertools.count(1):
            try:
                for batch in self._outputs():
                    yield batch
                    delivered += 1
                return
            except QueryFailed as exc:
                self._recover(exc, attempt, delivered, on_restart)
                delivered = 0

    def _recover(
        self, exc: QueryFailed, attempt: int, delivered: int, on_restart: Callable[[], None] | None
    ) -> None:
        """Make the result readable again after try `attempt` of reading it failed with `exc`,
        `delivered` batches in; or raise."""
        run = self.run
        lost = lost_worker(exc)
        if lost is None:
            raise exc
        if delivered and on_restart is None:
            run.retry.mark_dead(lost, exc)
            raise ResultStreamLost(lost, delivered) from exc
        run.retry.after_failure(exc, attempt, "reading the result")
        self._recompute()
        if on_restart is not None:
            on_restart()

    def _outputs(self) -> Iterator[pa.RecordBatch]:
        """The final stage's outputs, in task order, from where they are now."""
        run = self.run
        final = run.plan.final
        for task, result in enumerate(run.results[final.id]):
            if result.schema is None:
                continue
            schema = pa.ipc.read_schema(pa.py_buffer(result.schema))
            worker = run.placement[final.id][task]
            for part in result.partitions:
                if part.path is None:
                    continue
                if readable_in_place(part.path, part.bytes, run.services.local_spools):
                    batches = read_file(part.path)
                else:
                    batches = self._stream(worker, Ticket(run.query_id, final.id, task, part.partition))
                for batch in batches:
                    run.cancel_scope.check()
                    yield restore_names(batch, schema)

    def close(self) -> None:
        """Delete the inputs fetched here."""
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
        if self._scratch_exit_key is not None:
            exits.forget(self._scratch_exit_key)

    def _inputs(self, task) -> tuple[list[ResolvedInput], TaskRecorder]:
        """Fetch the final stage's inputs here, recomputing any a lost worker held."""
        run = self.run
        for attempt in range(1, run.retry.attempts + 1):
            messages = run.task_inputs(run.plan.final, task)  # where the inputs are now
            recorder = TaskRecorder(COORDINATOR, messages)
            try:
                resolved, _ = resolve_inputs(messages, functools.partial(self._read, recorder), run.query_id)
                return resolved, recorder
            except QueryFailed as exc:
                run.retry.after_failure(exc, attempt, "fetching the final stage's inputs")
                self._recompute()
        raise AssertionError("unreachable")

    def _read(self, recorder: TaskRecorder, location: FileLocation) -> tuple[ScannedFile, int]:
        """`location` fetched (see `_fetch`), measured by `recorder`."""
        return recorder.read(location, self._fetch, location)

    def _fetch(self, location: FileLocation) -> tuple[ScannedFile, int]:
        """One input file of the final stage, read in place or copied here. A fetch from a
        worker that stops answering liveness probes is given up on then (it fails as that
        worker lost, so its outputs are recomputed), not when its own deadline passes."""
        run = self.run
        fetch = kept_threads.submit(
            fetch_input,
            location,
            run.query_id,
            run.services.clients,
            self._scratch_dir,
            run.services.local_spools,
            writer="the coordinator",
        )
        self._wait_on(location.worker, fetch, f"fetching stage {location.stage} output")
        try:
            return fetch.result()
        except LocalWriteError as exc:  # this side's disk: no worker is to blame
            raise QueryFailed(str(exc)) from exc
        except WORKER_ERRORS as exc:
            raise QueryFailed(
                f"fetching stage {location.stage} output from {location.worker} failed: {exc}"
            ) from exc

    def _scratch_dir(self) -> str:
        """This query's folder for fetched inputs: most queries read theirs in place or run in
        the coordinator alone, so it is made only when a file has to be copied here. SIGTERM or
        SIGHUP deletes it too, while a cluster is alive (see `common.exits`)."""
        with self._scratch_lock:
            if self._scratch is None:
                self._scratch = tempfile.mkdtemp(prefix="datafusion-distributed-head-")
                self._scratch_exit_key = exits.at_exit_signal(
                    functools.partial(shutil.rmtree, self._scratch, ignore_errors=True)
                )
            return self._scratch

    def _run_here(
        self, batches: Iterator[pa.RecordBatch], physical: ExecutionPlan, recorder: TaskRecorder
    ) -> Iterator[pa.RecordBatch]:
        """Stream `batches`, the result of `physical` run here, then report what it measured:
        finished, also when the reader stops early (a LIMIT, or show(): metrics so far), or
        failed with the error that ends the query."""
        run = self.run
        rows = 0

        def finished() -> None:
            run.events.head_finished(run.plan.final.id, rows, recorder.finish(physical))

        try:
            for batch in batches:
                rows += batch.num_rows
                yield batch
        except GeneratorExit:
            finished()
            raise
        except BaseException as exc:
            run.events.task_failed(run.plan.final.id, 0, COORDINATOR, 0, exc)
            raise
        finished()

    def _stream(self, worker: str, ticket: Ticket) -> Iterator[pa.RecordBatch]:
        """One output of the final stage, streamed from `worker`, each batch waited for while
        the worker answers liveness probes (see `_wait_on`)."""
        end = object()
        try:
            batches = iter(self.run.services.clients.get(worker).stream(ticket))
            while True:
                pending = kept_threads.submit(next, batches, end)
                self._wait_on(worker, pending, "reading the result")
                batch = pending.result()
                if batch is end:
                    return
                yield batch
        except WORKER_ERRORS as exc:
            raise QueryFailed(f"reading the result from {worker} failed: {exc}") from exc

    def _wait_on(self, worker: str, call: Future, what: str) -> None:
        """Wait for `call`, a read from `worker`, while the query is not cancelled and the worker
        answers liveness probes: one that stops answering is given up on then, as lost (its
        outputs are recomputed), not when the read's own deadline passes. The call is left to
        end in the background; what it reads late is never used."""
        run = self.run
        while not wait([call], timeout=POLL_SECONDS).done:
            run.cancel_scope.check()
            if worker in run.dead or run.liveness.lost(worker):
                lost = WorkerUnreachable(worker, "it stopped answering liveness probes")
                raise QueryFailed(f"{what} from {worker} failed: {lost}") from lost
