"""The end of a query, in the coordinator: the final stage's result, streamed to the caller.

A final stage of one task runs here (its inputs fetched from the workers, or read where they
lie), so the result never makes an extra hop; a plan kept on one node runs here from
DataFusion's in-memory plan; a final stage of several tasks ran on the workers and its
outputs are gathered here in task order.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from ..codec import ScannedFile
from ..common import exits
from ..execution_plans.task import ResolvedInput, prepare_task_plan, resolve_inputs, stream_partitions
from ..metrics.query_metrics import COORDINATOR
from ..metrics.recorder import TaskRecorder
from ..protocol.fetch import fetch_input, readable_in_place
from ..protocol.flight import WorkerError, WorkerTimeout, WorkerUnreachable
from ..protocol.messages import FileLocation, Ticket
from .errors import QueryFailed
from .gather import read_file, restore_names

if TYPE_CHECKING:
    from .scheduler import QueryRun

WORKER_ERRORS = (WorkerError, WorkerUnreachable, WorkerTimeout)


class HeadStage:
    """Produces a query's result batches once its other stages are complete."""

    def __init__(self, run: QueryRun):
        self.run = run
        self._scratch: str | None = None  # where fetched inputs go, made on first use
        self._scratch_exit_key: int | None = None
        self._scratch_lock = threading.Lock()

    def single_task(self) -> Iterator[pa.RecordBatch]:
        """Run a single-task final stage here, over its inputs fetched from the workers."""
        run = self.run
        task = run.tasks_of(run.plan.final)[0]
        run.events.stage_started(run.plan.final.id, [COORDINATOR])
        resolved, recorder = self._inputs(task)
        ctx = run.head_session()
        yield from self._run_here(ctx, prepare_task_plan(ctx, task.plan, resolved), recorder)

    def in_memory(self) -> Iterator[pa.RecordBatch]:
        """Run a plan of one task here, from DataFusion's in-memory plan, in the session it was
        planned in: no bytes, no worker."""
        plan = self.run.plan
        self.run.events.stage_started(plan.final.id, [COORDINATOR])
        yield from self._run_here(plan.session, plan.physical, TaskRecorder(COORDINATOR, ()))

    def gather(self) -> Iterator[pa.RecordBatch]:
        """Stream a multi-task final stage's outputs from the workers that hold them (read from
        disk where they are when the workers share this machine)."""
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
                if readable_in_place(part.path, part.bytes, run.local_spools):
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
                resolved, _ = resolve_inputs(
                    messages, lambda loc, recorder=recorder: recorder.read(loc, self._fetch, loc)
                )
                return resolved, recorder
            except QueryFailed as exc:
                run.retry.after_failure(exc, attempt, "fetching the final stage's inputs")
                run.recompute_lost_outputs()
        raise AssertionError("unreachable")

    def _fetch(self, location: FileLocation) -> tuple[ScannedFile, int]:
        run = self.run
        try:
            return fetch_input(location, run.query_id, run.clients, self._scratch_dir, run.local_spools)
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
        self, ctx: SessionContext, physical: ExecutionPlan, recorder: TaskRecorder
    ) -> Iterator[pa.RecordBatch]:
        run = self.run
        rows = 0
        try:
            for batch in stream_partitions(ctx, physical, check=run.cancel_scope.check):
                rows += batch.num_rows
                yield batch
        finally:  # also when the reader stops early (a LIMIT, or show()): metrics so far
            run.events.head_finished(run.plan.final.id, rows, recorder.finish(physical))

    def _stream(self, worker: str, ticket: Ticket) -> Iterator[pa.RecordBatch]:
        try:
            yield from self.run.clients.get(worker).stream(ticket)
        except WORKER_ERRORS as exc:
            raise QueryFailed(f"reading the result from {worker} failed: {exc}") from exc
