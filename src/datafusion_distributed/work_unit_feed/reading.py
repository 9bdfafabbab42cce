"""Reading a task's feed scans: ask for units, read each with the feed's reader, write the
rows to local Arrow IPC files, and give back the scan reading those files.

A task reads each feed scan with `partitions` threads; each asks for a unit, reads it, and
asks for the next, so a task holds at most `partitions` units at once and a slow unit holds
back only its own thread: the other tasks keep asking. Each thread writes one file (one
partition of the scan), whatever the number of units it read: the scan's projection, filters
and limit, planned over the feed's table, then apply as planned.

A feed of Parquet files that DataFusion reads (`FeedToRead.native`) is not read here: its
units are paths, put in a Parquet scan in place of the feed's (`_take_files`), all of them
(the stage's only task, or a scan every task reads whole) or a round at a time (`FeedRounds`).
Shared out otherwise, its files are read here with pyarrow, like a reader's units, so that
each task still takes them as it goes.
"""

from __future__ import annotations

import functools
import logging
import os
import pickle
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from ..codec import with_file_groups
from ..codec.scan import as_parquet_scan
from ..common.threads import map_concurrently
from ..metrics.recorder import safe_plan_metrics
from ..metrics.task_metrics import NodeMetrics, summed
from ..runtime.inputs import arrow_scan, local_file
from .dispatch import FeedRun, Unit
from .errors import FeedError
from .feed import FeedReader

log = logging.getLogger(__name__)


class UnitSource(Protocol):
    """Where a task attempt gets the units of one feed scan."""

    def next_unit(self) -> Unit | None:
        """The next unit for this attempt, or None when there is none left."""

    def unit_failed(self, index: int, detail: str) -> None:
        """Tell the coordinator that reading unit `index` failed (best effort)."""


class ScanOfFeed(Protocol):
    """What a stage's FeedScan and a task's FeedTask both say of a feed scan (`SCAN_FIELDS`)."""

    @property
    def marker(self) -> bytes:
        """See `SCAN_FIELDS`."""

    @property
    def scan(self) -> bytes:
        """See `SCAN_FIELDS`."""

    @property
    def scan_id(self) -> int:
        """See `SCAN_FIELDS`."""

    @property
    def columns(self) -> tuple[str, ...] | None:
        """See `SCAN_FIELDS`."""

    @property
    def plain(self) -> bool:
        """See `SCAN_FIELDS`."""

    @property
    def native(self) -> bool:
        """See `SCAN_FIELDS`."""

    @property
    def predicate(self) -> bytes | None:
        """See `SCAN_FIELDS`."""

    @property
    def predicate_shown(self) -> str:
        """See `SCAN_FIELDS`."""


# the fields of a feed scan that go from a stage's FeedScan to its tasks' FeedTask and FeedToRead
SCAN_FIELDS = ("marker", "scan", "scan_id", "columns", "plain", "native", "predicate", "predicate_shown")


def scan_fields(scan: ScanOfFeed) -> dict:
    """`SCAN_FIELDS` of `scan`, by name."""
    return {name: getattr(scan, name) for name in SCAN_FIELDS}


@dataclass(frozen=True)
class FeedToRead:
    """One feed scan of a task: the marker standing for it in the task's plan, the scan to put
    back there, how to read its units, and from where they come."""

    marker: bytes
    scan: bytes
    scan_id: int
    reader: FeedReader
    partitions: int
    source: UnitSource
    columns: tuple[str, ...] | None = None  # the columns the scan reads (None: all)
    plain: bool = False  # the scan only picks `columns`: the files need hold only those
    native: bool = False  # a feed of Parquet files read by DataFusion (see FeedScan.native)
    predicate: bytes | None = None  # a feed of Parquet files: the filter above the scan
    predicate_shown: str = ""  # how DataFusion shows that filter

    @property
    def file_schema(self) -> pa.Schema:
        """The schema of the files the task writes: only the columns the scan reads when it
        merely picks them (the task then scans just those), else the feed's."""
        schema = self.reader.schema
        if self.plain and self.columns and set(self.columns) <= set(schema.names):
            return pa.schema([schema.field(name) for name in self.columns])
        return schema

    @classmethod
    def of(cls, scan: ScanOfFeed, reader: FeedReader, partitions: int, source: UnitSource) -> FeedToRead:
        """The feed scan `scan` (a stage's FeedScan, or the FeedTask a worker is sent) read by
        `reader` over `partitions` partitions, its units from `source`."""
        return cls(reader=reader, partitions=partitions, source=source, **scan_fields(scan))


@dataclass(frozen=True)
class FeedLeaf:
    """A feed scan read: the plan bytes replacing its marker, and how many units it read."""

    marker: bytes
    leaf: bytes
    units: int


