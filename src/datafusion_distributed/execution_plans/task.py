"""Run one task: splice its inputs into its plan, execute every output partition, write or stream.

Used by workers for every task and by the coordinator for a single-task final stage, so a
query runs the same code whether its stages run in one process or across many. It knows
nothing of the network: inputs arrive as local files, found by a `locate` callable.

A task can be stopped while DataFusion works, not only between batches. A thread waiting in
DataFusion's `next()` for a batch is watched: its task's check runs every `POLL_SECONDS`, and
when it raises, the thread is sent an exception, which DataFusion sees within a second (it runs
Python code in a waiting thread once a second, to notice Ctrl-C); the wait then ends, which
drops the Rust future, and the stream is dropped, which aborts the tokio tasks DataFusion
spawned for it. (DataFusion's async iterator can be cancelled more directly, but each batch
then costs a round trip between threads: TPC-H ran 10-15% slower.) An aborted tokio task stops
only when it next yields, and a join can work for minutes without yielding (it emits rows into
its consumer within one poll), so a task runs every join of its plan under a CooperativeExec,
which makes the join's consumer yield every so many batches.
"""

from __future__ import annotations

import ctypes
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import wait
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from ..codec import ScannedFile, replace_subtree, with_file_groups, with_output_names
from ..codec.cooperative import wrap_cooperative
from ..common.fs import makedirs
from ..common.threads import kept_threads, map_concurrently
from .dictionaries import DictionaryUnifier
from .plan_node import PlanNode
from .stage import InputBoundary
from .view_arrays import compact_views

log = logging.getLogger(__name__)


class TaskError(RuntimeError):
    """A task failed while building or running its plan."""


class TaskCancelled(RuntimeError):
    """A task stopped because its query was cancelled."""


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


@dataclass(frozen=True)
class ResolvedInput:
    """A stage input (read at `where` in the task's plan) with the local files of each
    partition the task reads.

    `groups` is None when the whole exchange produced no rows: the task then runs the
    original boundary subtree instead (it yields the same empty result with the right schema).
    """

    where: InputBoundary
    groups: tuple[tuple[ScannedFile, ...], ...] | None
    schema: bytes | None  # IPC-serialised schema the producers wrote (None when all empty)


def unique_names(schema: pa.Schema) -> pa.Schema:
    """The schema with duplicate column names made unique, so a scan can address columns.

    Plans refer to columns by position, so renaming inside an exchange is invisible to them.
    """
    names = schema.names
    if len(set(names)) == len(names):
        return schema
    return pa.schema([f.with_name(f"{f.name}#{i}") for i, f in enumerate(schema)], schema.metadata)


_template_lock = threading.Lock()
_templates: dict[bytes, bytes] = {}
# An Arrow IPC file of no columns and no rows, shipped with the package (never written)
EMPTY_ARROW_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "empty.arrow")


def _arrow_scan_template(schema: pa.Schema) -> bytes:
    """Plan bytes of a DataFusion Arrow IPC scan with `schema`, whose files are to be replaced.

    DataFusion plans a scan only over a file that exists: it is planned over `EMPTY_ARROW_FILE`
    with `schema` given (planning reads the file's first bytes, not its schema), so making a
    template writes nothing, and a process killed meanwhile leaves nothing behind."""
    key = schema.serialize().to_pybytes()
    with _template_lock:
        if key in _templates:
            return _templates[key]
    ctx = SessionContext()
    ctx.register_arrow("exchange_input", EMPTY_ARROW_FILE, schema=schema)
    template = ctx.table("exchange_input").execution_plan().to_bytes()
    with _template_lock:
        _templates[key] = template
    return template


def arrow_scan(schema: pa.Schema, groups: Sequence[Sequence[ScannedFile]]) -> bytes:
    """Plan bytes of an Arrow IPC scan of `groups` (one partition each), whose files hold `schema`."""
    return with_file_groups(_arrow_scan_template(schema), [list(g) for g in groups])


def input_leaf(resolved: ResolvedInput) -> bytes:
    """The plan bytes that replace an input marker in a task's plan."""
    where = resolved.where
    if resolved.groups is None or resolved.schema is None:
        return where.boundary
    schema = pa.ipc.read_schema(pa.py_buffer(resolved.schema))
    file_schema = unique_names(schema)
    scan = with_file_groups(_arrow_scan_template(file_schema), [list(g) for g in resolved.groups])
    if file_schema.names != schema.names:
        scan = with_output_names(scan, schema.names)
    if not where.runs_boundary:
        return scan
    return replace_subtree(where.boundary, where.boundary_child, scan)


FETCH_CONCURRENCY = 4


