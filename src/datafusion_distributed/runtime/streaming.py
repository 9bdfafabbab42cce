"""A plan's output partitions as streams of batches, stopped within a second when their check raises."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Generator

import pyarrow as pa
from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from ..common.threads import kept_threads
from .interruption import INTERRUPTED, POLL_SECONDS, next_batch, watchdog

log = logging.getLogger(__name__)


class TaskCancelled(RuntimeError):
    """A task stopped because its query was cancelled."""


def stream_partition(
    ctx: SessionContext,
    plan: ExecutionPlan,
    partition: int,
    check: Callable[[], None] | None = None,
) -> Generator[pa.RecordBatch, None, None]:
    """The batches of one output partition of `plan`, run in `ctx`, as they are produced.

    `check` is called before every batch and, while DataFusion works on the next one, every
    `POLL_SECONDS` from another thread; when it raises, the wait is abandoned (within a second:
    DataFusion runs Python code in a waiting thread once a second), the partition's work is
    aborted (see the module's docstring) and the check's exception propagates. Closing the
    iterator aborts the work too."""
    stream = ctx.execute(plan, partition)
    # The binding's own stream: an exception's traceback then holds no frame of the wrapper's
    # `__next__`, which would keep the stream, and its work, alive as long as the exception.
    held = [getattr(stream, "rbs", stream)]
    del stream
    waiting = None if check is None else watchdog.watch(check)
    try:
        while True:
            if check is not None:
                check()
            batch = next_batch(held, waiting)
            if batch is INTERRUPTED and check is not None:  # only a watched wait is interrupted
                check()  # raises the reason, as the watchdog saw it
                raise TaskCancelled("the task was stopped")
            if batch is None:
                return
            yield batch.to_pyarrow()
    finally:
        held.clear()  # drops the stream, which aborts DataFusion's work for this partition
        if waiting is not None:
            watchdog.forget(waiting)


_DONE = object()


def stream_partitions(
    ctx: SessionContext,
    plan: ExecutionPlan,
    buffered: int = 4,
    *,
    check: Callable[[], None] | None = None,
) -> Generator[pa.RecordBatch, None, None]:
    """Stream every partition of `plan` at once, as DataFusion itself does.

    Partitions of one plan can depend on each other (a CollectLeft join's partitions wait for
    all of them to finish building), so reading them one after another may never end. A
    bounded queue keeps memory in check; closing the iterator stops the producers and aborts
    their work. `check` is called before every batch and while waiting for one (it raises to
    stop the stream).
    """
    count = plan.partition_count
    if count == 1:
        yield from stream_partition(ctx, plan, 0, check)
        return
    items: queue.Queue = queue.Queue(maxsize=buffered * max(count, 1))
    stop = threading.Event()

    def stopped() -> None:
        if stop.is_set():
            raise TaskCancelled("the stream was closed")

    def put(item) -> bool:
        while not stop.is_set():
            try:
                items.put(item, timeout=POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def produce(partition: int) -> None:
        batches = stream_partition(ctx, plan, partition, stopped)
        try:
            for batch in batches:
                if not put(batch):
                    return
            put(_DONE)
        except BaseException as exc:  # handed to the consumer
            put(exc)
        finally:
            batches.close()

    for partition in range(count):
        kept_threads.submit(produce, partition)
    try:
        finished = 0
        while finished < count:
            if check is not None:
                check()
            try:
                item = items.get(timeout=POLL_SECONDS)
            except queue.Empty:
                continue
            if item is _DONE:
                finished += 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        stop.set()
