"""Freed memory handed back lazily: worker processes at the library's allocator setting
against workers at mimalloc's own, side by side on TPC-H.

    python benchmarks/freed_memory.py --sf 1 --iterations 3
    MIMALLOC_PURGE_DECOMMITS=1 python benchmarks/freed_memory.py   # single-node at mimalloc's default

The library starts its worker processes with ``MIMALLOC_PURGE_DECOMMITS=0``
(``common/allocator.py``): mimalloc hands pages that fell free back to the OS with
``MADV_FREE``, which the kernel takes only when it needs memory, instead of decommitting them,
which makes the next allocation fault them in and the kernel zero them. Sides, interleaved
query by query (their order alternating):

- ``single``: single-node DataFusion in this process (``target_partitions = --workers``), at
  this process's setting: the library's (``common.py``) unless the variable was given;
- ``lazy``: a ``LocalCluster`` of ``--workers`` processes started with the library's setting;
- ``eager``: the same cluster, its workers started with ``MIMALLOC_PURGE_DECOMMITS=1``
  (mimalloc's default).

Workers are pinned to a core each (``--no-pin``: not). Every answer is checked against
single-node's. Per side it prints the sum over queries of the median seconds, the user and
system CPU seconds of one pass over the queries (this process and the side's workers), and the
largest peak resident memory of one query summed over the side's processes (each process's
high-water mark reset before each run; pages handed back lazily count until the kernel takes
them). Results go to ``benchmarks/results/`` as JSON.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

from common import (
    add_common_args,
    add_output_arg,
    add_pin_arg,
    git_commit,
    peak_rss_mb,
    process_times,
    query_numbers,
    reset_peak_rss,
    result_path,
    utc_timestamp,
    worker_cores,
    write_json,
)
from datafusion import SessionConfig, SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.common.allocator import DECOMMIT_VARIABLE
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data, tpch_query

SETTINGS = {"lazy": "0", "eager": "1"}  # the library's, mimalloc's default


def user_and_system_seconds(pids: list[int]) -> tuple[float, float]:
    """User and system CPU seconds so far of this process and of `pids`."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    user, system = usage.ru_utime, usage.ru_stime
    for pid in pids:
        pid_user, pid_system = process_times(pid) or (0.0, 0.0)
        user, system = user + pid_user, system + pid_system
    return user, system


def cluster_at(setting: str, workers: int, cores) -> LocalCluster:
    """A LocalCluster whose workers start with `MIMALLOC_PURGE_DECOMMITS=setting`."""
    before = os.environ.get(DECOMMIT_VARIABLE)
    os.environ[DECOMMIT_VARIABLE] = setting  # the workers inherit it as they start
    try:
        return LocalCluster(workers, worker_cpus=cores)
    finally:
        if before is None:
            del os.environ[DECOMMIT_VARIABLE]
        else:
            os.environ[DECOMMIT_VARIABLE] = before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(parser, sf=1.0, workers=2, iterations=3, queries="")
    add_pin_arg(parser)
    add_output_arg(parser)
    args = parser.parse_args()
    queries = query_numbers(args.queries)
    data = tpch_data(args.sf)
    cores = worker_cores(args.workers, args.pin)
    single = SessionContext(SessionConfig().with_target_partitions(args.workers))
    register_tpch(single, data)
    clusters = {side: cluster_at(setting, args.workers, cores) for side, setting in SETTINGS.items()}
    sides: dict[str, tuple[object, list[int]]] = {"single": (single, [])}
    for name, cluster in clusters.items():
        ctx = SessionContext()
        register_tpch(ctx, data)
        config = DistributedConfig(partitions_per_task=1)
        sides[name] = (
            DistributedContext(ctx, workers=cluster, config=config),
            [p.pid for p in cluster.processes],
        )
    seconds = {side: {q: [] for q in queries} for side in sides}
    peaks = {side: {q: 0.0 for q in queries} for side in sides}
    cpu = {side: [0.0, 0.0] for side in sides}
    try:
        for q in queries:  # warm-up, and the answer each side must give
            expected = single.sql(tpch_query(q)).to_arrow_table()
            for ctx, _ in sides.values():
                assert_tables_equal(ctx.sql(tpch_query(q)).to_arrow_table(), expected)
        for iteration in range(args.iterations):
            for q in queries:
                expected = None
                order = list(sides.items())
                for side, (ctx, pids) in order if (iteration + q) % 2 else reversed(order):
                    reset_peak_rss(["self", *pids])
                    user, system = user_and_system_seconds(pids)
                    started = time.perf_counter()
                    table = ctx.sql(tpch_query(q)).to_arrow_table()
                    seconds[side][q].append(time.perf_counter() - started)
                    end_user, end_system = user_and_system_seconds(pids)
                    cpu[side][0] += (end_user - user) / args.iterations
                    cpu[side][1] += (end_system - system) / args.iterations
                    peaks[side][q] = max(peaks[side][q], peak_rss_mb(pids))
                    if expected is None:
                        expected = table
                    else:
                        assert_tables_equal(table, expected)
    finally:
        for cluster in clusters.values():
            cluster.close()
    totals = {side: sum(statistics.median(runs) for runs in seconds[side].values()) for side in sides}
    print(f"TPC-H SF {args.sf:g}, {len(queries)} queries x {args.iterations}; workers pinned: {cores}")
    print(
        f"{'side':10s} {'seconds':>8s} {'ratio':>6s} {'user':>7s} {'system':>7s} {'cpu':>7s} {'peak MB':>8s}"
    )
    for side in sides:
        user, system = cpu[side]
        peak = max(peaks[side].values())
        ratio = totals[side] / totals["single"]
        print(
            f"{side:10s} {totals[side]:8.3f} {ratio:6.2f} {user:7.2f} {system:7.2f} {user + system:7.2f} {peak:8.0f}"
        )
    print(
        "(seconds: sum of medians; cpu: one pass, this process and the side's workers; peak: largest query)"
    )
    result = {
        "benchmark": "freed_memory",
        "when": utc_timestamp(),
        "commit": git_commit(),
        "args": vars(args),
        "single_node_purge_decommits": os.environ.get(DECOMMIT_VARIABLE),
        "seconds": {
            side: {str(q): runs for q, runs in by_query.items()} for side, by_query in seconds.items()
        },
        "cpu_user_system": cpu,
        "peak_mb": {side: {str(q): mb for q, mb in by_query.items()} for side, by_query in peaks.items()},
    }
    path = result_path(args.output, f"freed-memory-sf{args.sf:g}")
    write_json(path, result)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
