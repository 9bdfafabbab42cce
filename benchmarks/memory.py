"""Peak memory of worker processes on one query, with and without a memory limit.

    python benchmarks/memory.py --sf 1 --query 18 --workers 2 --memory-limit-mb 256
    python benchmarks/memory.py --sql "SELECT count(*) FROM (SELECT l_comment FROM lineitem GROUP BY 1)"

Each worker's peak resident set (VmHWM from /proc, Linux only) is read after the query; the
answer is checked against single-node DataFusion. A worker with `--memory-limit-bytes` runs its
tasks under DataFusion's fair spill pool, so operators that can spill (sorts, aggregations,
joins' build sides where supported) spill to disk instead of growing, and task outputs stream
to the spool batch by batch. Printed next to the peaks: each worker's resident set once started
(before any query) and the bytes the query's stages wrote to the spools, which a stage would hold
in memory if its output were not streamed to disk.

For scale, the query also runs on single-node DataFusion in a fresh process, without a limit
and with the same pool as one worker: a build side that does not fit fails there with
DataFusion's "Resources exhausted" where each worker, holding part of the data, may fit.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time

from common import add_common_args, rss_mb
from datafusion import SessionConfig, SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.runtime.session import memory_limited_runtime
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data, tpch_query


def run(args: argparse.Namespace, sql: str, limit_mb: int | None) -> dict:
    path = tpch_data(args.sf)
    worker_args = ["--memory-limit-bytes", str(limit_mb * 1024 * 1024)] if limit_mb else []
    with LocalCluster(args.workers, worker_args=worker_args) as cluster:
        idle = [rss_mb(p.pid, "VmRSS") for p in cluster.processes]
        ctx = SessionContext()
        register_tpch(ctx, path)
        config = DistributedConfig(partitions_per_task=args.partitions_per_task)
        with DistributedContext(ctx, workers=cluster, config=config) as dctx:
            started = time.perf_counter()
            df = dctx.sql(sql)
            got = df.to_arrow_table()
            seconds = time.perf_counter() - started
            plan = df.distributed_plan()
            spooled = sum(df.metrics.stage(s.id).bytes for s in plan.stages[:-1])
        single = SessionContext()
        register_tpch(single, path)
        assert_tables_equal(got, single.sql(sql).to_arrow_table(), sql=sql)
        peaks = [rss_mb(p.pid) for p in cluster.processes]
        return {"seconds": seconds, "idle": idle, "peaks": peaks, "spooled_mb": spooled / 1e6}


SINGLE_NODE_TIMEOUT = 600  # seconds; a stuck run fails the benchmark instead of hanging it


def single_node_peak(sf: float, sql: str, partitions: int, limit_mb: int | None) -> tuple[float, float, str]:
    """RSS at start and peak RSS (MB) of a fresh process running `sql` on single-node
    DataFusion, with a memory pool of `limit_mb` if given, and its error ("" if it succeeded)."""
    start = rss_mb(os.getpid(), "VmRSS")
    runtime = memory_limited_runtime(limit_mb * 1024 * 1024) if limit_mb else None
    ctx = SessionContext(SessionConfig().with_target_partitions(partitions), runtime)
    register_tpch(ctx, tpch_data(sf))
    try:
        ctx.sql(sql).collect()
        error = ""
    except Exception as exc:  # DataFusion raises plain Exception, e.g. "Resources exhausted"
        error = str(exc).splitlines()[0][:160]
    return start, rss_mb(os.getpid()), error


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(parser, sf=1.0, workers=2, partitions_per_task=1)
    parser.add_argument("--query", type=int, default=18)
    parser.add_argument("--sql", help="run this query (over the TPC-H tables) instead of --query")
    parser.add_argument("--memory-limit-mb", type=int, default=256)
    args = parser.parse_args()
    sql = args.sql or tpch_query(args.query)
    name = "query" if args.sql else f"q{args.query:02d}"
    for limit in (None, args.memory_limit_mb):
        r = run(args, sql, limit)
        label = f"{limit} MiB pool" if limit else "no limit"
        print(
            f"{name} SF {args.sf:g}, {label:>12}: {r['seconds']:6.2f}s, "
            f"{r['spooled_mb']:.0f} MB written to spools, worker RSS at start "
            + ", ".join(f"{m:.0f}" for m in r["idle"])
            + " MB, peak "
            + ", ".join(f"{m:.0f}" for m in r["peaks"])
            + " MB"
        )
    # For scale: the whole query in one process, on as many partitions as the cluster has.
    partitions = args.workers * args.partitions_per_task
    for limit in (None, args.memory_limit_mb):
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            job = pool.apply_async(single_node_peak, (args.sf, sql, partitions, limit))
            start, peak, error = job.get(timeout=SINGLE_NODE_TIMEOUT)
        label = f"{limit} MiB pool" if limit else "no limit"
        outcome = f"FAILED: {error}" if error else f"peak {peak:.0f} MB"
        print(
            f"{name} SF {args.sf:g}, single-node DataFusion ({partitions} partitions), {label}: "
            f"RSS at start {start:.0f} MB, {outcome}"
        )


if __name__ == "__main__":
    main()
