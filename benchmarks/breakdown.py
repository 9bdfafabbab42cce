"""Where does a distributed query's time go? A breakdown by phase and by stage for TPC-H queries.

Built on what the library reports to any user: the lifecycle events a handler hears (when the
query and each task started and finished) and the metrics every task sends back (its time on
the worker, its queue, its fetches, DataFusion's metrics of every node). Nothing is patched, so
it measures worker processes (the default) as well as the embedded cluster (``--embedded``).

Per query, averaged over ``--iterations`` runs after a warm-up, next to single-node DataFusion
on the same data (every answer checked against it):

- before the first task: parsing, planning and cutting the plan into stages;
- stages running: wall time while some task runs (a task from its dispatch to its answer);
  of which no task running: the coordinator's turn-arounds between dependent stages;
- after the last task: the result handed to the caller, the query released;
- per stage: its time from first dispatch to last answer, its tasks, the slowest task's time on
  its worker and the longest queue (round trip minus time on the worker);
- task thread-seconds: time on workers, queues, input fetches and DataFusion's own
  ``elapsed_compute`` of the operators (decoding Parquet and exchange files is outside it).

    python benchmarks/breakdown.py --queries 18,21,9 --iterations 3
    python benchmarks/breakdown.py --queries 10 --embedded
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

from common import add_common_args, query_numbers, timed
from datafusion import SessionConfig, SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.events.handlers import DistributedHandler, Event, EventKind
from datafusion_distributed.metrics.task_metrics import NodeMetrics
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data, tpch_query

NANOS = 1e-9


@dataclass
class QueryEvents:
    """What one query's handler heard: its start and end, and each task attempt's window."""

    started: float | None = None
    finished: float | None = None
    task_started: dict[tuple[int, int, int], float] = field(default_factory=dict)
    windows: list[tuple[float, float]] = field(default_factory=list)
    reports: list = field(default_factory=list)  # TaskReport of every finished task


class Recorder(DistributedHandler):
    """Keeps every query's events (handlers are called from the coordinator's threads)."""

    def __init__(self) -> None:
        self.queries: dict[str, QueryEvents] = defaultdict(QueryEvents)
        self._lock = threading.Lock()

    def on_event(self, event: Event) -> None:
        with self._lock:
            query = self.queries[event.query_id]
            key = (event.stage, event.task, event.attempt)
            if event.kind is EventKind.QUERY_STARTED:
                query.started = event.at
            elif event.kind is EventKind.QUERY_FINISHED:
                query.finished = event.at
            elif event.kind is EventKind.TASK_STARTED:
                query.task_started[key] = event.at
            elif event.kind is EventKind.TASK_FINISHED:
                report = event.metrics
                # the head stage runs in the coordinator and is only reported finished
                start = query.task_started.get(key, event.at - report.wall_seconds)
                query.windows.append((start, event.at))
                query.reports.append(report)


def covered(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of `intervals`."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def compute_seconds(plan: NodeMetrics | None) -> float:
    """DataFusion's `elapsed_compute` summed over a plan's nodes."""
    return 0.0 if plan is None else sum(node.get("elapsed_compute") for node in plan.walk()) * NANOS


class StageTimes(NamedTuple):
    """One stage in one run: first dispatch to last answer, its tasks, the slowest task's time
    on its worker and the longest queue."""

    seconds: float
    tasks: int
    slowest: float
    longest_queue: float


@dataclass
class RunBreakdown:
    """One run's phases, in seconds (thread-seconds for the task totals)."""

    wall: float
    before: float = 0.0
    running: float = 0.0
    gaps: float = 0.0
    after: float = 0.0
    stages: dict[int, StageTimes] = field(default_factory=dict)
    on_workers: float = 0.0
    queues: float = 0.0
    fetches: float = 0.0
    compute: float = 0.0

    @classmethod
    def of(cls, called: float, returned: float, events: QueryEvents | None) -> RunBreakdown:
        run = cls(returned - called)
        if events is None or events.started is None or events.finished is None:
            return run  # no events were recorded for this run
        run.before = events.started - called
        run.running = covered(events.windows)
        run.gaps = max(0.0, events.finished - events.started - run.running)
        run.after = returned - events.finished
        by_stage = defaultdict(list)
        for (start, stop), report in zip(events.windows, events.reports, strict=True):
            by_stage[report.stage].append((start, stop, report))
        for stage, tasks in sorted(by_stage.items()):
            span = max(stop for _, stop, _ in tasks) - min(start for start, _, _ in tasks)
            run.stages[stage] = StageTimes(
                span,
                len(tasks),
                max(r.wall_seconds for _, _, r in tasks),
                max(r.queue_seconds for _, _, r in tasks),
            )
        reports = events.reports
        run.on_workers = sum(r.wall_seconds for r in reports)
        run.queues = sum(r.queue_seconds for r in reports)
        run.fetches = sum(i.fetch_wall_seconds for r in reports for i in r.inputs)
        run.compute = sum(compute_seconds(r.metrics.plan) for r in reports if r.metrics)
        return run


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def print_breakdown(n: int, where: str, runs: list[RunBreakdown], single: list[float]) -> None:
    """One query's phases and stages, averaged over its runs."""

    def row(label: str, seconds: float) -> None:
        print(f"  {label:<58} {seconds:8.3f}")

    print(f"q{n:02d}: distributed {mean([r.wall for r in runs]):.3f}s ({where}), "
          f"single-node {mean(single):.3f}s; per run, seconds:")  # fmt: skip
    if not runs[0].stages:
        print("  no events were recorded\n")
        return
    row("before the first task (parse, plan, cut into stages)", mean([r.before for r in runs]))
    row("stages running (some task running)", mean([r.running for r in runs]))
    row("  of which no task running (coordinator turn-arounds)", mean([r.gaps for r in runs]))
    row("after the last task (result to the caller, release)", mean([r.after for r in runs]))
    print(f"  {'stage':<8}{'seconds':>10}{'tasks':>7}{'slowest task':>14}{'longest queue':>15}")
    for stage in sorted(runs[0].stages):
        cells = [r.stages[stage] for r in runs if stage in r.stages]
        seconds, slowest = mean([c.seconds for c in cells]), mean([c.slowest for c in cells])
        queue = mean([c.longest_queue for c in cells])
        print(f"  {stage:<8}{seconds:>10.3f}{cells[0].tasks:>7}{slowest:>14.3f}{queue:>15.3f}")
    row("task thread-seconds: on workers", mean([r.on_workers for r in runs]))
    row("  queues (dispatch and answer, outside the worker)", mean([r.queues for r in runs]))
    row("  fetching inputs (wall per task)", mean([r.fetches for r in runs]))
    row("  DataFusion operators' elapsed_compute", mean([r.compute for r in runs]))
    print(flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(p, sf=1.0, workers=2, partitions_per_task=1, queries="18,21,9", iterations=3)
    p.add_argument(
        "--embedded", action="store_true", help="the in-process cluster instead of worker processes"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data = tpch_data(args.sf, 4)
    single = SessionContext(SessionConfig().with_target_partitions(args.workers * args.partitions_per_task))
    register_tpch(single, data)
    ctx = SessionContext()
    register_tpch(ctx, data)
    recorder = Recorder()
    config = DistributedConfig(partitions_per_task=args.partitions_per_task, embedded_workers=args.workers)
    cluster = None if args.embedded else LocalCluster(args.workers)
    where = "embedded" if args.embedded else f"{args.workers} worker processes"
    try:
        with DistributedContext(ctx, cluster, config=config, handlers=[recorder]) as dctx:
            for n in query_numbers(args.queries):
                sql = tpch_query(n)
                expected = single.sql(sql).to_arrow_table()
                assert_tables_equal(dctx.sql(sql).to_arrow_table(), expected, sql=sql)  # warm-up
                runs, single_times = [], []
                for _ in range(args.iterations):
                    seconds, _ = timed(lambda sql=sql: single.sql(sql).to_arrow_table())
                    single_times.append(seconds)
                    df = dctx.sql(sql)
                    called = time.time()
                    actual = df.to_arrow_table()
                    returned = time.time()
                    assert_tables_equal(actual, expected, sql=sql)
                    events = recorder.queries.get(df.metrics.query_id) if df.metrics else None
                    runs.append(RunBreakdown.of(called, returned, events))
                print_breakdown(n, where, runs, single_times)
    finally:
        if cluster is not None:
            cluster.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
