"""Start two workers on this machine with the command line, run a query on them, stop them.

    .venv/bin/python examples/localhost_cluster.py

1. Writes a Parquet table `sales` (4 files, 2.8 million rows, about 38 MB) to data/examples/sales/
   unless it is there already.
2. Makes a random token and starts two workers as subprocesses:
   `python -m datafusion_distributed worker --host 127.0.0.1 --port 0`, with the token in their
   environment (DATAFUSION_DISTRIBUTED_TOKEN): workers refuse calls without it. Port 0 picks a
   free port; each worker prints "listening on grpc://127.0.0.1:PORT" as its first line of output.
3. Connects a DistributedContext with the same token to the two URLs, prints the distributed
   plan and the result, and checks it against single-node DataFusion.
4. Stops the workers (SIGTERM), also when the query fails.

See localhost_cluster.md for the same steps by hand in two terminals.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext
from datafusion_distributed.test_utils.compare import assert_tables_equal

# Not resolved: run through a link to the checkout, the table goes next to the link.
REPO = Path(__file__).absolute().parent.parent
TABLE_DIR = REPO / "data" / "examples" / "sales"
FILES, ROWS_PER_FILE = 4, 700_000
REGIONS = np.array(["central", "east", "north", "south", "west"])

QUERY = """
SELECT region,
       count(*)                AS orders,
       round(sum(amount), 2)   AS revenue,
       round(avg(quantity), 3) AS avg_quantity
FROM sales
WHERE quantity > 1
GROUP BY region
ORDER BY revenue DESC
"""


def write_sales_table(table_dir: Path = TABLE_DIR) -> None:
    """A made-up sales table in `table_dir`, the same on every run (fixed random seed)."""
    if table_dir.exists():
        return
    table_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".sales.", dir=table_dir.parent))
    rng = np.random.default_rng(7)
    for k in range(FILES):
        n = ROWS_PER_FILE
        table = pa.table(
            {
                "order_id": np.arange(k * n, (k + 1) * n),
                "region": REGIONS[rng.integers(0, len(REGIONS), n)],
                "customer_id": rng.integers(0, 1_000_000, n),
                "amount": np.round(rng.uniform(1, 1000, n), 2),
                "quantity": rng.integers(1, 20, n),
            }
        )
        pq.write_table(table, staging / f"part-{k}.parquet")
    staging.rename(table_dir)


def start_worker(spool: Path, token: str) -> tuple[subprocess.Popen, str]:
    """A worker process on a free port, and its URL (read from its first line of output).

    The token goes in the environment rather than `--auth-token`: other users of the machine
    can read a process's command line."""
    process = subprocess.Popen(
        [sys.executable, "-m", "datafusion_distributed", "worker",
         "--host", "127.0.0.1", "--port", "0", "--spool-dir", str(spool)],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        env={**os.environ, "DATAFUSION_DISTRIBUTED_TOKEN": token},
    )  # fmt: skip
    line = process.stdout.readline().strip()
    if not line.startswith("listening on "):
        process.kill()
        raise RuntimeError(f"the worker did not start (it printed {line!r})")
    return process, line.removeprefix("listening on ")


def stop_worker(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    process.stdout.close()


def main() -> None:
    write_sales_table()
    size = sum(f.stat().st_size for f in TABLE_DIR.glob("*.parquet"))
    print(f"table sales: {TABLE_DIR.relative_to(REPO)}/ ({FILES} files, {size / 1e6:.1f} MB)")

    spool_root = Path(tempfile.mkdtemp(prefix="dfd-example-spool-"))
    workers: list[subprocess.Popen] = []
    token = secrets.token_urlsafe(32)  # shared by the workers and the coordinator
    try:
        urls = []
        for i in range(2):
            process, url = start_worker(spool_root / f"worker-{i}", token)
            workers.append(process)
            urls.append(url)
            print(f"worker {i} (pid {process.pid}) listening on {url}")

        ctx = SessionContext()
        ctx.register_parquet("sales", str(TABLE_DIR))
        # The query reads 10 MB (three of the table's five columns): under the default 16 MiB per
        # partition x 2 partitions per task, it would run as one task, on the coordinator alone.
        config = DistributedConfig(auth_token=token, bytes_per_partition=4 * 1024 * 1024)
        with DistributedContext(ctx, workers=urls, config=config) as dctx:
            df = dctx.sql(QUERY)
            print("\nDistributed plan:")
            df.explain()

            started = time.perf_counter()
            result = df.to_arrow_table()
            print(f"Result ({time.perf_counter() - started:.2f} s on {len(urls)} workers):")
            print(result.to_pandas().to_string(index=False))

        # The same query on single-node DataFusion gives the same answer.
        single = SessionContext()
        single.register_parquet("sales", str(TABLE_DIR))
        assert_tables_equal(result, single.sql(QUERY).to_arrow_table(), sql=QUERY)
        print("same answer as single-node DataFusion")
    finally:
        for process in workers:
            stop_worker(process)
        shutil.rmtree(spool_root, ignore_errors=True)
    print("\nworkers stopped")


if __name__ == "__main__":
    main()
