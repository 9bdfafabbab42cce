"""Run queries on workers that are Ray actors, on a Ray started on this machine for the example.

    pip install 'datafusion-distributed[ray]'
    .venv/bin/python examples/ray_cluster.py

1. Writes a small Parquet table (4 files, 400,000 rows) to a temporary folder.
2. Starts Ray on this machine and two workers as Ray actors, packed on its one node and
   listening on loopback. On a real Ray cluster, call `ray.init(address="auto")` (or give
   `RayCluster(address=...)`) and leave `placement` and `host` out: one worker per node,
   reached at the node's IP address.
3. Runs a query distributed, prints its stages and result, and checks it against single-node
   DataFusion.
4. Kills one actor as a crash would; Ray restarts it, and the next query finds the restarted
   worker at its new URL.
5. Closes the cluster (workers stopped, spools deleted, actors killed) and shuts Ray down.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, RayCluster
from datafusion_distributed.test_utils.compare import assert_tables_equal

QUERY = """
SELECT region, count(*) AS orders, round(sum(amount), 2) AS revenue
FROM sales
GROUP BY region
ORDER BY region
"""


def write_sales(folder: Path, files: int = 4, rows: int = 100_000) -> None:
    """A made-up sales table, the same on every run (fixed random seed)."""
    rng = np.random.default_rng(7)
    regions = np.array(["central", "east", "north", "south", "west"])
    for i in range(files):
        table = pa.table(
            {
                "region": regions[rng.integers(0, len(regions), rows)],
                "amount": np.round(rng.uniform(1, 500, rows), 2),
            }
        )
        pq.write_table(table, folder / f"part-{i}.parquet")


def wait_for_new_url(cluster: RayCluster, old: str, timeout: float = 60.0) -> list[str]:
    """The cluster's URLs once the restarted worker (formerly at `old`) answers at its new one."""
    deadline = time.monotonic() + timeout
    while old in (urls := cluster.get_urls()) or len(urls) < cluster.n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the killed worker did not come back within {timeout}s: {urls}")
        time.sleep(0.5)
    return urls


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        write_sales(Path(folder))
        ctx = SessionContext()
        ctx.register_parquet("sales", folder)
        expected = ctx.sql(QUERY).to_arrow_table()

        ray.init(num_cpus=4, include_dashboard=False)  # a Ray of this machine
        try:
            with RayCluster(2, placement="pack", host="127.0.0.1") as cluster:
                urls = cluster.get_urls()
                print("workers:", urls)
                # small partitions, so this small table is cut into several tasks
                config = DistributedConfig(bytes_per_partition=256 * 1024)
                with DistributedContext(ctx, workers=cluster, config=config) as dctx:
                    df = dctx.sql(QUERY)
                    df.explain()
                    result = df.to_arrow_table()
                    print(result.to_pandas().to_string(index=False))
                    assert_tables_equal(result, expected, sql=QUERY)

                    ray.kill(cluster.actors[0], no_restart=False)  # as a crash would
                    print("after a restart:", wait_for_new_url(cluster, urls[0]))
                    assert_tables_equal(dctx.sql(QUERY).to_arrow_table(), expected, sql=QUERY)
            print("the same answers as single-node DataFusion; cluster closed")
        finally:
            ray.shutdown()


if __name__ == "__main__":
    main()
