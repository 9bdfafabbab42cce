"""Broadcast thresholds side by side: TPC-H over one cluster with two join-threshold settings.

    python benchmarks/broadcast_joins.py --sf 1 --queries 3,5,18,21 [--rows 2000000 --bytes 67108864]
    python benchmarks/broadcast_joins.py --baseline 500000,8388608 --rows 2000000 --bytes 67108864

Runs each query, interleaved and 3 times, on single-node DataFusion and on two
DistributedContexts sharing one LocalCluster: one with the `--baseline` thresholds for
collecting a hash join's smaller side (default DataFusion's own: 131072 rows, 1 MiB) and one
with `--rows` / `--bytes` per copy (by default what DistributedConfig's broadcast settings
give for `--workers`). Every answer is checked against single-node;
medians are printed with the stage counts of both plans.
"""

from __future__ import annotations

import argparse

from common import add_common_args, query_numbers, timed
from datafusion import SessionConfig, SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data, tpch_query

DATAFUSION_DEFAULTS = (131072, 1024 * 1024)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(parser, sf=1.0, workers=2, queries="", iterations=3)
    parser.add_argument(
        "--rows", type=int, help="per-copy row threshold (default: the config's for --workers)"
    )
    parser.add_argument(
        "--bytes", type=int, help="per-copy byte threshold (default: the config's for --workers)"
    )
    parser.add_argument(
        "--baseline",
        default=",".join(map(str, DATAFUSION_DEFAULTS)),
        help="ROWS,BYTES thresholds to compare against (default DataFusion's)",
    )
    args = parser.parse_args()
    default_rows, default_bytes = DistributedConfig().planner(args.workers).broadcast_thresholds()
    args.rows = args.rows if args.rows is not None else default_rows
    args.bytes = args.bytes if args.bytes is not None else default_bytes
    queries = query_numbers(args.queries)
    path = tpch_data(args.sf)
    single = SessionContext(SessionConfig().with_target_partitions(args.workers))
    register_tpch(single, path)
    baseline_rows, baseline_bytes = (int(x) for x in args.baseline.split(","))
    variants = {"baseline": (baseline_rows, baseline_bytes), "broadcast": (args.rows, args.bytes)}
    totals = dict.fromkeys(["single", *variants], 0.0)
    with LocalCluster(args.workers) as cluster:
        contexts = {}
        for name, (rows, size) in variants.items():
            ctx = SessionContext()
            register_tpch(ctx, path)
            config = DistributedConfig(
                partitions_per_task=1,
                broadcast_total_rows=rows * args.workers,
                broadcast_total_bytes=size * args.workers,
                broadcast_row_bytes=1,  # the row threshold is the one given
            )
            contexts[name] = DistributedContext(ctx, workers=cluster, config=config)
        print(f"{'query':>5} {'single':>8} {'baseline':>11} {'broadcast':>10}  stages")
        for n in queries:
            sql = tpch_query(n)
            expected = single.sql(sql).to_arrow_table()
            times: dict[str, list[float]] = {name: [] for name in totals}
            for _ in range(args.iterations):
                seconds, _ = timed(lambda sql=sql: single.sql(sql).to_arrow_table())
                times["single"].append(seconds)
                for name, dctx in contexts.items():
                    seconds, got = timed(lambda dctx=dctx, sql=sql: dctx.sql(sql).to_arrow_table())
                    times[name].append(seconds)
                    assert_tables_equal(got, expected, sql=sql)
            medians = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
            for name, value in medians.items():
                totals[name] += value
            stages = "/".join(str(len(d.sql(sql).distributed_plan().stages)) for d in contexts.values())
            print(
                f"  q{n:02d} {medians['single']:8.3f} {medians['baseline']:11.3f} {medians['broadcast']:10.3f}  {stages}"
            )
        for dctx in contexts.values():
            dctx.close()
    ratio = {name: totals[name] / totals["single"] for name in variants}
    print(
        f"total {totals['single']:8.3f} {totals['baseline']:11.3f} {totals['broadcast']:10.3f}  "
        f"ratios {ratio['baseline']:.2f} / {ratio['broadcast']:.2f}"
    )


if __name__ == "__main__":
    main()
