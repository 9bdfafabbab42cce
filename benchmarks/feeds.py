"""Work-unit feeds: no loss against registering the same files, and load balance with skew.

    python benchmarks/feeds.py --sf 1 --iterations 3
    python benchmarks/feeds.py --only balance --units 40 --unit-seconds 0.05

1. **Files** (`files`): TPC-H `lineitem` read two ways on one cluster, interleaved: registered
   as Parquet (the planner splits its file groups across tasks), and as a feed whose units are
   the files' row groups (`(path, row group)`, listed when the query runs; the reader reads one
   with pyarrow, only the columns the query reads). Both answers are checked against
   single-node DataFusion.
2. **Balance** (`balance`): `--units` units of `--unit-seconds` each (a remote call's
   latency, slept), one of them 10x longer. Read as a feed, units go to whichever task
   partition asks; read statically, the same units are files of a Parquet table split into
   file groups when the query is planned (`repartition_file_scans` off: one unit per file),
   each unit's cost paid by a Python UDF. Also with no skew, as the control.

Medians of `--iterations` runs after one warm-up, in seconds, with `--workers` workers x
`--partitions-per-task` (the embedded cluster for files, or worker processes with
`--processes`; worker processes for balance).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import statistics
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq
from common import add_common_args, timed
from datafusion import SessionConfig, SessionContext, udf

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.tpch import tpch_data, tpch_query

FILE_QUERIES = {
    "q1": tpch_query(1),
    "q6": tpch_query(6),
    "scan": "SELECT l_returnflag, count(*) AS n, sum(l_extendedprice) AS s, max(l_comment) AS c "
    "FROM lineitem GROUP BY l_returnflag",
}


def row_groups(paths: list[str]) -> list[tuple[str, int]]:
    return [(path, rg) for path in paths for rg in range(pq.ParquetFile(path).metadata.num_row_groups)]


def read_row_group(unit: tuple[str, int], columns: list[str]) -> pa.Table:
    """One row group, only the columns the query reads (a reader may take `columns`)."""
    path, rg = unit
    return pq.ParquetFile(path).read_row_group(rg, columns=columns)


def bench_files(args) -> None:
    folder = tpch_data(args.sf, parts=4) / "lineitem"
    paths = sorted(glob.glob(str(folder / "*.parquet")))
    schema = pq.read_schema(paths[0])
    config = DistributedConfig(embedded_workers=args.workers, partitions_per_task=args.partitions_per_task)
    if args.processes:
        with LocalCluster(args.workers) as cluster:
            _files(args, folder, paths, schema, config, cluster)
    else:
        _files(args, folder, paths, schema, config, None)


def _files(args, folder, paths, schema, config: DistributedConfig, cluster: LocalCluster | None) -> None:
    parquet_ctx, files_ctx, groups_ctx, single = (
        SessionContext(),
        SessionContext(),
        SessionContext(),
        SessionContext(),
    )
    parquet_ctx.register_parquet("lineitem", str(folder))
    single.register_parquet("lineitem", str(folder))
    with (
        DistributedContext(parquet_ctx, workers=cluster, config=config) as as_table,
        DistributedContext(files_ctx, workers=cluster, config=config) as as_files,
        DistributedContext(groups_ctx, workers=cluster, config=config) as as_groups,
    ):
        as_files.register_feed("lineitem", lambda: iter(paths), "parquet", schema)
        as_groups.register_feed("lineitem", lambda: iter(row_groups(paths)), read_row_group, schema)
        print(
            f"lineitem SF {args.sf}: {len(paths)} files (the Parquet feed's units), "
            f"{len(row_groups(paths))} row groups (the reader feed's units)"
        )
        sides = {"table": as_table, "files": as_files, "groups": as_groups}
        print(
            f"{'query':<6} {'table':>8} {'files':>8} {'groups':>8} {'files/table':>12} {'groups/table':>13}"
        )
        for name, sql in FILE_QUERIES.items():
            expected = single.sql(sql).to_arrow_table()
            times: dict[str, list[float]] = {label: [] for label in sides}
            for iteration in range(args.iterations + 1):
                for label, dctx in sides.items():
                    seconds, got = timed(lambda dctx=dctx, sql=sql: dctx.sql(sql).to_arrow_table())
                    assert_tables_equal(got, expected, sql=sql)
                    if iteration:  # the first is the warm-up
                        times[label].append(seconds)
            table, files, groups = (statistics.median(times[label]) for label in sides)
            print(
                f"{name:<6} {table:>8.3f} {files:>8.3f} {groups:>8.3f} "
                f"{files / table:>11.2f}x {groups / table:>12.2f}x"
            )


def unit_cost(unit: int, args, skewed: bool) -> float:
    return args.unit_seconds * (10 if skewed and unit == 0 else 1)


def bench_balance(args) -> None:
    config = DistributedConfig(partitions_per_task=args.partitions_per_task)
    # Worker processes: a UDF's sleep holds one of DataFusion's runtime threads (one per core
    # of the process), so in one process the static side could not pay more costs at once
    # than there are cores; a worker process per task gives both sides the same parallelism.
    with LocalCluster(args.workers) as cluster:
        _balance(args, config, cluster)


def _balance(args, config: DistributedConfig, cluster: LocalCluster) -> None:
    schema = pa.schema([("unit", pa.int64()), ("cost", pa.float64())])
    print(f"{args.units} units of {args.unit_seconds}s, skewed: unit 0 takes 10x")
    print(f"{'units':<8} {'static':>9} {'feed':>9} {'static/feed':>12} {'ideal':>7}")
    for skewed in (False, True):
        costs = [unit_cost(u, args, skewed) for u in range(args.units)]

        def read(unit: int, costs=costs) -> pa.Table:
            time.sleep(costs[unit])
            return pa.table({"unit": [unit], "cost": [costs[unit]]})

        def pay(units: pa.Array, costs=costs) -> pa.Array:
            for unit in units.to_pylist():
                time.sleep(costs[unit])
            return pa.compute.multiply(units.cast(pa.float64()), 0.0)

        with tempfile.TemporaryDirectory() as folder:
            for unit in range(args.units):  # one unit per file: static groups of whole units
                pq.write_table(
                    pa.table({"unit": [unit], "cost": [costs[unit]]}),
                    os.path.join(folder, f"unit-{unit:04d}.parquet"),
                )
            static_ctx = SessionContext(
                SessionConfig().set("datafusion.optimizer.repartition_file_scans", "false")
            )
            static_ctx.register_parquet("units", folder)
            static_ctx.register_udf(udf(pay, [pa.int64()], pa.float64(), "volatile", "pay"))
            static_sql = "SELECT count(*) AS n, sum(cost + pay(unit)) AS total FROM units"
            feed_sql = "SELECT count(*) AS n, sum(cost) AS total FROM units"
            # every unit's file counts as a partition's worth of bytes: the files are spread
            # over every task, as a feed's units are
            spread = dataclasses.replace(config, bytes_per_partition=1)
            with (
                DistributedContext(static_ctx, workers=cluster, config=spread) as static,
                DistributedContext(SessionContext(), workers=cluster, config=config) as dynamic,
            ):
                dynamic.register_feed("units", lambda: iter(range(args.units)), read, schema)
                times: dict[str, list[float]] = {"static": [], "feed": []}
                answers = set()
                for iteration in range(args.iterations + 1):
                    for label, dctx, sql in (("static", static, static_sql), ("feed", dynamic, feed_sql)):
                        seconds, got = timed(lambda dctx=dctx, sql=sql: dctx.sql(sql).to_pylist())
                        answers.add((got[0]["n"], round(got[0]["total"], 6)))
                        if iteration:
                            times[label].append(seconds)
                assert len(answers) == 1, answers
                plan = static.sql(static_sql).distributed_plan()
                assert plan.stages[0].task_count == args.workers, static.sql(static_sql).explain_string()
        slots = args.workers * args.partitions_per_task
        ideal = max(max(costs), sum(costs) / slots)
        s, f = statistics.median(times["static"]), statistics.median(times["feed"])
        print(f"{'skewed' if skewed else 'uniform':<8} {s:>9.3f} {f:>9.3f} {s / f:>11.2f}x {ideal:>7.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(parser, sf=1.0, workers=2, partitions_per_task=2, iterations=3)
    parser.add_argument("--units", type=int, default=40)
    parser.add_argument("--unit-seconds", type=float, default=0.05)
    parser.add_argument("--only", choices=["files", "balance"])
    parser.add_argument("--processes", action="store_true", help="files: on worker processes (LocalCluster)")
    args = parser.parse_args()
    if args.only in (None, "files"):
        bench_files(args)
    if args.only in (None, "balance"):
        bench_balance(args)


if __name__ == "__main__":
    main()
