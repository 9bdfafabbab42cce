"""A program the exit tests end with a signal mid-query: it starts a cluster, runs a slow query
in a thread, prints its workers' process ids and "running" once the query has written files,
then waits for the query.

    python signal_child.py local|embedded|fetching|own-handler DATA_FOLDER

`fetching` gives the coordinator the workers' URLs rather than the cluster, so it copies the
final stage's inputs into its own scratch folder; `own-handler` installs a SIGTERM handler of
its own before starting the cluster.
"""

from __future__ import annotations

import glob
import os
import signal
import sys
import tempfile
import threading
import time

import pyarrow as pa
from datafusion import SessionContext, udf

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster


def slow(values: pa.Array) -> pa.Array:
    time.sleep(0.3)
    return values


def read_unit(unit: int) -> pa.Table:
    return pa.table({"u": pa.array([unit], pa.int64())})


def main(kind: str, data: str) -> None:
    if kind == "own-handler":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    ctx = SessionContext()
    ctx.register_parquet("t", data)
    ctx.register_udf(udf(slow, [pa.int64()], pa.int64(), "volatile", "slow"))
    config = DistributedConfig(bytes_per_partition=1024)
    if kind == "embedded":
        dctx = DistributedContext(ctx, config=config)
        # a feed's table files are a temporary folder of their own, which must go too
        dctx.register_feed("units", [1, 2], read_unit, pa.schema([("u", pa.int64())]))
        spool_files = dctx._cluster.spool_files
        print("pids", flush=True)
    else:
        cluster = LocalCluster(2)
        print("pids", *(p.pid for p in cluster.processes), flush=True)
        spool_files = cluster.spool_files
        if kind == "fetching":
            config = DistributedConfig(bytes_per_partition=1024, auth_token=cluster.auth_token)
            dctx = DistributedContext(ctx, workers=cluster.get_urls(), config=config)
        else:
            dctx = DistributedContext(ctx, workers=cluster, config=config)
    # fetching: the coordinator's last stage is the slow one, over inputs copied here
    sql = (
        "SELECT slow(k) AS v FROM (SELECT k FROM t ORDER BY k LIMIT 1000000)"
        if kind == "fetching"
        else "SELECT slow(k) FROM t"
    )
    query = threading.Thread(target=lambda: dctx.sql(sql).to_arrow_table(), daemon=True)
    query.start()
    deadline = time.monotonic() + 30
    started: list = []
    while not started and time.monotonic() < deadline:
        time.sleep(0.05)
        if kind == "fetching":
            started = glob.glob(os.path.join(tempfile.gettempdir(), "datafusion-distributed-head-*", "*"))
        else:
            started = spool_files()
    print("running" if started else "not started within 30 s", flush=True)
    query.join()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