def read_feed(
    feed: FeedToRead,
    folder: str,
    check: Callable[[], None],
    on_write: Callable[[int], None] | None = None,
) -> FeedLeaf:
    """Read every unit the task is handed for `feed` into files in `folder` (see the module's
    docstring); `check` is called between batches (it raises to stop), `on_write(n)` told of
    each batch's bytes. Raises FeedError naming the unit a reader failed on."""
    if feed.native:
        return _take_files(feed, check)
    os.makedirs(folder, exist_ok=True)
    schema = feed.file_schema
    narrow = schema is not feed.reader.schema
    failed = threading.Event()

    def checked() -> None:
        check()
        if failed.is_set():
            raise _OtherPartitionFailed()

    def read_partition(partition: int) -> tuple[str, int] | BaseException:
        path = os.path.join(folder, f"feed-{feed.scan_id}-part-{partition}.arrow")
        units = 0
        try:
            with pa.ipc.new_file(path, schema) as writer:
                while True:
                    checked()
                    unit = feed.source.next_unit()
                    if unit is None:
                        break
                    units += 1
                    for batch in _read_unit(feed, unit, schema if narrow else None):
                        checked()
                        if on_write is not None:
                            on_write(batch.nbytes)
                        writer.write_batch(batch)
        except BaseException as exc:  # handed back: the partitions' first real error is raised
            failed.set()
            return exc
        return path, units

    done = map_concurrently(read_partition, list(range(feed.partitions)), feed.partitions)
    errors = [item for item in done if isinstance(item, BaseException)]
    if errors:
        raise next((e for e in errors if not isinstance(e, _OtherPartitionFailed)), errors[0])
    groups = [[local_file(path)] for path, _ in done]
    # a narrow file is scanned alone; otherwise the planned scan, with its projection, reads it
    leaf = arrow_scan(schema, groups) if narrow else with_file_groups(feed.scan, groups)
    return FeedLeaf(feed.marker, leaf, sum(units for _, units in done))


def _take_files(
    feed: FeedToRead, check: Callable[[], None], scan: bytes | None = None, limit: int | None = None
) -> FeedLeaf:
    """Take the units of a feed of Parquet files for the scan's partitions, in turn, until
    the task is handed no more, or `limit` of them (each is only a path: nothing is read
    here): `scan`, the feed's Parquet scan (`_parquet_scan`, made here if not given), reading
    them with DataFusion's own reader."""
    groups: list[list] = [[] for _ in range(feed.partitions)]
    units = 0
    while limit is None or units < limit:
        check()
        unit = feed.source.next_unit()
        if unit is None:
            break
        groups[units % feed.partitions].append(_unit_file(feed, unit))
        units += 1
    return FeedLeaf(feed.marker, with_file_groups(scan or _parquet_scan(feed), groups), units)


def _parquet_scan(feed: FeedToRead) -> bytes:
    """The Parquet scan reading a feed of Parquet files in place of its planned Arrow scan.

    When the planned scan only picks columns, the Parquet scan has just those (its files'
    other columns are never read) and prunes row groups with the filter right above it: the
    filter's columns are then the scan's own, in order. The predicate is kept only if
    DataFusion reads it back as the filter it was (else the scan reads every row group)."""
    schema = feed.file_schema
    if schema is feed.reader.schema:  # the scan does more than pick columns: as planned
        return as_parquet_scan(feed.scan)
    narrow = arrow_scan(schema, [])
    if feed.predicate is not None:
        pruning = as_parquet_scan(narrow, feed.predicate)
        if _prunes_as_planned(pruning, feed.predicate_shown):
            return pruning
        log.warning("feed %r: its files are read without pruning by the query's filter", feed.reader.name)
    return as_parquet_scan(narrow)


@functools.lru_cache(maxsize=256)
def _prunes_as_planned(scan: bytes, shown: str) -> bool:
    """Whether DataFusion rebuilds Parquet scan `scan` with the predicate shown as `shown`."""
    try:
        line = ExecutionPlan.from_bytes(SessionContext(), scan).display()
    except Exception:  # DataFusion raises plain Exception: a predicate it cannot rebuild here
        return False
    start = line.find(", predicate=")
    if start < 0 or not shown:
        return False
    rest = line[start + len(", predicate=") :]
    ends = [i for i in (rest.find(", pruning_predicate="), rest.find(", required_guarantees=")) if i >= 0]
    return rest[: min(ends)] == shown if ends else rest.strip() == shown


def _unit_file(feed: FeedToRead, unit: Unit):
    """The file a unit of a feed of Parquet files names, as a scan lists it."""
    try:
        path = os.fspath(pickle.loads(unit.payload))
        if not isinstance(path, str) or not os.path.isabs(path):
            raise ValueError(f"a unit of a feed of Parquet files is an absolute path, got {path!r}")
        return local_file(path)
    except Exception as exc:  # not a path, or no file there
        raise _unit_failed(feed, unit, f"{type(exc).__name__}: {exc}") from exc


def _unit_failed(feed: FeedToRead, unit: Unit, detail: str) -> FeedError:
    """Tell the coordinator that reading `unit` failed with `detail`; the error to raise."""
    feed.source.unit_failed(unit.index, detail)
    return FeedError(feed.reader.name, "reader", f"#{unit.index}", detail)


