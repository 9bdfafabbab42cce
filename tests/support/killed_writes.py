"""Writes kept busy long enough for a worker to be killed in the middle of them: TPC-H with
`slow`, a UDF that sleeps on every batch, over a LocalCluster of three worker processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
from datafusion import SessionContext, udf

from datafusion_distributed import DistributedContext, LocalCluster
from datafusion_distributed.test_utils.forced import forced_distribution
from datafusion_distributed.test_utils.tpch import register_tpch

T = TypeVar("T")


def _slow(keys: pa.Array) -> pa.Array:
    time.sleep(0.05)  # keeps every task writing for a while
    return keys


def register_slow_tpch(ctx: SessionContext, tpch: Path) -> None:
    """TPC-H at `tpch` on `ctx`, in small batches, and the UDF `slow(bigint)`."""
    ctx.sql("SET datafusion.execution.batch_size = 512").collect()
    register_tpch(ctx, tpch)
    ctx.register_udf(udf(_slow, [pa.int64()], pa.int64(), "volatile", "slow"))


@contextmanager
def slow_cluster(tpch: Path) -> Iterator[tuple[LocalCluster, DistributedContext]]:
    """Three worker processes, and a context over them (distribution forced) with
    `register_slow_tpch` done."""
    with LocalCluster(3) as cluster:
        ctx = SessionContext()
        register_slow_tpch(ctx, tpch)
        with DistributedContext(ctx, workers=cluster, **forced_distribution(connect_timeout=10)) as dctx:
            yield cluster, dctx


def with_a_worker_killed(cluster: LocalCluster, write: Callable[[], T]) -> T:
    """`write()`, with the cluster's worker 1 killed half a second into it."""
    killer = threading.Timer(0.5, cluster.kill, args=(1,))
    killer.start()
    try:
        return write()
    finally:
        killer.join()


def retried_attempts(dctx: DistributedContext) -> list:
    """The attempts after the first of the context's last query (a killed worker's tasks)."""
    return dctx.engine.history.read(lambda runs: [a for a in runs[-1].attempts if a[2] > 0])
