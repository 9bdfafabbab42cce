"""A task's output partitions written as Arrow IPC files, every partition at once."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import FIRST_EXCEPTION, wait
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from ..common.fs import makedirs
from ..common.threads import kept_threads
from .dictionaries import DictionaryUnifier
from .inputs import unique_names
from .streaming import TaskCancelled, stream_partition
from .view_arrays import compact_views

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionOutput:
    """One output partition of a task: its file (None when it produced no rows)."""

    partition: int
    path: str | None
    rows: int
    bytes: int


@dataclass(frozen=True)
class TaskOutput:
    """Everything a task wrote. `schema` is the IPC-serialised schema of its batches (with the
    plan's column names), None when no partition produced a row."""

    partitions: tuple[PartitionOutput, ...]
    schema: bytes | None

    @property
    def rows(self) -> int:
        """The number of rows the task wrote, over all its partitions."""
        return sum(p.rows for p in self.partitions)


WRITE_BUFFER_BYTES = 1 << 20


class PlanRounds(Protocol):
    """A task's plan run in rounds (see `work_unit_feed.reading.FeedRounds`)."""

    def plan(self, index: int, check: Callable[[], None] | None = None) -> ExecutionPlan | None:
        """The plan of round `index`, or None once the rounds ended (`check` raises to stop
        waiting for it)."""

    def finished(self, index: int, partitions: int) -> None:
        """One of the `partitions` output partitions is done with round `index`."""

    @property
    def metrics(self) -> Any:
        """What the rounds' plans measured, summed (a `metrics.task_metrics.NodeMetrics`)."""


def _stream_rounds(
    ctx: SessionContext, rounds: PlanRounds, partition: int, partitions: int, check: Callable[[], None]
) -> Generator[pa.RecordBatch, None, None]:
    """Output partition `partition` of every round's plan, one round after another."""
    index = 0
    while (plan := rounds.plan(index, check)) is not None:
        batches = stream_partition(ctx, plan, partition, check)
        try:
            yield from batches
        finally:
            batches.close()
        rounds.finished(index, partitions)
        index += 1


def write_partition_file(
    batches: Iterable[pa.RecordBatch],
    partition: int,
    path: str,
    options: pa.ipc.IpcWriteOptions,
    on_write: Callable[[int], None] | None = None,
) -> tuple[PartitionOutput, pa.Schema | None]:
    """Write `batches`, output partition `partition`, to the Arrow IPC file `path` as every
    exchange file is written (unique column names, compact views, unified dictionaries); no
    file when they hold no row. `on_write(n)` is told of each batch's bytes before it is
    written and of the difference to the file's size at the end (it may raise to refuse).
    Returns the partition's output and the batches' schema (None when no row)."""
    writer = sink = None
    rows = written = 0
    schema: pa.Schema | None = None
    file_schema: pa.Schema | None = None
    renamed = False
    dictionaries = DictionaryUnifier()
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if writer is None or schema is None or file_schema is None:
                schema = batch.schema
                file_schema = unique_names(schema)
                renamed = file_schema.names != schema.names
                # Buffered: a batch is a dozen small writes (metadata, buffers, padding).
                sink = pa.output_stream(path + ".tmp", buffer_size=WRITE_BUFFER_BYTES)
                writer = pa.ipc.new_file(sink, file_schema, options=options)
            elif batch.schema != schema:
                batch = batch.cast(schema)
            batch = dictionaries.unify(compact_views(batch))
            if on_write is not None:  # charge what the batch may take before it lands on disk
                nbytes = batch.nbytes
                on_write(nbytes)
                written += nbytes
            writer.write_batch(batch.rename_columns(file_schema.names) if renamed else batch)
            rows += batch.num_rows
    finally:
        if writer is not None:
            writer.close()
        if sink is not None:
            sink.close()
    if writer is None:
        return PartitionOutput(partition, None, 0, 0), None
    os.replace(path + ".tmp", path)
    size = os.path.getsize(path)
    if on_write is not None:  # settle the charge to the file's real (compressed) size
        on_write(size - written)
    return PartitionOutput(partition, path, rows, size), schema


class _OtherPartitionFailed(RuntimeError):
    """A partition stopped because another partition of its task failed."""


def write_task_outputs(
    ctx: SessionContext,
    plan: ExecutionPlan,
    out_dir: str,
    compression: str | None = "lz4",
    path_for: Callable[[int], str] | None = None,
    cancelled: Callable[[], bool] | None = None,
    on_write: Callable[[int], None] | None = None,
    rounds: PlanRounds | None = None,
) -> TaskOutput:
    """Run every output partition of `plan` at once and write each to an Arrow IPC file;
    with `rounds`, every round's plan (`plan` is the first), a partition's rounds one after
    another into its one file.

    `cancelled` is asked before each batch and, while DataFusion works on one, every
    `POLL_SECONDS` (True stops the task with TaskCancelled, within a second); `on_write(n)` is
    told of `n` more bytes about to be written (it may raise to refuse them), and finally of
    the difference to the file's real size. A partition that fails stops the others: the task
    raises its error."""
    makedirs(out_dir)
    # deltas: a dictionary column's dictionary grows from batch to batch (see `dictionaries`)
    options = pa.ipc.IpcWriteOptions(compression=compression, emit_dictionary_deltas=True)
    path_for = path_for or (lambda p: os.path.join(out_dir, f"part-{p}.arrow"))
    count = plan.partition_count
    if count == 0:
        return TaskOutput((), None)
    failed = threading.Event()

    def check() -> None:
        if cancelled is not None and cancelled():
            raise TaskCancelled("the query was cancelled")
        if failed.is_set():
            raise _OtherPartitionFailed("another partition of the task failed")

    def write(partition: int) -> tuple[PartitionOutput, pa.Schema | None]:
        try:
            if rounds is None:
                batches = stream_partition(ctx, plan, partition, check)
            else:
                batches = _stream_rounds(ctx, rounds, partition, count, check)
            try:
                return write_partition_file(batches, partition, path_for(partition), options, on_write)
            finally:
                batches.close()  # aborts the partition's work when it stopped early
        except BaseException:
            failed.set()
            raise

    # Every partition at once (they may wait on each other); the last one on this thread.
    futures = [kept_threads.submit(write, p) for p in range(count - 1)]
    last: tuple[PartitionOutput, pa.Schema | None] | None = None
    error: BaseException | None = None
    try:
        last = write(count - 1)
    except BaseException as exc:
        error = exc
    wait(futures)  # even when one fails: no partition may still be writing once the task ends
    errors = [e for e in (error, *(f.exception() for f in futures)) if e is not None]
    if errors:  # the error that stopped the task, not the partitions it stopped
        raise next((e for e in errors if not isinstance(e, _OtherPartitionFailed)), errors[0])
    assert last is not None  # the last partition raised, or wrote
    results = [f.result() for f in futures] + [last]
    schema = next((s for _, s in results if s is not None), None)
    return TaskOutput(
        tuple(out for out, _ in results), schema.serialize().to_pybytes() if schema is not None else None
    )


def stream_task_outputs(
    ctx: SessionContext, plan: ExecutionPlan, cancelled: Callable[[], bool] | None = None
) -> TaskOutput:
    """Run every partition of the sink plan `plan` at once and wait for each to say what it
    sent. A partition that fails stops the task with its error; `cancelled` is asked every
    `STREAM_POLL_SECONDS` meanwhile (True raises TaskCancelled; releasing the query stops the sink)."""
    count = plan.partition_count

    def run(partition: int) -> PartitionOutput:
        rows = nbytes = 0
        for batch in ctx.execute(plan, partition):  # one row: what the partition sent
            sent = batch.to_pyarrow()
            rows += sum(sent.column("rows").to_pylist())
            nbytes += sum(sent.column("bytes").to_pylist())
        return PartitionOutput(partition, None, rows, nbytes)

    futures = [kept_threads.submit(run, p) for p in range(count)]
    pending = set(futures)
    while pending:  # partitions left waiting after a failure are stopped by the query's release
        done, pending = wait(pending, timeout=STREAM_POLL_SECONDS, return_when=FIRST_EXCEPTION)
        if (error := next((f.exception() for f in done if f.exception() is not None), None)) is not None:
            raise error
        if cancelled is not None and cancelled():
            raise TaskCancelled("the query was cancelled")
    return TaskOutput(tuple(f.result() for f in futures), STREAMED_SCHEMA)


STREAM_POLL_SECONDS = 0.2
# What a streamed task answers as its outputs' schema: its consumers never read it (they
# declared theirs), but it says the exchange is not known to be empty.
STREAMED_SCHEMA = pa.schema([]).serialize().to_pybytes()