def resolve_inputs(
    task_inputs: Sequence, locate: Callable[[Any], tuple[ScannedFile, int]]
) -> tuple[list[ResolvedInput], int]:
    """Locate every file of a task's inputs, several at once, and group them as the task reads
    them. `task_inputs` are TaskInput messages; `locate(location)` gives (the local file, bytes
    fetched over the network: 0 when read in place). Returns the inputs and the bytes fetched."""
    locations = [loc for inp in task_inputs for group in (inp.groups or ()) for loc in group]
    located = dict(zip(locations, map_concurrently(locate, locations, FETCH_CONCURRENCY), strict=True))
    resolved = [
        ResolvedInput(
            inp.where,
            None if inp.groups is None else tuple(tuple(located[loc][0] for loc in g) for g in inp.groups),
            inp.schema,
        )
        for inp in task_inputs
    ]
    return resolved, sum(size for _, size in located.values())


def local_file(path: str, size: int | None = None) -> ScannedFile:
    """A local file as a scan names it (object store path: absolute path without the root);
    `size` when it is already known."""
    absolute = os.path.abspath(path)
    return ScannedFile(absolute.lstrip("/"), os.path.getsize(absolute) if size is None else size)


def prepare_task_plan(
    ctx: SessionContext,
    plan: bytes,
    inputs: list[ResolvedInput],
    leaves: Sequence[tuple[bytes, bytes]] = (),
) -> ExecutionPlan:
    """Splice every input into a task's plan bytes and deserialise it, each join under a
    yield point (see the module's docstring). `leaves` are other (marker, plan bytes) pairs to
    splice in: the scans of the work-unit feeds the task read."""
    for resolved in inputs:
        plan = replace_subtree(plan, resolved.where.marker, input_leaf(resolved))
    for marker, leaf in leaves:
        plan = replace_subtree(plan, marker, leaf)
    try:
        built = ExecutionPlan.from_bytes(ctx, plan)
    except Exception as exc:  # DataFusion raises plain Exception
        raise TaskError(f"could not rebuild the task's plan: {exc}") from exc
    return _with_yield_points(ctx, built, plan)


def _with_yield_points(ctx: SessionContext, built: ExecutionPlan, raw: bytes) -> ExecutionPlan:
    """`built` (deserialised from `raw`) with each join under a CooperativeExec; `built` itself
    when it has no join, or when that fails (it then stops only when its joins yield)."""
    if "JoinExec" not in built.display_indent():  # most plans: nothing to walk
        return built
    try:
        joins = [node.raw for node in PlanNode.from_plan(built, raw).walk() if is_join(node.name)]
        if not joins:
            return built
        return ExecutionPlan.from_bytes(ctx, wrap_cooperative(raw, joins))
    except Exception as exc:  # unreadable bytes, or DataFusion's plain Exception
        log.warning("running a task without yield points over its joins: %s", exc)
        return built


YIELD_POINT = "CooperativeExec"


def is_join(name: str) -> bool:
    """Whether a plan node of this name is a join (hash, merge, nested loop, cross, ...)."""
    return name.endswith("JoinExec")


def added_yield_point(plan: ExecutionPlan, line: str) -> ExecutionPlan | None:
    """The join below `plan` when `plan` (whose first display line is `line`) is a yield point
    `prepare_task_plan` added, else None. DataFusion puts its own CooperativeExec only over
    leaves and exchanges, never right over a join, so metrics can skip exactly the added ones."""
    if line != YIELD_POINT:
        return None
    children = plan.children()
    if len(children) == 1 and is_join(children[0].display().split("\n", 1)[0].split(":", 1)[0].strip()):
        return children[0]
    return None


POLL_SECONDS = 0.1  # how often the checks of tasks waiting for a batch are run
REARM_SECONDS = 1.0  # how long an interrupted wait may go on before it is interrupted again


class _Interrupt(BaseException):
    """Raised in a thread waiting for DataFusion's next batch, to abandon the wait. A
    BaseException, so that a UDF's `except Exception` running in that thread lets it through."""


