"""A work-unit feed: a provider of units, discovered while a query runs, and the reader that
turns one unit into Arrow record batches of a declared schema.

The provider runs on the coordinator, started when a query reading the feed runs (not when it
is planned); the reader runs wherever a task reads units (shipped with the task, pickled like
Python UDFs are). `read_units` reads every unit here, one after another: the single-node
answer a feed gives, and the oracle its distributed answers are checked against.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import os
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from .errors import FeedError, short_repr

Provider = Any  # an iterable or async iterable of units, or a function returning one
# a unit (and, if it takes them, the `columns` a query reads) -> a RecordBatch, a Table,
# a RecordBatchReader or an iterable of them
Reader = Callable[..., Any]


PARQUET = "parquet"  # the reader of a feed whose units are Parquet files DataFusion reads itself


class FeedReader:
    """What a task needs to read a feed's units: its name, reader and schema (it travels to
    workers pickled, without the provider). `native` is "parquet" for a feed of Parquet files
    (read by DataFusion in the tasks; `batches` reads one with pyarrow, for `read_units`)."""

    def __init__(self, name: str, read: Reader | str, schema: pa.Schema) -> None:
        self.name = name
        if isinstance(read, str) and not _is_parquet(read):
            raise ValueError(f"a feed's reader is a function or {PARQUET!r}, not {read!r}")
        self.native = PARQUET if _is_parquet(read) else None
        self.read: Reader = _read_parquet_file if isinstance(read, str) else read
        self.schema = schema

    def _takes_columns(self) -> bool:
        """Whether the reader takes a `columns` keyword (the columns a query reads)."""
        try:
            parameters = inspect.signature(self.read).parameters.values()
        except (TypeError, ValueError):  # a builtin without a signature
            return False
        return any(p.name == "columns" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)

    def batches(
        self, unit: Any, columns: Sequence[str] | None = None, schema: pa.Schema | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The batches of `unit`, with the feed's schema, or `schema` (some of its columns)
        when given (columns taken by name, cast to its types). `columns` are those the query
        reads (None: all): a reader taking a `columns` keyword is given them, and may leave the
        others out (they are filled with nulls, which the query never reads). Raises FeedError
        naming the unit when the reader fails or returns something else than record batches
        of the feed's columns."""
        if columns is not None and not set(columns) <= set(self.schema.names):
            columns = None  # a projection this side cannot read: every column, as asked for
        if columns is not None and not columns:
            columns = self.schema.names[:1]  # rows without columns: one column keeps their count
        wanted = None
        if self._takes_columns():  # told every column when the query reads them all
            wanted = list(self.schema.names) if columns is None else list(columns)
        try:
            result = self.read(unit) if wanted is None else self.read(unit, columns=wanted)
            for batch in _as_batches(result):
                if batch.num_rows:
                    yield (
                        conform(batch, schema, None)
                        if schema is not None
                        else conform(batch, self.schema, wanted)
                    )
        except FeedError:
            raise
        except Exception as exc:
            raise FeedError(self.name, "reader", short_repr(unit), f"{type(exc).__name__}: {exc}") from exc


def _is_parquet(read: Any) -> bool:
    return isinstance(read, str) and read == PARQUET


def _read_parquet_file(unit: Any, columns: list[str] | None = None) -> pa.Table:
    """A unit of a feed of Parquet files read with pyarrow: the columns asked for, a column the
    file lacks as nulls (as DataFusion reads a Parquet table's files)."""
    import pyarrow.parquet as pq

    file = pq.ParquetFile(os.fspath(unit))
    present = set(file.schema_arrow.names)
    table = file.read(columns=[name for name in columns or file.schema_arrow.names if name in present])
    for name in columns or ():
        if name not in present:
            table = table.append_column(name, pa.nulls(table.num_rows))
    return table


def _as_batches(result: Any) -> Iterator[pa.RecordBatch]:
    if isinstance(result, pa.RecordBatch):
        yield result
    elif isinstance(result, pa.Table):
        yield from result.to_batches()
    elif isinstance(result, pa.RecordBatchReader):
        yield from result
    elif result is None:
        return
    elif isinstance(result, Iterable) and not isinstance(result, (str, bytes, dict)):
        for item in result:
            yield from _as_batches(item)
    else:
        raise TypeError(
            f"the reader returned {type(result).__name__}: return a pyarrow RecordBatch, Table, "
            "RecordBatchReader, or an iterable of them"
        )


