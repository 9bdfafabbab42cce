"""Run TPC-H queries 1 and 3 on generated data and print the results with timings.

For now this runs single-node DataFusion only; the distributed run comes next to it.
"""

from __future__ import annotations

import time

import datafusion

from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data, tpch_query

SCALE_FACTOR = 0.01
QUERIES = (1, 3)


def main() -> None:
    start = time.perf_counter()
    path = tpch_data(SCALE_FACTOR, parts=4)
    print(f"TPC-H SF {SCALE_FACTOR} data: {path} ({time.perf_counter() - start:.2f} s)")

    ctx = datafusion.SessionContext()
    register_tpch(ctx, path)
    for n in QUERIES:
        start = time.perf_counter()
        result = ctx.sql(tpch_query(n)).to_arrow_table()
        elapsed = time.perf_counter() - start
        print(f"\nTPC-H Q{n} on single-node DataFusion: {result.num_rows} rows in {elapsed * 1000:.1f} ms")
        print(result.to_pandas().to_string(index=False))

    print("\nDistributed execution: not wired in yet.")


if __name__ == "__main__":
    main()
