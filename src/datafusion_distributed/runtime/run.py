"""Running one task, wherever it runs: a worker, the coordinator's head stage, or the local
runner of the tests. Each caller resolves the task's inputs its own way (fetched, read in
place, or written by the runner itself); from there every task takes the same path: its plan
is built from its bytes with the inputs and feed scans spliced in, then its output partitions
are written to files or streamed."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from .inputs import ResolvedInput
from .outputs import PlanRounds, TaskOutput, stream_task_outputs, write_task_outputs
from .streaming import stream_partitions
from .streams import Attempt
from .task_plan import prepare_task_plan

Leaves = Sequence[tuple[bytes, bytes]]  # (marker, plan bytes) of the feed scans a task read


@dataclass(frozen=True)
class OutputFiles:
    """Where and how a task writes its output partitions (see `write_task_outputs`)."""

    folder: str
    compression: str | None = "lz4"
    path_for: Callable[[int], str] | None = None
    cancelled: Callable[[], bool] | None = None
    on_write: Callable[[int], None] | None = None


@dataclass(frozen=True)
class RanTask:
    """A task run by `run_task`: the plan it ran (the first round's, with rounds), and either
    the files it wrote or its batches, streamed as they are read."""

    plan: ExecutionPlan
    output: TaskOutput | None = None
    batches: Iterator[pa.RecordBatch] | None = None
    rounds: PlanRounds | None = None


def run_task(
    ctx: SessionContext,
    plan: bytes,
    inputs: Sequence[ResolvedInput],
    leaves: Leaves = (),
    *,
    rewrite: Callable[[ExecutionPlan], ExecutionPlan] | None = None,
    rounds: Callable[[Callable[[bytes, bytes], ExecutionPlan]], PlanRounds] | None = None,
    write_to: OutputFiles | None = None,
    check: Callable[[], None] | None = None,
    stream_to: Attempt | None = None,
) -> RanTask:
    """Run the task whose plan bytes are `plan`, in `ctx`, over `inputs` and the feed scans
    `leaves`.

    `rewrite` may replace the built plan (the plan-rewrite handlers of a worker). `rounds`,
    given the function that builds a round's plan from its feed scan's (marker, leaf), makes
    the task's rounds (a feed read in rounds; `leaves` are then unused). With `write_to` the output partitions are
    written to files now; otherwise they are streamed as the returned batches are read, `check`
    asked before each batch. With `stream_to` too (no rounds), they stream to the data plane's
    channels of that attempt instead of files (see `streams`)."""

    def build(spliced: Leaves) -> ExecutionPlan:
        built = prepare_task_plan(ctx, plan, list(inputs), spliced, stream_to)
        return rewrite(built) if rewrite is not None else built

    planned_rounds = rounds(lambda marker, leaf: build([(marker, leaf)])) if rounds is not None else None
    physical = planned_rounds.plan(0) if planned_rounds is not None else build(leaves)
    assert physical is not None  # a task has at least one round
    if write_to is None:
        return RanTask(physical, batches=stream_partitions(ctx, physical, check=check))
    if stream_to is not None:
        assert planned_rounds is None  # a stage whose feed is read in rounds writes files
        return RanTask(physical, output=stream_task_outputs(ctx, physical, write_to.cancelled))
    output = write_task_outputs(
        ctx,
        physical,
        write_to.folder,
        write_to.compression,
        path_for=write_to.path_for,
        cancelled=write_to.cancelled,
        on_write=write_to.on_write,
        rounds=planned_rounds,
    )
    return RanTask(physical, output=output, rounds=planned_rounds)