def conform(batch: pa.RecordBatch, schema: pa.Schema, columns: Sequence[str] | None = None) -> pa.RecordBatch:
    """`batch` with exactly the columns of `schema`, found by name and cast to its types;
    when only `columns` were asked for, the others it lacks are nulls."""
    if batch.schema.equals(schema):
        return batch
    names = batch.schema.names
    needed = schema.names if columns is None else columns
    missing = [name for name in needed if name not in names]
    if missing:
        raise ValueError(f"the reader's batch has no column {', '.join(map(repr, missing))} (it has {names})")
    arrays = [
        batch.column(field.name).cast(field.type)
        if field.name in names
        else pa.nulls(batch.num_rows, field.type)
        for field in schema
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class WorkUnitFeed:
    """A table whose rows come from work units discovered while the query runs.

    Args:
        name: the table's name.
        provider: the units, picklable values: an iterable (a list, a generator) or an async
            iterable, or a function of no arguments returning one (called by each query: a
            generator object can be read by one query only).
        read: a function of one unit returning its rows as a pyarrow RecordBatch, Table,
            RecordBatchReader, or an iterable of them (columns by name, cast to `schema`). It
            runs on the workers, pickled with cloudpickle like Python UDFs. If it takes a
            `columns` keyword it is given the columns the query reads, and may return only
            those. Or `"parquet"`: each unit is the absolute path of a Parquet file, which the
            tasks read with DataFusion's own Parquet reader (projection, row-group pruning),
            as it reads a registered Parquet table's files (see docs/feeds.md).
        schema: the table's schema.
        tasks: how many tasks read the feed (None: as the planner's task-count handlers
            choose; by default one per worker).

    A task reads as many units at once as it has partitions of the feed's scan (one thread
    each; `partitions_per_task` by default) and asks for a unit when it has read one, so it
    never holds more than that many.
    """

    def __init__(
        self,
        name: str,
        provider: Provider,
        read: Reader | str,
        schema: pa.Schema,
        *,
        tasks: int | None = None,
    ) -> None:
        if not isinstance(schema, pa.Schema):
            raise TypeError(f"schema must be a pyarrow.Schema, got {type(schema).__name__}")
        if len(set(schema.names)) != len(schema.names) or not len(schema):
            raise ValueError(
                f"a feed's schema needs at least one column and unique names, got {schema.names}"
            )
        if isinstance(read, str) and read != PARQUET:
            raise ValueError(f'read must be a function of one unit, or "parquet", got {read!r}')
        if not callable(read) and not _is_parquet(read):
            raise TypeError('read must be a function of one unit, or "parquet"')
        if tasks is not None and not 1 <= tasks <= 100_000:
            raise ValueError(f"tasks must be None or between 1 and 100000, got {tasks}")
        if not (callable(provider) or isinstance(provider, Iterable) or hasattr(provider, "__aiter__")):
            raise TypeError(
                "provider must be an iterable or async iterable of units, or a function returning one"
            )
        self.name = name
        self.provider = provider
        self.read = read
        self.schema = pa.schema(list(schema))  # no metadata: the table's files carry none
        self.tasks = tasks
        self.id = uuid.uuid4().hex
        self._used = False  # a one-shot iterator given as the provider was read by a query
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"WorkUnitFeed({self.name!r}, tasks={self.tasks})"

    @property
    def native(self) -> str | None:
        """ "parquet" for a feed of Parquet files (read by DataFusion itself), else None."""
        return PARQUET if _is_parquet(self.read) else None

    @property
    def reader(self) -> FeedReader:
        """The part of the feed the tasks reading it need."""
        return FeedReader(self.name, self.read, self.schema)

    def open_units(self) -> UnitIterator:
        """Start the provider for one query: its units, in order, until it ends.

        Raises:
            FeedError: the provider is a one-shot iterator another query has read already, or
                calling it failed.
        """
        source = self.provider
        try:
            if callable(source) and not isinstance(source, Iterable) and not hasattr(source, "__aiter__"):
                source = source()
        except Exception as exc:
            raise FeedError(self.name, "provider", None, f"{type(exc).__name__}: {exc}") from exc
        if hasattr(source, "__aiter__"):
            one_shot = hasattr(source, "__anext__")
            self._claim(one_shot and source is self.provider)
            return UnitIterator(_AsyncUnits(source))
        if not isinstance(source, Iterable):
            raise FeedError(
                self.name, "provider", None, f"it gave {type(source).__name__}, not an iterable of units"
            )
        iterator = iter(source)
        self._claim(iterator is source and source is self.provider)
        return UnitIterator(iterator)

    def _claim(self, one_shot: bool) -> None:
        if not one_shot:
            return
        with self._lock:
            if self._used:
                raise FeedError(
                    self.name,
                    "provider",
                    None,
                    "its generator was read by an earlier query; give a function returning a "
                    "new one (provider=lambda: units()) to read the feed more than once",
                )
            self._used = True


class UnitIterator:
    """A provider's units for one query, pulled one at a time; `close()` stops the provider
    (a generator's `finally` runs), from any thread, also while a unit is being produced."""

    def __init__(self, source: Iterator | _AsyncUnits) -> None:
        self._source = source
        self._lock = threading.Lock()
        self._busy = False
        self._closed = False

    def next(self) -> tuple[bool, Any]:
        """(True, the next unit), or (False, None) once the provider ended or was closed."""
        with self._lock:
            if self._closed:
                return False, None
            self._busy = True
        try:
            return True, next(self._source)
        except StopIteration:
            return False, None
        finally:
            with self._lock:
                self._busy = False
                closing = self._closed
            if closing:
                self._stop()

    def close(self) -> None:
        """Stop the provider now, or as soon as the unit it is producing is done."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            busy = self._busy
        if isinstance(self._source, _AsyncUnits):
            self._source.cancel_pending()
        if not busy:
            self._stop()

    def _stop(self) -> None:
        close = getattr(self._source, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # a provider failing as it stops changes nothing: it is stopped
                pass


class _AsyncUnits:
    """An async iterable read from synchronous code, on an event loop of its own."""

    def __init__(self, source: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="feed-provider", daemon=True)
        self._thread.start()
        self._iterator = source.__aiter__()
        self._pending: concurrent.futures.Future | None = None
        self._lock = threading.Lock()

    def __next__(self) -> Any:
        future = asyncio.run_coroutine_threadsafe(_anext(self._iterator), self._loop)
        with self._lock:
            self._pending = future
        try:
            done, value = future.result()
        except (asyncio.CancelledError, concurrent.futures.CancelledError):
            raise StopIteration from None
        if not done:
            raise StopIteration
        return value

    def cancel_pending(self) -> None:
        with self._lock:
            if self._pending is not None:
                self._pending.cancel()

    def close(self) -> None:
        aclose = getattr(self._iterator, "aclose", None)
        try:
            if aclose is not None:
                asyncio.run_coroutine_threadsafe(aclose(), self._loop).result(timeout=10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)


async def _anext(iterator: Any) -> tuple[bool, Any]:
    try:
        return True, await iterator.__anext__()
    except StopAsyncIteration:
        return False, None


def read_units(feed: WorkUnitFeed) -> pa.Table:
    """Every unit of `feed` read here, one after another, into one table: what a query over
    the feed reads, and the single-node answer to check a distributed one against.

    Examples:
        >>> import pyarrow as pa
        >>> feed = WorkUnitFeed("t", [1, 2], lambda n: pa.table({"n": [n] * n}), pa.schema([("n", pa.int64())]))
        >>> read_units(feed).column("n").to_pylist()
        [1, 2, 2]
    """
    units = feed.open_units()
    reader = feed.reader
    batches: list[pa.RecordBatch] = []
    try:
        while True:
            try:
                more, unit = units.next()
            except Exception as exc:
                raise FeedError(feed.name, "provider", None, f"{type(exc).__name__}: {exc}") from exc
            if not more:
                break
            batches.extend(reader.batches(unit))
    finally:
        units.close()
    return pa.Table.from_batches(batches, schema=feed.schema)
