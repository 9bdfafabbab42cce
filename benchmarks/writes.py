"""Writing TPC-H `lineitem` as Parquet: single-node DataFusion against the same COPY run
distributed, side by side, with the memory each process needed.

    python benchmarks/writes.py --sf 0.1,1 --workers 2 --iterations 3

Two writes, each a ``COPY (SELECT * FROM lineitem) TO <folder> STORED AS PARQUET``, once plain
and once ``PARTITIONED BY (l_returnflag)`` (what ``DistributedDataFrame.write_parquet(path,
partition_by=[...])`` runs), on three sides: single-node (a ``SessionContext`` with
``target_partitions = workers``), distributed over a ``LocalCluster`` of ``--workers`` worker
processes, and distributed over the embedded cluster (workers as threads of this process).
Runs are interleaved, the order alternating between iterations; every run writes into a fresh
folder, deleted afterwards, and its returned row count is checked against single-node's.

Memory (Linux only): each write runs in a fresh process (spawned for that run alone), so that
process's peak resident set (VmHWM) is that write's, with nothing left over from other runs: the
coordinator's for the distributed sides (for the embedded cluster, whose workers run inside it,
the whole write's), the whole write's for single-node. Printed beside it, the process's resident
set once its context was set up, before the write. The worker processes of the `LocalCluster`
live across runs: their peaks are reset (``/proc/<pid>/clear_refs``) before each run and summed
after it. The coordinator's peak staying the same from SF 0.1 to SF 1 shows that the written rows
never pass through it.

Time is best of ``--iterations``; CPU seconds count this process and the worker processes
(as in ``tpch.py``). Results are written as JSON to ``benchmarks/results/`` (git-ignored).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import datafusion
import pyarrow as pa
from common import (
    add_common_args,
    add_output_arg,
    cpu_seconds,
    git_commit,
    reset_peak_rss,
    result_path,
    rss_mb,
    scale_factors,
    utc_timestamp,
    write_json,
)
from datafusion import SessionConfig, SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data

SINGLE = "single"
DISTRIBUTED = "distributed"
EMBEDDED = "embedded"
MODES = (SINGLE, DISTRIBUTED, EMBEDDED)
RUN_TIMEOUT = 600  # seconds; a stuck write fails the benchmark instead of hanging it
WRITES = {
    "parquet": "COPY (SELECT * FROM lineitem) TO '{}' STORED AS PARQUET",
    "parquet partitioned": "COPY (SELECT * FROM lineitem) TO '{}' STORED AS PARQUET PARTITIONED BY (l_returnflag)",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(
        p,
        helps={
            "workers": "worker processes / embedded workers",
            "iterations": "runs of each write on each side",
        },
        sf="0.1,1",
        workers=2,
        iterations=3,
    )
    p.add_argument(
        "--bytes-per-partition",
        type=int,
        default=4 * 1024 * 1024,
        help="scanned bytes per partition (default 4 MiB, so SF 0.1 splits over the workers as SF 1 does)",
    )
    p.add_argument("--scratch", help="folder the writes go to (default: the system's temporary folder)")
    add_output_arg(p)
    args = p.parse_args(argv)
    if args.iterations < 1:
        p.error("--iterations must be at least 1")
    args.scale_factors = scale_factors(args.sf)
    return args


@dataclass(frozen=True)
class ClusterAddress:
    """What a fresh process needs to use the parent's `LocalCluster` as its own (a resolver)."""

    urls: tuple[str, ...]
    auth_token: str
    shared_spool_root: str

    def get_urls(self) -> list[str]:
        """The workers' URLs."""
        return list(self.urls)


def write_in_fresh_process(
    mode: str, data: str, copy: str, folder: str, cluster: ClusterAddress | None, args: dict
) -> dict:
    """Run one write in this (fresh) process and measure it: wall and CPU seconds (this process
    and the cluster's workers), the row count written, the write stage's task count, and this
    process's resident set before the write and at its peak (MB), setup included."""
    single = mode == SINGLE
    ctx = SessionContext(SessionConfig().with_target_partitions(args["workers"]) if single else None)
    register_tpch(ctx, data)
    if not single:
        config = DistributedConfig(
            embedded_workers=args["workers"], bytes_per_partition=args["bytes_per_partition"]
        )
        ctx = DistributedContext(ctx, workers=cluster, config=config)
    try:
        tasks = None if single else ctx.sql(copy.format(folder)).distributed_plan().stages[-1].task_count
        worker_pids = list(args["worker_pids"]) if cluster else []
        start_rss = rss_mb(os.getpid(), "VmRSS")
        cpu_start = cpu_seconds(worker_pids)
        started = time.perf_counter()
        rows = ctx.sql(copy.format(folder)).to_pylist()[0]["count"]
        seconds = time.perf_counter() - started
        cpu_end = cpu_seconds(worker_pids)
    finally:
        if not single:
            ctx.close()
    return {
        "seconds": seconds,
        "cpu_seconds": None if cpu_start is None or cpu_end is None else cpu_end - cpu_start,
        "rows": rows,
        "write_tasks": tasks,
        "coordinator_start_mb": start_rss,
        "coordinator_peak_mb": rss_mb(os.getpid()),
    }


