"""Before the passes of planning (see `planner`): drop from each Parquet scan the files its
predicate cannot match, as the statistics a table format keeps for each file prove (Delta's
log, Iceberg's manifests), so that tasks are counted, and started, for the files that may hold
rows. A plan of one task, run in the coordinator from memory, is pruned too (`pruned_plan`).

DataFusion's own `PruningPredicate` decides, in the compiled data plane
(`_native.files_to_read`), from the scan's predicate and its files' minimum and maximum
values, null counts and row counts. A file is dropped only when they prove that none of its
rows can pass; an expression it cannot reason about, a column without statistics, or a scan
whose files are not all of one registered table keeps every file. Partitions emptied of
files stay, reading nothing, so no partition count changes.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import pyarrow as pa
from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

import datafusion_distributed._native as _native

from ..codec import file_groups, scan_kind, without_files
from ..execution_plans.plan_node import PlanNode, replace_leaves
from .fidelity import round_trip_difference
from .series_repair import with_series_repaired

log = logging.getLogger("datafusion_distributed.planner")


@dataclass(frozen=True)
class FileStatistics:
    """The statistics of a table's data files, a row per file of `statistics`, whose `paths`
    are the files' paths as a scan names them: for each column `c` of the files (by the name
    it has in them), `min:c` and `max:c` (of `c`'s type in the files, null where unknown) and
    `null_count:c` (uint64); and `row_count` (uint64). A column whose bounds are unsafe to
    prune with is left out (see `table_files.file_statistics`)."""

    table: str
    paths: tuple[str, ...]
    statistics: pa.RecordBatch

    def rows(self, indices: list[int]) -> bytes:
        """The rows at `indices`, in that order, as an Arrow IPC stream."""
        taken = self.statistics.take(pa.array(indices, pa.int64()))
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, taken.schema) as writer:
            writer.write_batch(taken)
        return sink.getvalue().to_pybytes()


def scan_path(path: str) -> str:
    """`path` (a local path, `file://` or object store URL) as a scan names its files: without
    the scheme, the bucket first, with no leading slash."""
    _, _, rest = path.rpartition("://")
    return rest.lstrip("/")


@dataclass
class TableStatistics:
    """The file statistics of the tables registered on a context, by table name, in the order
    they were registered; looked up by file path while planning. Tables may share files (two
    versions of one table): a file's statistics never change, data files being immutable."""

    _tables: dict[str, FileStatistics] = field(default_factory=dict)
    _by_path: dict[str, dict[str, int]] = field(default_factory=dict)  # path -> table -> row
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def register(self, name: str, statistics: FileStatistics | None) -> None:
        """Keep `statistics` for the table registered as `name` (None: it has none)."""
        with self._lock:
            tables = {key: value for key, value in self._tables.items() if key != name}
            if statistics is not None:
                tables[name] = statistics
            by_path: dict[str, dict[str, int]] = {}
            for table, stats in tables.items():
                for row, path in enumerate(stats.paths):
                    by_path.setdefault(path, {})[table] = row
            self._tables, self._by_path = tables, by_path

    @property
    def has_any(self) -> bool:
        """Whether any table's statistics are kept."""
        return bool(self._by_path)

    def holding(self, paths: list[str]) -> list[tuple[FileStatistics, list[int]]]:
        """The tables whose files include every one of `paths`, in the order registered, each
        with the rows of `paths` in its statistics."""
        tables, by_path = self._tables, self._by_path
        rows = [by_path.get(path, {}) for path in paths]
        names = [name for name in tables if rows and all(name in found for found in rows)]
        return [(tables[name], [found[name] for found in rows]) for name in names]


@dataclass(frozen=True)
class Pruned:
    """How many of a table's files the plan's scans held, and how many were dropped."""

    table: str
    files: int
    skipped: int

    def describe(self) -> str:
        """One line for EXPLAIN."""
        return f"{self.table}: {self.skipped} of {self.files} files skipped by statistics"


def prune_files(root: PlanNode, tables: TableStatistics | None) -> tuple[PlanNode, tuple[Pruned, ...]]:
    """`root` with every file no row of which can pass its scan's predicate dropped, and what
    was dropped, per table (only tables of `tables` are pruned). A scan of files that several
    tables share counts toward one the plan reads other files of, else the first registered."""
    if tables is None or not tables.has_any:  # no lakehouse table: nothing to look at
        return root, ()
    scans = []
    for node in root.walk():
        if not node.children and scan_kind(node.raw) == "parquet":
            paths = list(dict.fromkeys(f.path for group in file_groups(node.raw) for f in group))
            holders = tables.holding(paths)
            if holders:
                scans.append((node, paths, holders))
    read = {holders[0][0].table for _, _, holders in scans if len(holders) == 1}
    replacements: dict[int, bytes] = {}
    counts: dict[str, list[int]] = {}
    for node, paths, holders in scans:
        statistics, rows = next(((s, r) for s, r in holders if s.table in read), holders[0])
        skipped = _skipped(node.raw, paths, statistics, rows)
        if skipped is None:
            continue
        seen = counts.setdefault(statistics.table, [0, 0])
        seen[0] += len(paths)
        seen[1] += len(skipped)
        if skipped:
            replacements[id(node)] = without_files(node.raw, skipped)
    pruned = tuple(Pruned(table, files, skipped) for table, (files, skipped) in counts.items())
    return replace_leaves(root, replacements), pruned


def pruned_plan(
    plan: ExecutionPlan, session: SessionContext, tables: TableStatistics
) -> tuple[ExecutionPlan, tuple[Pruned, ...]]:
    """`plan` (planned in `session`) without the files `prune_files` drops, rebuilt in
    `session` from its bytes, for a plan of one task run here; `plan` itself when it drops
    none, or when the plan does not rebuild faithfully from its bytes."""
    if not tables.has_any:  # before serialising the plan: most contexts have no lakehouse table
        return plan, ()
    codecs = session if session.physical_extension_codec_ids() else None
    try:
        root = PlanNode.from_plan(plan, ctx=codecs)
    except Exception:  # DataFusion raises plain Exception: a plan it cannot serialise
        return plan, ()
    pruned_root, pruned = prune_files(root, tables)
    if pruned_root is root:
        return plan, pruned
    if round_trip_difference(plan, root.raw, session) is not None:
        return plan, ()
    return ExecutionPlan.from_bytes(session, with_series_repaired(pruned_root).raw), pruned


def _skipped(scan: bytes, paths: list[str], statistics: FileStatistics, rows: list[int]) -> set[str] | None:
    """Those of `paths`, the files of Parquet scan `scan` (at `rows` of `statistics`), that its
    predicate cannot match; None for a scan without a predicate, or one DataFusion cannot
    prune with."""
    try:
        read = _native.files_to_read(scan, statistics.rows(rows))
    except ValueError as exc:  # a predicate or statistics DataFusion cannot prune with
        log.debug("files of %s not pruned: %s", statistics.table, exc)
        return None
    if read is None:
        return None
    return {path for path, keep in zip(paths, read, strict=True) if not keep}
