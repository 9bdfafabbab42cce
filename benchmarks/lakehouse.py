"""TPC-H `lineitem` as a Delta Lake table: single-node against distributed, side by side.

    python benchmarks/lakehouse.py --sf 1 --workers 2 --iterations 3

The table is written once by deltalake itself (cached beside the TPC-H data), partitioned by
``l_returnflag``, in ``--parts`` appends (so ``--parts`` files per partition). Three sides run each query in turn, the order
alternating between iterations: single-node DataFusion over deltalake's own table provider (the
format's reader), single-node DataFusion over the view ``register_delta`` makes (the same
scans, in one process), and the view distributed over a ``LocalCluster`` of ``--workers`` worker
processes, each pinned to a core of its own (``--no-pin`` to share). Every answer is checked
against the provider's. It prints the best time of each side with its ratio to the provider's,
the most tasks of a stage of the distributed plan, how many scans it reads (a folder whose
Parquet files are all live is one scan; a filter on the partition column drops the others),
and how many files the files' statistics let it skip.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import pyarrow.dataset as ds
from common import add_common_args, add_pin_arg, timed, worker_cores
from datafusion import SessionConfig, SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.api.delta import load_delta, register_delta
from datafusion_distributed.distributed_planner.file_pruning import TableStatistics
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.tpch import tpch_data

QUERIES = {
    "q1 (grouped)": (
        "SELECT l_returnflag, l_linestatus, sum(l_quantity) AS qty, sum(l_extendedprice * (1 - l_discount)) AS "
        "revenue, avg(l_discount) AS disc, count(*) AS n FROM lineitem WHERE l_shipdate <= DATE '1998-09-02' "
        "GROUP BY 1, 2 ORDER BY 1, 2"
    ),
    "q6 (filtered sum)": (
        "SELECT sum(l_extendedprice * l_discount) AS revenue FROM lineitem WHERE l_shipdate >= DATE '1994-01-01' "
        "AND l_shipdate < DATE '1995-01-01' AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24"
    ),
    "one partition": "SELECT l_linestatus, count(*) AS n, sum(l_quantity) AS qty FROM lineitem WHERE l_returnflag = 'R' GROUP BY 1 ORDER BY 1",
    # lineitem is written in order of l_orderkey, one range per append: file statistics prune
    "order key range": (
        "SELECT l_returnflag, count(*) AS n, sum(l_quantity) AS qty FROM lineitem "
        "WHERE l_orderkey BETWEEN 1000000 AND 1100000 GROUP BY 1 ORDER BY 1"
    ),
}
PROVIDER, VIEW, DISTRIBUTED = "deltalake provider", "register_delta, one node", "register_delta, distributed"
SIDES = (PROVIDER, VIEW, DISTRIBUTED)


def delta_lineitem(sf: float, parts: int) -> str:
    """The Delta table of TPC-H lineitem at `sf`, written by deltalake on first use."""
    from deltalake import write_deltalake

    data = tpch_data(sf, parts)
    table = Path(data) / f"lineitem_delta_p{parts}"
    if not (table / "_delta_log").exists():
        shutil.rmtree(table, ignore_errors=True)
        rows = ds.dataset(str(Path(data) / "lineitem")).to_table()
        chunk = -(-rows.num_rows // parts)
        for k in range(parts):  # one append per chunk: `parts` files for each of the 3 flags
            write_deltalake(
                str(table), rows.slice(k * chunk, chunk), partition_by=["l_returnflag"], mode="append"
            )
    return str(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(parser, sf=1.0, parts=4, workers=2, iterations=3, warmup=1)
    add_pin_arg(parser)
    args = parser.parse_args(argv)
    path = delta_lineitem(args.sf, args.parts)
    snapshot = load_delta(path, None, None)
    provider = SessionContext(SessionConfig().with_target_partitions(args.workers))
    provider.register_table("lineitem", snapshot)
    view = SessionContext(SessionConfig().with_target_partitions(args.workers))
    files = register_delta(view, "lineitem", snapshot, TableStatistics()).files
    print(
        f"lineitem at SF {args.sf}: a Delta table of {files} files, version {snapshot.version()}", flush=True
    )
    with LocalCluster(args.workers, worker_cpus=worker_cores(args.workers, args.pin)) as cluster:
        dctx = DistributedContext(workers=cluster, config=DistributedConfig(partitions_per_task=1))
        try:
            dctx.register_delta("lineitem", snapshot)
            for name, sql in QUERIES.items():
                expected = provider.sql(sql).to_arrow_table()
                plan = dctx.sql(sql).distributed_plan()
                scans = {n.line for s in plan.stages for n in s.root.walk() if n.name == "DataSourceExec"}
                tasks = max(s.task_count for s in plan.stages)
                runs: dict[str, list[float]] = {side: [] for side in SIDES}
                for i in range(args.warmup + args.iterations):
                    for side in SIDES if i % 2 == 0 else SIDES[::-1]:
                        ctx = {PROVIDER: provider, VIEW: view}.get(side, dctx)
                        took, got = timed(lambda: ctx.sql(sql).to_arrow_table())  # noqa: B023
                        assert_tables_equal(got, expected, sql=sql)
                        if i >= args.warmup:
                            runs[side].append(took)
                best = {side: min(times) for side, times in runs.items()}
                ratios = "  ".join(
                    f"{side} {best[side]:.3f}s ({best[side] / best[PROVIDER]:.2f}x)" for side in SIDES
                )
                print(
                    f"  {name:<18} {ratios}  scans {len(scans)} (of a table of {files} files), tasks {tasks}, "
                    f"{'; '.join(plan.pruned) or 'no file statistics used'}",
                    flush=True,
                )
        finally:
            dctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
