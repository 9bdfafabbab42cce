"""Peak memory of worker processes on one query, with and without a memory limit.

    python benchmarks/memory.py --sf 1 --query 18 --workers 2 --memory-limit-mb 256

Each worker's peak resident set (VmHWM from /proc, Linux only) is read after the query; the
answer is checked against single-node DataFusion. A worker with `--memory-limit-bytes` runs its
tasks under DataFusion's fair spill pool, so operators that can spill (sorts, aggregations,
joins' build sides where supported) spill to disk instead of growing, and task outputs stream
to the spool batch by batch.
"""

from __future__ import annotations

import argparse
import time

from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data, tpch_query


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc status")


def run(args: argparse.Namespace, limit_mb: int | None) -> tuple[list[float], float]:
    path = tpch_data(args.sf)
    worker_args = ["--memory-limit-bytes", str(limit_mb * 1024 * 1024)] if limit_mb else []
    with LocalCluster(args.workers, worker_args=worker_args) as cluster:
        ctx = SessionContext()
        register_tpch(ctx, path)
        config = DistributedConfig(partitions_per_task=args.partitions_per_task)
        with DistributedContext(ctx, workers=cluster, config=config) as dctx:
            sql = tpch_query(args.query)
            started = time.perf_counter()
            got = dctx.sql(sql).to_arrow_table()
            seconds = time.perf_counter() - started
        single = SessionContext()
        register_tpch(single, path)
        assert_tables_equal(got, single.sql(sql).to_arrow_table(), sql=sql)
        return [peak_rss_mb(p.pid) for p in cluster.processes], seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--query", type=int, default=18)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--partitions-per-task", type=int, default=1)
    parser.add_argument("--memory-limit-mb", type=int, default=256)
    args = parser.parse_args()
    for limit in (None, args.memory_limit_mb):
        peaks, seconds = run(args, limit)
        label = f"{limit} MiB pool" if limit else "no limit"
        print(
            f"q{args.query:02d} SF {args.sf:g}, {label:>12}: {seconds:6.2f}s, worker peak RSS "
            + ", ".join(f"{p:.0f} MB" for p in peaks)
        )


if __name__ == "__main__":
    main()
