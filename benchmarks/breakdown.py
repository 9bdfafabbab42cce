"""Where does a distributed query's time go? A breakdown by phase for chosen TPC-H queries.

Runs each query over the embedded cluster (workers are threads of this process, so every phase
can be timed from here) with timers wrapped around the runtime's phases:

- planning: DataFusion's physical plan and ``plan_stages``
- message encode / decode: RunTask / TaskResult JSON (plan bytes base64-encoded)
- plan rebuild: splicing inputs into a task's plan bytes and ``ExecutionPlan.from_bytes``
- session: building a task's SessionContext
- fetch: ``do_get`` of inputs from other workers into local files (workers and head)
- DataFusion execution: time spent pulling batches from DataFusion streams (includes reading
  Parquet and exchange inputs, and all operators)
- spool write: the rest of writing a task's output partitions (Arrow IPC encoding, lz4, disk)
- scheduling gaps: wall time while stages run during which no task runs on any worker
  (coordinator turnaround between dependent stages and RPC latency)

Phases overlap (tasks and partitions run in parallel), so phase times are thread-seconds; the
wall time and the single-node time of the same query are printed next to them.

    python benchmarks/breakdown.py --queries 18,21,9 --iterations 3

For a sampling profile of the worker processes instead, run ``py-spy`` (``pip install py-spy``)
over ``benchmarks/tpch.py`` with ``--subprocesses``; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import sys
import threading
import time

from datafusion import SessionConfig, SessionContext

import datafusion_distributed.coordinator.context as context_mod
import datafusion_distributed.coordinator.scheduler as scheduler_mod
import datafusion_distributed.execution_plans.task as task_mod
import datafusion_distributed.protocol.flight as flight_mod
import datafusion_distributed.worker.flight_worker as worker_mod
from datafusion_distributed import DistributedConfig, DistributedContext
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data, tpch_query

_lock = threading.Lock()
totals: collections.Counter[str] = collections.Counter()
task_intervals: list[tuple[float, float]] = []
stage_windows: list[tuple[float, float]] = []
_local = threading.local()


def add(name: str, seconds: float) -> None:
    with _lock:
        totals[name] += seconds


@contextlib.contextmanager
def timer(name: str):
    start = time.perf_counter()
    try:
        yield
    finally:
        add(name, time.perf_counter() - start)


def wrap(module, attr: str, name: str) -> None:
    """Time every call of `module.attr` under `name` (skipped if the attribute is gone)."""
    original = getattr(module, attr, None)
    if original is None:
        print(f"note: {module.__name__}.{attr} not found; '{name}' is not measured", file=sys.stderr)
        return

    def timed(*args, **kwargs):
        with timer(name):
            return original(*args, **kwargs)

    setattr(module, attr, timed)


def install() -> None:
    wrap(context_mod.DistributedContext, "distributed_plan", "planning (physical plan + plan_stages)")
    wrap(flight_mod, "encode", "message encode (coordinator)")
    wrap(worker_mod, "decode_run_task", "message decode (worker)")
    wrap(worker_mod, "encode", "message encode (worker)")
    wrap(worker_mod, "prepare_task_plan", "plan rebuild: splice + from_bytes (workers)")
    wrap(scheduler_mod, "prepare_task_plan", "plan rebuild: splice + from_bytes (head)")
    wrap(worker_mod, "task_session", "session build (workers)")
    wrap(worker_mod, "resolve_inputs", "fetch inputs (workers, wall per task)")
    wrap(scheduler_mod.QueryRun, "_fetch", "fetch inputs (head, per file)")

    original_stream = task_mod.stream_partition

    def stream_partition(ctx, plan, partition):
        where = getattr(_local, "where", "head")
        iterator = iter(original_stream(ctx, plan, partition))
        while True:
            start = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                add(f"DataFusion execution ({where})", time.perf_counter() - start)
                return
            add(f"DataFusion execution ({where})", time.perf_counter() - start)
            yield batch

    task_mod.stream_partition = stream_partition
    scheduler_mod.stream_partition = stream_partition

    original_write = task_mod._write_partition

    def write_partition(*args, **kwargs):
        _local.where = "workers"
        start = time.perf_counter()
        try:
            return original_write(*args, **kwargs)
        finally:
            add("output partitions (workers, total)", time.perf_counter() - start)
            _local.where = "head"

    task_mod._write_partition = write_partition

    original_run_task = worker_mod.FlightWorker._run_task

    def run_task(self, message):
        start = time.perf_counter()
        try:
            return original_run_task(self, message)
        finally:
            end = time.perf_counter()
            add("tasks (workers, total)", end - start)
            with _lock:
                task_intervals.append((start, end))

    worker_mod.FlightWorker._run_task = run_task

    original_run_stages = scheduler_mod.QueryRun.run_stages

    def run_stages(self, stages):
        start = time.perf_counter()
        try:
            return original_run_stages(self, stages)
        finally:
            with _lock:
                stage_windows.append((start, time.perf_counter()))

    scheduler_mod.QueryRun.run_stages = run_stages


def uncovered(windows: list[tuple[float, float]], intervals: list[tuple[float, float]]) -> float:
    """Time inside `windows` covered by none of `intervals`."""
    gaps = 0.0
    for w_start, w_end in windows:
        cursor = w_start
        for start, end in sorted(intervals):
            if end <= cursor or start >= w_end:
                continue
            if start > cursor:
                gaps += start - cursor
            cursor = max(cursor, min(end, w_end))
        gaps += max(0.0, w_end - cursor)
    return gaps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sf", type=float, default=1.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--partitions-per-task", type=int, default=1)
    p.add_argument("--queries", default="18,21,9")
    p.add_argument("--iterations", type=int, default=3)
    args = p.parse_args(argv)

    data = tpch_data(args.sf, 4)
    single = SessionContext(SessionConfig().with_target_partitions(args.workers * args.partitions_per_task))
    register_tpch(single, data)
    ctx = SessionContext()
    register_tpch(ctx, data)
    config = DistributedConfig(partitions_per_task=args.partitions_per_task, embedded_workers=args.workers)
    install()
    with DistributedContext(ctx, config=config) as dctx:
        for n in (int(q) for q in args.queries.split(",")):
            sql = tpch_query(n)
            expected = single.sql(sql).to_arrow_table()
            assert_tables_equal(dctx.sql(sql).to_arrow_table(), expected, sql=sql)  # warm-up
            single_times, wall = [], 0.0
            totals.clear()
            task_intervals.clear()
            stage_windows.clear()
            for _ in range(args.iterations):
                start = time.perf_counter()
                single.sql(sql).to_arrow_table()
                single_times.append(time.perf_counter() - start)
                start = time.perf_counter()
                actual = dctx.sql(sql).to_arrow_table()
                wall += time.perf_counter() - start
            assert_tables_equal(actual, expected, sql=sql)
            k = args.iterations
            gaps = uncovered(stage_windows, task_intervals)
            stage_wall = sum(e - s for s, e in stage_windows)
            print(
                f"q{n:02d}: distributed wall {wall / k:.3f}s (embedded), single-node "
                f"{sum(single_times) / k:.3f}s; per run:"
            )
            print(f"  {'stages running (wall)':<48} {stage_wall / k:8.3f}")
            print(f"  {'  of which no task running (scheduling gaps)':<48} {gaps / k:8.3f}")
            out_total = totals.pop("output partitions (workers, total)", 0.0)
            df_workers = totals.get("DataFusion execution (workers)", 0.0)
            totals["spool write: IPC encode (+ codec) + disk (workers)"] = max(0.0, out_total - df_workers)
            for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
                print(f"  {name:<48} {seconds / k:8.3f}")
            print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
