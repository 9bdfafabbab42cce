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

Memory (Linux only): before each run the peak resident set (VmHWM) of this process and of the
worker processes is reset (``/proc/<pid>/clear_refs``), so each run reports its own peaks: this
process's (the coordinator's, or the whole write for single-node and the embedded cluster,
whose workers run inside it) and the workers' summed. "growth" is a peak minus the resident set
at the start of the run: what the write itself added. The coordinator's growth staying the same
from SF 0.1 to SF 1 shows that the written rows never pass through it.

Time is best of ``--iterations``; CPU seconds count this process and the worker processes
(as in ``tpch.py``). Results are written as JSON to ``benchmarks/results/`` (git-ignored).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import datafusion
import pyarrow as pa
from datafusion import SessionConfig, SessionContext
from memory import rss_mb
from tpch import RESULTS_DIR, cpu_seconds, git_commit

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data

SINGLE = "single"
DISTRIBUTED = "distributed"
EMBEDDED = "embedded"
MODES = (SINGLE, DISTRIBUTED, EMBEDDED)
WRITES = {
    "parquet": "COPY (SELECT * FROM lineitem) TO '{}' STORED AS PARQUET",
    "parquet partitioned": "COPY (SELECT * FROM lineitem) TO '{}' STORED AS PARQUET PARTITIONED BY (l_returnflag)",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sf", default="0.1,1", help="comma-separated TPC-H scale factors (default 0.1,1)")
    p.add_argument("--workers", type=int, default=2, help="worker processes / embedded workers (default 2)")
    p.add_argument("--iterations", type=int, default=3, help="runs of each write on each side (default 3)")
    p.add_argument(
        "--bytes-per-partition",
        type=int,
        default=4 * 1024 * 1024,
        help="scanned bytes per partition (default 4 MiB, so SF 0.1 splits over the workers as SF 1 does)",
    )
    p.add_argument("--scratch", help="folder the writes go to (default: the system's temporary folder)")
    p.add_argument("--output", metavar="FILE.json", help="where to write the result JSON")
    args = p.parse_args(argv)
    if args.iterations < 1:
        p.error("--iterations must be at least 1")
    try:
        args.scale_factors = [float(s) for s in args.sf.split(",") if s.strip()]
    except ValueError:
        p.error(f"--sf takes comma-separated numbers, got {args.sf!r}")
    return args


def reset_peak_rss(pids: list[int]) -> None:
    """Start the peak resident set (VmHWM) of each process over from its current size."""
    for pid in pids:
        with open(f"/proc/{pid}/clear_refs", "w") as refs:
            refs.write("5")


def measured(write: Callable[[], int], worker_pids: list[int]) -> dict:
    """Run `write` and measure it: wall and CPU seconds, and the peak and growth (MB) of this
    process's and the workers' resident sets; plus the row count it returned."""
    me = os.getpid()
    reset_peak_rss([me, *worker_pids])
    start_rss = rss_mb(me, "VmRSS")
    workers_start = sum(rss_mb(pid, "VmRSS") for pid in worker_pids)
    cpu_start = cpu_seconds(worker_pids)
    started = time.perf_counter()
    rows = write()
    seconds = time.perf_counter() - started
    cpu_end = cpu_seconds(worker_pids)
    peak = rss_mb(me)
    workers_peak = sum(rss_mb(pid) for pid in worker_pids)
    return {
        "seconds": seconds,
        "cpu_seconds": None if cpu_start is None or cpu_end is None else cpu_end - cpu_start,
        "rows": rows,
        "coordinator_peak_mb": peak,
        "coordinator_growth_mb": peak - start_rss,
        "workers_peak_mb": workers_peak if worker_pids else None,
        "workers_growth_mb": workers_peak - workers_start if worker_pids else None,
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
        **{
            key: largest(key)
            for key in (
                "coordinator_peak_mb",
                "coordinator_growth_mb",
                "workers_peak_mb",
                "workers_growth_mb",
            )
        },
        "runs": runs,
    }


def run_scale_factor(sf: float, args: argparse.Namespace, cluster: LocalCluster, scratch: Path) -> dict:
    data = tpch_data(sf)
    single = SessionContext(SessionConfig().with_target_partitions(args.workers))
    register_tpch(single, data)
    contexts = {}
    for mode, workers in ((DISTRIBUTED, cluster), (EMBEDDED, None)):
        ctx = SessionContext()
        register_tpch(ctx, data)
        contexts[mode] = DistributedContext(
            ctx,
            workers=workers,
            config=DistributedConfig(
                embedded_workers=args.workers, bytes_per_partition=args.bytes_per_partition
            ),
        )
    run = {SINGLE: single, **contexts}
    pids = {SINGLE: [], DISTRIBUTED: [p.pid for p in cluster.processes], EMBEDDED: []}
    results: dict[str, dict[str, dict]] = {}
    try:
        for name, copy in WRITES.items():
            runs: dict[str, list[dict]] = {m: [] for m in MODES}
            tasks = {
                m: contexts[m].sql(copy.format(scratch / "planned")).distributed_plan().stages[-1].task_count
                for m in contexts
            }

            def write(ctx: SessionContext | DistributedContext, folder: Path, copy: str = copy) -> int:
                return ctx.sql(copy.format(folder)).to_pylist()[0]["count"]

            for i in range(args.iterations):
                for mode in MODES if i % 2 == 0 else MODES[::-1]:
                    folder = scratch / f"sf{sf:g}-{name.replace(' ', '-')}-{mode}-{i}"
                    try:
                        runs[mode].append(measured(lambda c=run[mode], f=folder: write(c, f), pids[mode]))
                    finally:
                        shutil.rmtree(folder, ignore_errors=True)
                counts = {m: runs[m][-1]["rows"] for m in MODES}
                if len(set(counts.values())) != 1:
                    raise SystemExit(f"SF {sf:g} {name}: the sides wrote different row counts: {counts}")
            results[name] = {m: {**summary(runs[m]), "write_tasks": tasks.get(m)} for m in MODES}
            print_rows(sf, name, results[name])
    finally:
        for dctx in contexts.values():
            dctx.close()
    return results


def mb(value: float | None) -> str:
    return "-" if value is None else str(round(value))  # round(-0.3) is 0, not "-0"


def print_header() -> None:
    print(
        f"{'SF':>4} {'write':<20} {'side':<12} {'tasks':>5} {'best s':>7} {'ratio':>6} {'cpu s':>6} "
        f"{'coord peak':>10} {'growth':>7} {'workers peak':>12} {'growth':>7}"
    )


def print_rows(sf: float, name: str, result: dict) -> None:
    single = result[SINGLE]["best_seconds"]
    for mode in MODES:
        r = result[mode]
        cpu = "-" if r["cpu_seconds_of_best"] is None else f"{r['cpu_seconds_of_best']:.1f}"
        print(
            f"{sf:>4g} {name:<20} {mode:<12} {r['write_tasks'] or '-':>5} {r['best_seconds']:7.2f} {r['best_seconds'] / single:6.2f} "
            f"{cpu:>6} {mb(r['coordinator_peak_mb']):>10} {mb(r['coordinator_growth_mb']):>7} "
            f"{mb(r['workers_peak_mb']):>12} {mb(r['workers_growth_mb']):>7}",
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
        "workers; memory in MB (peak resident set; growth = peak minus the resident set at the start)"
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
            "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
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
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.output) if args.output else RESULTS_DIR / f"writes-w{args.workers}-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
