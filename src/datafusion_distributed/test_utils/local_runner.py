"""Run a distributed plan's stages in this process, through Arrow IPC files, as workers would.

Every task runs the shared task code workers run (runtime/); inputs are read in place from a scratch folder.
Used by tests of the planner and as the reference for the networked runtime.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pyarrow as pa
from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from ..coordinator.gather import read_outputs
from ..coordinator.inputs import exchange_schema, input_groups, needs_single_task
from ..distributed_planner.empty_inputs import read_in_place_of_nothing
from ..distributed_planner.planner import single_task
from ..execution_plans.stage import DistributedPlan, Stage, TaskPlan
from ..runtime.inputs import ResolvedInput, local_file
from ..runtime.outputs import TaskOutput, write_task_outputs
from ..runtime.run import OutputFiles, run_task
from ..runtime.session import SessionBuilder, task_session
from ..runtime.session_settings import TaskSessions


class LocalStageRunner:
    """Runs every task of every stage sequentially in this process."""

    def __init__(
        self, session_builder: SessionBuilder | None = None, compression: str | None = "lz4"
    ) -> None:
        self._builder = session_builder
        self._compression = compression

    def _tasks(self, stage: Stage, outputs: dict[int, list[TaskOutput]]) -> tuple[TaskPlan, ...]:
        return (single_task(stage),) if needs_single_task(stage.inputs, outputs) else stage.tasks

    def _resolved(self, stage, task, outputs):
        resolved = []
        for index, (inp, parts) in enumerate(zip(stage.inputs, task.input_partitions, strict=True)):
            produced = outputs[inp.producer]
            locate = lambda t, part: local_file(part.path, part.bytes)  # noqa: E731
            groups = input_groups(inp, parts, produced, locate, task.producers(index))
            where = (read_in_place_of_nothing(inp) if groups is None else None) or inp.where
            resolved.append(ResolvedInput(where, groups, exchange_schema(produced)))
        return resolved

    def _write_stage(
        self, ctx: SessionContext, stage: Stage, outputs: dict[int, list[TaskOutput]], scratch: str
    ) -> list[TaskOutput]:
        """Run every task of `stage`, one after another, writing their outputs under `scratch`."""
        written = []
        for task in self._tasks(stage, outputs):
            folder = os.path.join(scratch, f"stage-{stage.id}", f"task-{task.index}")
            ran = run_task(
                ctx,
                task.plan,
                self._resolved(stage, task, outputs),
                write_to=OutputFiles(folder, self._compression),
            )
            assert ran.output is not None  # a task run with `write_to` writes files
            written.append(ran.output)
        return written

    def execute(self, plan: DistributedPlan) -> Iterator[pa.RecordBatch]:
        """Yield the query's result batches; scratch files are removed when done."""
        scratch = tempfile.mkdtemp(prefix="datafusion-distributed-local-")
        try:
            ctx = TaskSessions(lambda: task_session(self._builder)).session(
                plan.task_settings, plan.object_stores
            )
            outputs: dict[int, list[TaskOutput]] = {}
            for table in plan.tables:  # written once, as the coordinator ships them
                scan = ExecutionPlan.from_bytes(ctx, table.scan)
                folder = os.path.join(scratch, f"table-{table.id}")
                outputs[table.id] = [write_task_outputs(ctx, scan, folder, self._compression)]
            for stage in plan.stages[:-1]:
                outputs[stage.id] = self._write_stage(ctx, stage, outputs, scratch)
            final = plan.final
            tasks = self._tasks(final, outputs)
            if len(tasks) == 1:
                batches = run_task(ctx, tasks[0].plan, self._resolved(final, tasks[0], outputs)).batches
                assert batches is not None  # a task run without `write_to` streams
                yield from batches
            else:
                yield from read_outputs(self._write_stage(ctx, final, outputs, scratch))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def collect(self, plan: DistributedPlan) -> list[pa.RecordBatch]:
        """Run `plan` and return all of its result batches."""
        return list(self.execute(plan))
