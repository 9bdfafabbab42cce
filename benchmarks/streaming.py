"""Streamed against spooled exchanges, side by side, on the embedded cluster.

    python benchmarks/streaming.py --sf 1 --iterations 3
    python benchmarks/streaming.py --sf 0.1 --queries 1,3,5

Each query runs ``--iterations`` times, interleaved, on single-node DataFusion (``target_partitions``
= the cluster's partitions) and on two DistributedContexts over their own embedded clusters:
``exchange="stream"`` and ``exchange="spool"``. The queries are TPC-H's (``--queries``, default
all) and ``limit``: a shuffled join with ``LIMIT 10`` (both sides hash-partitioned, none
broadcast), where a stream answers once the first batches meet, the head included. Every
answer is checked against single-node (the limit's by its row count). Printed: each side's median seconds, the ratios to single-node, and the stages that
streamed. Peak memory is this process's high-water mark (``VmHWM``), reset before each run.
"""

from __future__ import annotations

import argparse

from common import add_common_args, best_and_median, query_numbers, reset_peak_rss, rss_mb, timed
from datafusion import SessionConfig, SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.tpch import TPCH_QUERY_NUMBERS, register_tpch, tpch_data, tpch_query

LIMIT_SQL = (
    "SELECT l_orderkey, l_quantity, o_orderdate FROM lineitem JOIN orders ON l_orderkey = o_orderkey "
    "WHERE l_quantity > 10 LIMIT 10"
)
SIDES = ("single", "stream", "spool")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(
        parser, sf=1.0, parts=4, workers=2, partitions_per_task=1, iterations=3, warmup=1, queries=""
    )
    args = parser.parse_args()
    data = tpch_data(args.sf, parts=args.parts)
    partitions = args.workers * args.partitions_per_task
    names = [f"q{n:02d}" for n in query_numbers(args.queries, TPCH_QUERY_NUMBERS)] + ["limit"]

    def sql_of(name: str) -> str:
        return LIMIT_SQL if name == "limit" else tpch_query(int(name[1:]))

    single = SessionContext(SessionConfig().with_target_partitions(partitions))
    register_tpch(single, data)

    def context(exchange: str, shuffle_joins: bool) -> DistributedContext:
        ctx = SessionContext()
        register_tpch(ctx, data)
        config = DistributedConfig(
            exchange=exchange,
            embedded_workers=args.workers,
            partitions_per_task=args.partitions_per_task,
            **({"broadcast_total_rows": 0, "broadcast_total_bytes": 0} if shuffle_joins else {}),
        )
        return DistributedContext(ctx, config=config)

    # TPC-H as planned by default; the limit's join with no side collected whole (shuffled)
    contexts = {
        (exchange, shuffled): context(exchange, shuffled)
        for exchange in ("stream", "spool")
        for shuffled in (False, True)
    }

    print(f"TPC-H SF {args.sf}, {args.workers} embedded workers x {args.partitions_per_task} partition(s)")
    print(
        f"{'query':7} {'single s':>9} {'stream s':>9} {'spool s':>9} {'stream x':>9} {'spool x':>8} "
        f"{'MB single':>10} {'MB stream':>10} {'MB spool':>9}  streamed"
    )
    totals = {side: 0.0 for side in SIDES}
    try:
        for name in names:
            sql = sql_of(name)
            seconds: dict[str, list[float]] = {side: [] for side in SIDES}
            peaks: dict[str, float] = {side: 0.0 for side in SIDES}
            streamed: list[int] = []
            for iteration in range(args.warmup + args.iterations):
                order = SIDES if iteration % 2 == 0 else tuple(reversed(SIDES))
                expected = None
                answers = {}
                for side in order:
                    reset_peak_rss(["self"])
                    if side == "single":
                        took, table = timed(single.sql(sql).to_arrow_table)
                    else:
                        df = contexts[side, name == "limit"].sql(sql)
                        took, table = timed(df.to_arrow_table)
                        if side == "stream":
                            streamed = df.metrics.streamed_stages
                    peaks[side] = max(peaks[side], rss_mb())
                    answers[side] = table
                    if iteration >= args.warmup:
                        seconds[side].append(took)
                expected = answers["single"]
                for side in ("stream", "spool"):
                    if name == "limit":
                        assert answers[side].num_rows == expected.num_rows == 10, name
                    else:
                        assert_tables_equal(answers[side], expected, sql=sql)
            medians = {side: best_and_median(seconds[side])["median"] for side in SIDES}
            for side in SIDES:
                totals[side] += medians[side] if name != "limit" else 0.0
            print(
                f"{name:7} {medians['single']:9.3f} {medians['stream']:9.3f} {medians['spool']:9.3f} "
                f"{medians['stream'] / medians['single']:8.2f}x {medians['spool'] / medians['single']:7.2f}x "
                f"{peaks['single']:10.0f} {peaks['stream']:10.0f} {peaks['spool']:9.0f}  {streamed}"
            )
        if len(names) > 1:
            print(
                f"{'TPC-H':7} {totals['single']:9.3f} {totals['stream']:9.3f} {totals['spool']:9.3f} "
                f"{totals['stream'] / totals['single']:8.2f}x {totals['spool'] / totals['single']:7.2f}x"
            )
    finally:
        for dctx in contexts.values():
            dctx.close()


if __name__ == "__main__":
    main()
