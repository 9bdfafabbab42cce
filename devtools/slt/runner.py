"""Run sqllogictest files in two engines in lockstep and classify every record.

Each file gets fresh engines (a new SessionContext each, DataFusion's sqllogictest settings):
the reference (single-node DataFusion) and the candidate (distributed, or DataFusion running
its plan decoded from bytes). Every record runs in the reference, then in the candidate, and
is classified (see `compare`); the reference's outcome is also checked against the text
the file expects, for information.

Files run in a `Workspace`: a temporary copy of the layout DataFusion's runner sees from its
working directory `datafusion/sqllogictest` (the corpus's data linked in, read-only), where
`test_files/scratch` is a link switched to each engine's own scratch folder before each of
its statements. So both engines write "the same" paths without seeing each other's files,
print the same absolute paths, and nothing is written into the corpus. Scratch folders are
emptied after each file and the workspace is deleted at the end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datafusion_distributed import DistributedConfig
from datafusion_distributed.clusters.local import LocalCluster
from datafusion_distributed.common.totals import total_of
from datafusion_distributed.protocol.resolver import WorkerResolver
from datafusion_distributed.test_utils.forced import forced_distribution

from .compare import FAILURES, Category, Verdict, classify, first_line
from .engines import (
    DistributedEngine,
    Engine,
    Outcome,
    PlainEngine,
    PlanEngine,
    RoundtripEngine,
)
from .expected import expected_mismatch
from .parser import Record, RecordKind, load_slt

__all__ = [
    "CORPUS_ENV",
    "FileResult",
    "RecordResult",
    "RunOptions",
    "Workspace",
    "default_corpus",
    "run_file",
    "run_files",
    "slt_files",
]

#: Environment variable naming the corpus folder (default `../shared/datafusion-slt` next to
#: the repository).
CORPUS_ENV = "DATAFUSION_SLT_DIR"

# The repository root: this file is devtools/slt/runner.py.
REPOSITORY = Path(__file__).resolve().parents[2]

# Where DataFusion's runner runs, inside the corpus's `data` folder.
SQLLOGICTEST_DIR = ("datafusion", "sqllogictest")


def default_corpus() -> Path:
    """The corpus folder: $DATAFUSION_SLT_DIR, else `../shared/datafusion-slt` from the
    repository root."""
    configured = os.environ.get(CORPUS_ENV)
    return Path(configured) if configured else (REPOSITORY.parent / "shared" / "datafusion-slt")


def slt_files(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """The `.slt` files named by `paths` (files, or folders searched recursively), sorted."""
    found: list[Path] = []
    for path in map(Path, paths):
        found.extend(sorted(path.rglob("*.slt")) if path.is_dir() else [path])
    return found


@dataclass(frozen=True)
class RunOptions:
    """How a run compares: `mode` "distributed" (DataFusion against a DistributedContext) or
    "roundtrip" (DataFusion's plan against the same plan decoded from bytes); `cluster`
    "embedded" or "local:N"; `forced` splits every stage and shuffles every join even on tiny
    data; `timeout` bounds each statement in each engine (seconds); `exchange` is the
    DistributedConfig setting ("stream" streams every exchange it can, whatever its size)."""

    mode: str = "distributed"
    cluster: str = "embedded"
    forced: bool = False
    timeout: float = 60.0
    exchange: str = "auto"

    def __post_init__(self) -> None:
        if self.mode not in ("distributed", "roundtrip"):
            raise ValueError("mode must be 'distributed' or 'roundtrip'")
        if self.cluster != "embedded" and not (
            self.cluster.startswith("local:") and self.cluster[6:].isdigit() and int(self.cluster[6:]) > 0
        ):
            raise ValueError("cluster must be 'embedded' or 'local:N'")

    def distributed_options(self) -> dict[str, Any]:
        """The candidate's DistributedContext keyword arguments; forced: `datafusion_distributed.test_utils.forced`
        (every stage split over the workers, no join side inlined or broadcast)."""
        if self.forced:
            return forced_distribution(query_timeout=self.timeout, exchange=self.exchange)
        return {"config": DistributedConfig(query_timeout=self.timeout, exchange=self.exchange)}

    def label(self) -> str:
        """A short name of the run's settings for reports: `roundtrip`, or forced/default plus the cluster."""
        if self.mode == "roundtrip":
            return "roundtrip"
        exchange = "" if self.exchange == "auto" else f"+{self.exchange}"
        return f"{'forced' if self.forced else 'default'}+{self.cluster}{exchange}"


@dataclass(frozen=True)
class RecordResult:
    """One record's verdict, with what both engines said about it."""

    file: str
    line: int
    kind: str
    sql: str
    category: Category
    detail: str = ""
    reference_error: str | None = None
    candidate_error: str | None = None
    same_first_line: bool | None = None
    expected_mismatch: str | None = None
    reference_seconds: float = 0.0
    candidate_seconds: float = 0.0
    candidate_tasks: int = 1
    candidate_streamed: bool = False
    resynced: bool = False


@dataclass(frozen=True)
class FileResult:
    """Every record of one file, its times, and why it stopped early (`error`: the runner
    failed on it; `aborted`: an engine hung and the rest of the file was skipped)."""

    file: str
    records: tuple[RecordResult, ...] = ()
    seconds: float = 0.0
    error: str | None = None
    aborted: str | None = None

    @property
    def counts(self) -> Counter:
        """Records per category, `expected_mismatch` (records where DataFusion's outcome differs
        from the file's text), `multi_task` (records the candidate ran as several tasks) and
        `both_error_messages_differ` (both failed, with different first lines)."""
        counts = Counter(r.category.value for r in self.records)
        counts["expected_mismatch"] = sum(r.expected_mismatch is not None for r in self.records)
        counts["multi_task"] = sum(r.candidate_tasks > 1 for r in self.records)
        counts["streamed"] = sum(r.candidate_streamed for r in self.records)
        counts["both_error_messages_differ"] = sum(r.same_first_line is False for r in self.records)
        return counts

    reference_seconds = total_of(
        "records", "reference_seconds", "Time the reference engine spent on the file's records."
    )
    candidate_seconds = total_of(
        "records", "candidate_seconds", "Time the candidate engine spent on the file's records."
    )

    @property
    def failures(self) -> list[RecordResult]:
        """The records whose category puts the candidate at fault."""
        return [r for r in self.records if r.category in FAILURES]


class Workspace:
    """A temporary working directory laid out like DataFusion's sqllogictest folder (see the
    module docstring); `use(side)` points `test_files/scratch` at that engine's folder."""

    def __init__(self, corpus: Path, sides: int = 2):
        self.root = Path(tempfile.mkdtemp(prefix="datafusion-distributed-slt-"))
        try:
            self.tree = self.root / "tree"  # stands for DataFusion's repository
            _mirror(corpus / "data", self.tree, SQLLOGICTEST_DIR)
            self.cwd = self.tree.joinpath(*SQLLOGICTEST_DIR)
            (self.cwd / "test_files").mkdir(parents=True, exist_ok=True)
            self.scratches = [self.root / f"scratch-{side}" for side in range(sides)]
            for folder in self.scratches:
                folder.mkdir()
            self.link = self.cwd / "test_files" / "scratch"
            self.use(0)
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    def use(self, side: int) -> None:
        """Point `test_files/scratch` at engine `side`'s scratch folder (an atomic link swap)."""
        staged = self.link.with_name(".scratch-link")
        with contextlib.suppress(FileNotFoundError):
            staged.unlink()
        staged.symlink_to(self.scratches[side], target_is_directory=True)
        os.replace(staged, self.link)

    def reset(self) -> None:
        """Delete what a file wrote: both scratch folders' contents and anything else."""
        for folder in self.scratches:
            _empty(folder)
        _empty(self.cwd, keep={"test_files"})
        _empty(self.cwd / "test_files", keep={"scratch"})

    @contextlib.contextmanager
    def entered(self) -> Iterator[Workspace]:
        """Work in the workspace's directory for the duration (the previous one restored)."""
        previous = os.getcwd()
        os.chdir(self.cwd)
        try:
            yield self
        finally:
            os.chdir(previous)

    def close(self) -> None:
        """Delete the workspace's folders."""
        shutil.rmtree(self.root, ignore_errors=True)


def _mirror(source: Path, target: Path, keep: Sequence[str]) -> None:
    """`target` as a folder whose entries link to those of `source`, except the folders on
    the path `keep`, made real (recursively) so that files can be added inside."""
    target.mkdir(parents=True, exist_ok=True)
    if not source.is_dir():
        return
    for entry in source.iterdir():
        if keep and entry.name == keep[0]:
            _mirror(entry, target / entry.name, keep[1:])
        else:
            (target / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())


def _empty(folder: Path, keep: frozenset[str] | set[str] = frozenset()) -> None:
    for entry in folder.iterdir():
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _engines(options: RunOptions, workers: WorkerResolver | None) -> tuple[Engine, Engine]:
    if options.mode == "roundtrip":
        return PlanEngine(), RoundtripEngine()
    return PlainEngine(), DistributedEngine(workers, options.distributed_options())


def _skipped(record: Record, reason: str) -> RecordResult:
    return RecordResult(record.file, record.line, record.kind.value, record.sql, Category.SKIPPED, reason)


def _skip_reason(record: Record) -> str | None:
    if record.kind is RecordKind.INCLUDE:
        return f"include {record.argument} matched no file"
    if record.kind is RecordKind.UNSUPPORTED:
        return f"unsupported record: {record.argument}"
    return record.skip_reason()


def run_records(
    records: Sequence[Record], reference: Engine, candidate: Engine, workspace: Workspace, timeout: float
) -> tuple[list[RecordResult], str | None]:
    """Run `records` in both engines in lockstep; returns the results and, if an engine hung,
    why the rest was skipped."""
    results: list[RecordResult] = []
    for index, record in enumerate(records):
        if record.kind is RecordKind.HALT and not record.skip_reason():
            break
        if record.kind is RecordKind.CONTROL:
            continue
        reason = _skip_reason(record)
        if reason is not None:
            results.append(_skipped(record, reason))
            continue
        workspace.use(0)
        a = reference.run(record.sql, timeout)
        workspace.use(1)
        b = candidate.run(record.sql, timeout + 15)  # its own query_timeout fires first
        resynced = record.kind is RecordKind.STATEMENT and a.ok and not b.ok and not b.hung
        if resynced:
            candidate.resync(record.sql, timeout)
        results.append(_result(record, a, b, resynced, str(workspace.tree)))
        if a.hung or b.hung:
            side = "datafusion" if a.hung else "the candidate engine"
            rest = [r for r in records[index + 1 :] if r.runnable]
            results.extend(_skipped(r, f"not run: {side} hung at line {record.line}") for r in rest)
            return results, f"{side} hung at {record.file}:{record.line}"
    return results, None


def _result(record: Record, a: Outcome, b: Outcome, resynced: bool, root: str) -> RecordResult:
    verdict = classify(record.sql, record.sort_mode, a, b)
    if verdict.category in FAILURES and b.kept is not None:
        # the round trip loses something here, and DistributedContext knows it: it runs such
        # plans on one node, from memory
        verdict = Verdict(Category.KEPT_ON_ONE_NODE, f"{b.kept}; {verdict.detail}")
    return RecordResult(
        file=record.file,
        line=record.line,
        kind=record.kind.value,
        sql=record.sql,
        category=verdict.category,
        detail=verdict.detail,
        reference_error=a.error,
        candidate_error=b.error,
        same_first_line=verdict.same_first_line,
        expected_mismatch=_checked(record, a, root),
        reference_seconds=a.seconds,
        candidate_seconds=b.seconds,
        candidate_tasks=b.tasks,
        candidate_streamed=b.streamed,
        resynced=resynced,
    )


def _checked(record: Record, outcome: Outcome, root: str) -> str | None:
    try:
        return expected_mismatch(record, outcome, root)
    except Exception as exc:  # informative only: never lose the record over it
        return f"could not check the expected text: {type(exc).__name__}: {first_line(str(exc))}"


def run_file(
    path: Path, corpus: Path, options: RunOptions, workspace: Workspace, workers: WorkerResolver | None
) -> FileResult:
    """Run one file with fresh engines; a failure of the runner itself is reported, not raised."""
    start = time.perf_counter()
    name = _display_name(path, corpus)
    try:
        records = load_slt(path, corpus)
        reference, candidate = _engines(options, workers)
        try:
            results, aborted = run_records(records, reference, candidate, workspace, options.timeout)
        finally:
            reference.close()
            candidate.close()
            workspace.reset()
    except Exception as exc:
        detail = first_line(str(exc)) or type(exc).__name__
        trace = traceback.format_exc(limit=3)
        return FileResult(name, seconds=time.perf_counter() - start, error=f"{detail}\n{trace}")
    return FileResult(name, tuple(results), time.perf_counter() - start, aborted=aborted)


def _display_name(path: Path, corpus: Path) -> str:
    try:
        return path.resolve().relative_to(corpus.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def run_files(
    paths: Sequence[Path],
    options: RunOptions,
    corpus: Path | None = None,
    on_file: Callable[[int, FileResult], None] | None = None,
) -> list[FileResult]:
    """Run `paths` one after another in one workspace (and, for "local:N", one cluster
    started for the whole run); `on_file(index, result)` is told of each finished file."""
    corpus = (corpus or default_corpus()).resolve()
    paths = [Path(p).resolve() for p in paths]  # before the working directory changes
    workspace = Workspace(corpus)
    results: list[FileResult] = []
    try:
        with workspace.entered(), contextlib.ExitStack() as stack:
            workers = None
            if options.mode == "distributed" and options.cluster.startswith("local:"):
                # started in the workspace, so workers resolve relative paths as we do
                workers = stack.enter_context(LocalCluster(int(options.cluster[6:])))
            for index, path in enumerate(paths):
                result = run_file(path, corpus, options, workspace, workers)
                results.append(result)
                if on_file is not None:
                    on_file(index, result)
    finally:
        workspace.close()
    return results
