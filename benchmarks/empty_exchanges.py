"""Queries whose filter keeps nothing: what an exchange left empty costs its consumer.

With no file to take a schema from, the consumer of an empty exchange runs the boundary subtree
in its place. This compares, side by side in one run over one ``LocalCluster``: single-node
DataFusion; the subtree run over leaves that read nothing under a limit of no row (the library's
way, ``distributed_planner.empty_inputs``); and the subtree run as planned, computing the
producers' work again in one task (the way before it, patched back in for the comparison).
TPC-H ``lineitem``, filtered on ``length(l_comment)``, which Parquet statistics cannot prune.
Every answer is checked against single-node's.

    python benchmarks/empty_exchanges.py --sf 1 --iterations 5
"""

from __future__ import annotations

import argparse
import statistics
import sys

from common import add_common_args, add_pin_arg, timed, worker_cores
from datafusion import SessionConfig, SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.coordinator import run_state
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data

QUERIES = {
    "grouped (shuffle)": "SELECT l_orderkey, count(*) AS n FROM lineitem WHERE length(l_comment) > 100 GROUP BY 1",
    "sorted (merge)": "SELECT l_orderkey, l_comment FROM lineitem WHERE length(l_comment) > 100 ORDER BY 1",
}
SINGLE, READ_NOTHING, RERUN = "single-node", "read nothing", "run as planned"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(parser, sf=1.0, parts=4, workers=2, iterations=5, warmup=1)
    add_pin_arg(parser)
    args = parser.parse_args(argv)
    data = tpch_data(args.sf, args.parts)
    single = SessionContext(SessionConfig().with_target_partitions(args.workers))
    register_tpch(single, data)
    library_way = run_state.read_in_place_of_nothing
    ways = {READ_NOTHING: library_way, RERUN: lambda inp: None}
    with LocalCluster(args.workers, worker_cpus=worker_cores(args.workers, args.pin)) as cluster:
        ctx = SessionContext()
        register_tpch(ctx, data)
        dctx = DistributedContext(ctx, workers=cluster, config=DistributedConfig(partitions_per_task=1))
        print(
            f"SF {args.sf}, {args.workers} workers, median of {args.iterations} (+{args.warmup} warm-up), seconds"
        )
        try:
            for name, sql in QUERIES.items():
                seconds: dict[str, list[float]] = {SINGLE: [], READ_NOTHING: [], RERUN: []}
                for i in range(args.warmup + args.iterations):
                    order = list(seconds) if i % 2 == 0 else list(seconds)[::-1]
                    expected = single.sql(sql).to_arrow_table()
                    for side in order:
                        if side == SINGLE:
                            took, _ = timed(lambda: single.sql(sql).to_arrow_table())  # noqa: B023
                        else:
                            run_state.read_in_place_of_nothing = ways[side]
                            took, got = timed(lambda: dctx.sql(sql).to_arrow_table())  # noqa: B023
                            assert_tables_equal(got, expected, sql=sql)
                        if i >= args.warmup:
                            seconds[side].append(took)
                medians = {side: statistics.median(runs) for side, runs in seconds.items()}
                print(
                    f"  {name:<18} single {medians[SINGLE]:.3f}  read nothing {medians[READ_NOTHING]:.3f} "
                    f"({medians[READ_NOTHING] / medians[SINGLE]:.2f}x)  run as planned {medians[RERUN]:.3f} "
                    f"({medians[RERUN] / medians[SINGLE]:.2f}x)",
                    flush=True,
                )
        finally:
            run_state.read_in_place_of_nothing = library_way
            dctx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