def _set_async_exc(thread: int, exc: type[BaseException] | None) -> None:
    """Have `thread` raise `exc` at its next Python instruction (None: forget a pending one)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(exc) if exc else None)


class _Wait:
    """A partition being read: the watchdog may interrupt the thread reading it only while that
    thread is inside DataFusion's `next()` (`inside`). The interruption is raised again every
    REARM_SECONDS while the thread stays inside: Python code run in that thread by something
    else (a gc callback, a `__del__`) may receive it and have it ignored."""

    def __init__(self, check: Callable[[], None]):
        self.thread = 0  # the thread inside `next()`
        self.check = check
        self.lock = threading.Lock()
        self.inside = False
        self.interrupted = False
        self.interrupted_at = 0.0

    def enter(self) -> None:
        with self.lock:
            self.thread = threading.get_ident()
            self.inside = True

    def leave(self) -> None:
        with self.lock:
            self.inside = False
            if self.interrupted:  # raised already, or still pending: never outside the wait
                _set_async_exc(self.thread, None)

    def poll(self) -> None:
        """Run the check; if it raises while the thread waits, interrupt the wait."""
        if not self.interrupted:
            try:
                self.check()
                return
            except BaseException:  # the thread runs the check itself once interrupted
                pass
        with self.lock:
            now = time.monotonic()
            if self.inside and (not self.interrupted or now - self.interrupted_at >= REARM_SECONDS):
                self.interrupted, self.interrupted_at = True, now
                _set_async_exc(self.thread, _Interrupt)


class _Watchdog:
    """One thread that polls every wait for a batch every POLL_SECONDS while there is one."""

    def __init__(self) -> None:
        self._waits: set[_Wait] = set()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._idle = False  # waiting for a first wait (otherwise it finds new ones as it polls)

    def watch(self, check: Callable[[], None]) -> _Wait:
        waiting = _Wait(check)
        with self._changed:
            self._waits.add(waiting)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="batch-wait-watchdog", daemon=True)
                self._thread.start()
            if self._idle:
                self._changed.notify()
        return waiting

    def forget(self, waiting: _Wait) -> None:
        with self._changed:
            self._waits.discard(waiting)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._waits:
                    self._idle = True
                    self._changed.wait()
                    self._idle = False
                waits = list(self._waits)
            for waiting in waits:
                try:
                    waiting.poll()
                except Exception as exc:  # never let the watchdog die: the wait runs on
                    log.warning("could not interrupt a wait for a batch: %s", exc)
            time.sleep(POLL_SECONDS)


_watchdog = _Watchdog()
_INTERRUPTED = object()


def stream_partition(
    ctx: SessionContext,
    plan: ExecutionPlan,
    partition: int,
    check: Callable[[], None] | None = None,
) -> Iterator[pa.RecordBatch]:
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
    waiting = None if check is None else _watchdog.watch(check)
    try:
        while True:
            if check is not None:
                check()
            batch = _next_batch(held, waiting)
            if batch is _INTERRUPTED:
                check()  # raises the reason, as the watchdog saw it
                raise TaskCancelled("the task was stopped")
            if batch is None:
                return
            yield batch.to_pyarrow()
    finally:
        held.clear()  # drops the stream, which aborts DataFusion's work for this partition
        if waiting is not None:
            _watchdog.forget(waiting)


def _next_batch(held: list, waiting: _Wait | None) -> Any:
    """The next batch of the stream `held[0]`, None at its end, or _INTERRUPTED when the
    watchdog interrupted the wait (the interruption is dropped here: its frames hold the
    stream)."""
    if waiting is None:
        return next(held[0], None)
    try:
        try:
            waiting.enter()
            return next(held[0], None)
        finally:
            waiting.leave()
    except BaseException:
        if not waiting.interrupted:
            raise
    waiting.leave()  # it may have interrupted the first `leave`
    return _INTERRUPTED


_DONE = object()


def stream_partitions(
    ctx: SessionContext,
    plan: ExecutionPlan,
    buffered: int = 4,
    *,
    check: Callable[[], None] | None = None,
) -> Iterator[pa.RecordBatch]:
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


WRITE_BUFFER_BYTES = 1 << 20


class PlanRounds(Protocol):
    """A task's plan run in rounds (see `work_unit_feed.reading.FeedRounds`)."""

    def plan(self, index: int, check: Callable[[], None] | None = None) -> ExecutionPlan | None:
        """The plan of round `index`, or None once the rounds ended (`check` raises to stop
        waiting for it)."""

    def finished(self, index: int, partitions: int) -> None:
        """One of the `partitions` output partitions is done with round `index`."""


def _stream_rounds(
    ctx: SessionContext, rounds: PlanRounds, partition: int, partitions: int, check: Callable[[], None]
) -> Iterator[pa.RecordBatch]:
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
    schema = file_schema = None
    renamed = False
    dictionaries = DictionaryUnifier()
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if writer is None:
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
    last = error = None
    try:
        last = write(count - 1)
    except BaseException as exc:
        error = exc
    wait(futures)  # even when one fails: no partition may still be writing once the task ends
    errors = [e for e in (error, *(f.exception() for f in futures)) if e is not None]
    if errors:  # the error that stopped the task, not the partitions it stopped
        raise next((e for e in errors if not isinstance(e, _OtherPartitionFailed)), errors[0])
    results = [f.result() for f in futures] + [last]
    schema = next((s for _, s in results if s is not None), None)
    return TaskOutput(
        tuple(out for out, _ in results), schema.serialize().to_pybytes() if schema is not None else None
    )