class FeedRounds:
    """A task's scan of a feed of Parquet files run in rounds (see `distributed_planner.rounds`):
    the plan of round `r` reads the next units the task is handed, one per partition of the
    scan, and the task writes the outputs of every round as one. Round 0 always runs (over no
    unit when the feed has none left); a later round only when it is handed a unit. Every
    output partition goes through the rounds in order, so a partition done with one round
    starts the next while the others finish theirs, and a task that reads its units faster
    than another is handed more of them; a partition two rounds ahead of another waits for it,
    so that a task holds at most two rounds (a shuffle keeps a round's rows for the partitions
    that have not read them).

    `build(marker, leaf)` makes a round's plan from the scan's leaf; `check` raises to stop.
    `metrics` are DataFusion's metrics of the rounds done, added up."""

    def __init__(
        self, feed: FeedToRead, check: Callable[[], None], build: Callable[[bytes, bytes], ExecutionPlan]
    ) -> None:
        self.feed = feed
        self.check = check
        self.build = build
        self.scan = _parquet_scan(feed)  # the same each round: only its files change
        self.metrics: NodeMetrics | None = None
        self._plans: dict[int, Any] = {}  # round -> its plan, None past the last, or its error
        self._finished: dict[int, int] = {}  # round -> output partitions done with it
        self._outputs = 0  # output partitions of every round's plan
        self._changed = threading.Condition()

    def plan(self, index: int, check: Callable[[], None] | None = None) -> ExecutionPlan | None:
        """The plan of round `index`, made when first asked for; None once the rounds ended.
        A round that failed to be made raises its error to every partition asking. Waits while
        a partition is still in round `index - 2` (`check`, called meanwhile, raises to stop)."""
        with self._changed:
            while index >= 2 and self._finished.get(index - 2, 0) < self._outputs:
                failed = next((p for p in self._plans.values() if isinstance(p, BaseException)), None)
                if failed is not None:
                    raise failed
                if check is not None:
                    check()
                self._changed.wait(_WAIT_SECONDS)
            if index not in self._plans:
                try:
                    self._plans[index] = self._make(index)
                    if index == 0:
                        self._outputs = self._plans[0].partition_count
                except BaseException as exc:
                    self._plans[index] = exc
                self._changed.notify_all()
            made = self._plans[index]
        if isinstance(made, BaseException):
            raise made
        return made

    def finished(self, index: int, partitions: int) -> None:
        """An output partition is done with round `index` (of `partitions`): the round's plan
        is dropped once all are."""
        with self._changed:
            done = self._finished[index] = self._finished.get(index, 0) + 1
            self._changed.notify_all()
            if done < partitions or isinstance(self._plans.get(index), BaseException):
                return
            metrics = safe_plan_metrics(self._plans[index])
            self.metrics = metrics if index == 0 else summed(self.metrics, metrics)
            self._plans[index] = _DONE

    def _make(self, index: int) -> ExecutionPlan | None:
        if index > 0 and self._plans.get(index - 1) is None:
            return None
        leaf = _take_files(self.feed, self.check, self.scan, limit=self.feed.partitions)
        if index > 0 and not leaf.units:
            return None
        return self.build(leaf.marker, leaf.leaf)


_WAIT_SECONDS = 0.1  # how often a partition waiting for the others checks whether to stop
_DONE = object()  # a round every output partition is done with (its plan dropped)


class _OtherPartitionFailed(RuntimeError):
    """A partition stopped because another partition of the scan failed."""


def _read_unit(feed: FeedToRead, unit: Unit, narrow: pa.Schema | None):
    try:
        value = pickle.loads(unit.payload)
        yield from feed.reader.batches(value, feed.columns, narrow)
    except FeedError as exc:
        feed.source.unit_failed(unit.index, exc.detail)
        raise
    except Exception as exc:  # the unit would not unpickle here
        raise _unit_failed(feed, unit, f"{type(exc).__name__}: {exc}") from exc


def read_feeds(
    feeds: Sequence[FeedToRead],
    folder: str,
    check: Callable[[], None],
    on_write: Callable[[int], None] | None = None,
) -> list[FeedLeaf]:
    """`read_feed` for each of a task's feed scans, one after another."""
    return [read_feed(feed, folder, check, on_write) for feed in feeds]


class LocalUnits:
    """Units of a task attempt run in the coordinator itself: asked of its FeedRun directly."""

    def __init__(self, run: FeedRun, token: str, scan_id: int) -> None:
        self.run = run
        self.token = token
        self.scan_id = scan_id

    def next_unit(self) -> Unit | None:
        """The next unit for this attempt (see `FeedRun.take`)."""
        return self.run.take(self.token, self.scan_id)

    def unit_failed(self, index: int, detail: str) -> None:
        """Record the reader's failure on the run."""
        self.run.unit_failed(self.token, self.scan_id, index, detail)
