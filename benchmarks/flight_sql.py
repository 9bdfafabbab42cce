"""TPC-H through the Flight SQL endpoint against the same cluster used in-process, side by side.

    python benchmarks/flight_sql.py --sf 1 --iterations 3
    python benchmarks/flight_sql.py --sf 0.1 --queries 1,3,6

Three sides run each query in turn, the order alternating between iterations: single-node
DataFusion, a DistributedContext over an embedded cluster of ``--workers`` workers, and a
``FlightSqlServer`` over an embedded cluster of the same size, queried by the ADBC Flight SQL
driver from this process (the result read whole, as Arrow). Every answer is checked against
single-node's. Printed: each side's median seconds and its ratio to single-node, and the
endpoint's cost over the in-process context (planning by GetFlightInfo, the ticket, the result
crossing gRPC).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import threading

import adbc_driver_flightsql.dbapi as flight_sql
from common import add_common_args, query_numbers, timed
from datafusion import SessionConfig, SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext
from datafusion_distributed.flight_sql import FlightSqlServer, ServeOptions
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.tpch import (
    TPCH_QUERY_NUMBERS,
    TPCH_TABLES,
    register_tpch,
    tpch_data,
    tpch_query,
)

SIDES = ("single-node", "in-process", "Flight SQL")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(parser, sf=1.0, parts=4, workers=2, iterations=3, warmup=1, queries="")
    args = parser.parse_args()
    data = tpch_data(args.sf, parts=args.parts)
    numbers = query_numbers(args.queries, TPCH_QUERY_NUMBERS)
    single = SessionContext(SessionConfig().with_target_partitions(args.workers))
    register_tpch(single, data)
    config = DistributedConfig(embedded_workers=args.workers)
    ctx = SessionContext()
    register_tpch(ctx, data)
    init = [f"CREATE EXTERNAL TABLE {t} STORED AS PARQUET LOCATION '{data / t}/'" for t in TPCH_TABLES]
    server = FlightSqlServer(config=config, options=ServeOptions(init=init, max_running=1))
    threading.Thread(target=server.serve, daemon=True).start()
    with (
        DistributedContext(ctx, config=config) as dctx,
        flight_sql.connect(server.location, autocommit=True) as conn,
        conn.cursor() as cursor,
    ):

        def through_flight_sql(sql: str):
            cursor.execute(sql)
            return cursor.fetch_arrow_table()

        run = {
            "single-node": lambda sql: single.sql(sql).to_arrow_table(),
            "in-process": lambda sql: dctx.sql(sql).to_arrow_table(),
            "Flight SQL": through_flight_sql,
        }
        totals = dict.fromkeys(SIDES, 0.0)
        print(
            f"TPC-H SF {args.sf}, {args.workers} embedded workers a side; median seconds of {args.iterations}"
        )
        for n in numbers:
            sql = tpch_query(n)
            expected = single.sql(sql).to_arrow_table()
            times: dict[str, list[float]] = {side: [] for side in SIDES}
            for i in range(args.warmup + args.iterations):
                for side in SIDES if i % 2 == 0 else SIDES[::-1]:
                    took, got = timed(functools.partial(run[side], sql))
                    assert_tables_equal(got, expected, sql=sql)
                    if i >= args.warmup:
                        times[side].append(took)
            medians = {side: statistics.median(t) for side, t in times.items()}
            for side in SIDES:
                totals[side] += medians[side]
            shown = "  ".join(
                f"{s} {medians[s]:.3f}s ({medians[s] / medians['single-node']:.2f}x)" for s in SIDES
            )
            print(f"  q{n:02d}  {shown}", flush=True)
        over = totals["Flight SQL"] / totals["in-process"]
        shown = "  ".join(f"{s} {totals[s]:.2f}s ({totals[s] / totals['single-node']:.2f}x)" for s in SIDES)
        print(f"  total {shown}; Flight SQL over in-process {over:.2f}x")
    server.shutdown()


if __name__ == "__main__":
    main()