def measured(
    mode: str, data: Path, copy: str, folder: Path, cluster: LocalCluster, args: argparse.Namespace
) -> dict:
    """One write in a fresh process (its peak memory is the write's alone), with the workers'
    summed peak resident set over the write when it runs on the worker processes."""
    pids = [p.pid for p in cluster.processes] if mode == DISTRIBUTED else []
    address = (
        ClusterAddress(tuple(cluster.get_urls()), cluster.auth_token, cluster.shared_spool_root)
        if mode == DISTRIBUTED
        else None
    )
    settings = {"workers": args.workers, "bytes_per_partition": args.bytes_per_partition, "worker_pids": pids}
    reset_peak_rss(pids)
    workers_start = sum(rss_mb(pid, "VmRSS") for pid in pids)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        job = pool.apply_async(
            write_in_fresh_process, (mode, str(data), copy, str(folder), address, settings)
        )
        result = job.get(timeout=RUN_TIMEOUT)
    workers_peak = sum(rss_mb(pid) for pid in pids)
    return {
        **result,
        "workers_start_mb": workers_start if pids else None,
        "workers_peak_mb": workers_peak if pids else None,
    }


def summary(runs: list[dict]) -> dict:
    """Best time, and the largest memory figures over the runs (the conservative reading)."""

    def largest(key: str) -> float | None:
        values = [r[key] for r in runs if r[key] is not None]
        return max(values) if values else None

    best = min(runs, key=lambda r: r["seconds"])
    return {
        "best_seconds": best["seconds"],
        "cpu_seconds_of_best": best["cpu_seconds"],
        "write_tasks": best["write_tasks"],
        **{
            key: largest(key)
            for key in ("coordinator_start_mb", "coordinator_peak_mb", "workers_start_mb", "workers_peak_mb")
        },
        "runs": runs,
    }


def run_scale_factor(sf: float, args: argparse.Namespace, cluster: LocalCluster, scratch: Path) -> dict:
    data = tpch_data(sf)
    results: dict[str, dict[str, dict]] = {}
    for name, copy in WRITES.items():
        runs: dict[str, list[dict]] = {m: [] for m in MODES}
        for i in range(args.iterations):
            for mode in MODES if i % 2 == 0 else MODES[::-1]:
                # no dot in the name: DataFusion takes a path with an extension for a single file
                label = f"sf{sf:g}-{name}-{mode}-{i}".replace(".", "_").replace(" ", "-")
                folder = scratch / label
                try:
                    runs[mode].append(measured(mode, data, copy, folder, cluster, args))
                finally:
                    shutil.rmtree(folder, ignore_errors=True)
            counts = {m: runs[m][-1]["rows"] for m in MODES}
            if len(set(counts.values())) != 1:
                raise SystemExit(f"SF {sf:g} {name}: the sides wrote different row counts: {counts}")
        results[name] = {m: summary(runs[m]) for m in MODES}
        print_rows(sf, name, results[name])
    return results


def mb(value: float | None) -> str:
    return "-" if value is None else str(round(value))  # round(-0.3) is 0, not "-0"


def print_header() -> None:
    print(
        f"{'SF':>4} {'write':<20} {'side':<12} {'tasks':>5} {'best s':>7} {'ratio':>6} {'cpu s':>6} "
        f"{'process start':>13} {'peak':>6} {'workers start':>13} {'peak':>6}"
    )


def print_rows(sf: float, name: str, result: dict) -> None:
    single = result[SINGLE]["best_seconds"]
    for mode in MODES:
        r = result[mode]
        cpu = "-" if r["cpu_seconds_of_best"] is None else f"{r['cpu_seconds_of_best']:.1f}"
        print(
            f"{sf:>4g} {name:<20} {mode:<12} {r['write_tasks'] or '-':>5} {r['best_seconds']:7.2f} "
            f"{r['best_seconds'] / single:6.2f} {cpu:>6} {mb(r['coordinator_start_mb']):>13} "
            f"{mb(r['coordinator_peak_mb']):>6} {mb(r['workers_start_mb']):>13} {mb(r['workers_peak_mb']):>6}",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not Path("/proc/self/clear_refs").exists():
        raise SystemExit("this benchmark reads and resets peak memory through /proc (Linux only)")
    for sf in args.scale_factors:
        tpch_data(sf)  # generated before anything is timed
    scratch = Path(tempfile.mkdtemp(prefix="writes-bench-", dir=args.scratch))
    results: dict[str, dict] = {}
    print(
        f"lineitem written as Parquet, best of {args.iterations}; single-node target_partitions="
        f"{args.workers}, distributed over {args.workers} worker processes and {args.workers} embedded "
        "workers; each write in a fresh process; memory in MB: that process's resident set before "
        "the write and its peak, and the worker processes' summed"
    )
    print_header()
    try:
        with LocalCluster(args.workers) as cluster:
            for sf in args.scale_factors:
                results[f"{sf:g}"] = run_scale_factor(sf, args, cluster, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result = {
        "meta": {
            "timestamp": utc_timestamp(),
            "commit": git_commit(),
            "scale_factors": args.scale_factors,
            "workers": args.workers,
            "iterations": args.iterations,
            "datafusion": datafusion.__version__,
            "pyarrow": pa.__version__,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "machine": platform.machine(),
        },
        "writes": results,
    }
    out = result_path(args.output, f"writes-w{args.workers}")
    write_json(out, result)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
