"""Micro-benchmarks of the distributed runtime's fixed costs.

1. ``exchange``: throughput of moving one task output between processes with Flight ``do_get``.
   A real task (a scan of TPC-H ``lineitem``) runs on worker process A of a ``LocalCluster`` and
   leaves its outputs in A's spool; this process then fetches them the way a consumer worker does
   (``WorkerClient.fetch_to_file``, and ``WorkerClient.stream`` without writing), one at a time
   and four at once. Measured with the spool compressed (lz4, the default) and uncompressed.
2. ``fixed``: latency of trivial queries (``SELECT 1``; ``count(*)`` over a one-row Parquet file),
   single-node against distributed (embedded cluster, and worker processes), interleaved.
3. ``planning``: time of ``plan_stages`` on the physical plans of TPC-H q2, q8 and q21, next to
   DataFusion's own physical planning of the same query.

    python benchmarks/micro.py                     # all three
    python benchmarks/micro.py --only fixed --runs 100
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from common import add_common_args, add_output_arg, cpu_seconds, result_path, utc_timestamp, write_json
from datafusion import SessionConfig, SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.distributed_planner.planner import plan_stages
from datafusion_distributed.execution_plans.plan_node import PlanNode
from datafusion_distributed.protocol.flight import ClientConfig, WorkerClient
from datafusion_distributed.protocol.messages import RunTask, Ticket
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data, tpch_query

GB = 1e9


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


# -- 1. exchange throughput -------------------------------------------------------------------
def produce_output(client: WorkerClient, url: str, plan: bytes, compression: str | None):
    """Run `plan` as a one-task stage on the worker at `url`; return (query id, TaskResult)."""
    query_id = uuid.uuid4().hex
    message = RunTask(
        query_id=query_id,
        stage=0,
        task=0,
        attempt=0,
        plan=plan,
        inputs=(),
        worker=url,
        compression=compression,
    )
    return query_id, client.run_task(message)


def stream_bytes(client: WorkerClient, ticket: Ticket) -> int:
    return sum(batch.nbytes for batch in client.stream(ticket))


def timed_parallel(fn, items) -> tuple[float, list]:
    results: list = [None] * len(items)

    def work(i, item):
        results[i] = fn(item)

    threads = [threading.Thread(target=work, args=(i, it)) for i, it in enumerate(items)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start, results


def bench_exchange(args) -> dict:
    data = tpch_data(args.sf, 4)
    ctx = SessionContext(SessionConfig().with_target_partitions(4))
    register_tpch(ctx, data)
    plan = ctx.sql("SELECT * FROM lineitem").execution_plan()
    plan_bytes = plan.to_bytes()
    out: dict = {"scale_factor": args.sf, "partitions": plan.partition_count, "runs": args.exchange_runs}
    scratch = tempfile.mkdtemp(prefix="bench-exchange-")
    with LocalCluster(2) as cluster:
        url = cluster.get_urls()[0]
        client = WorkerClient(url, ClientConfig(timeout=600, task_timeout=600, auth_token=cluster.auth_token))
        try:
            for compression in ("lz4", None):
                name = compression or "none"
                start = time.perf_counter()
                query_id, result = produce_output(client, url, plan_bytes, compression)
                produce = time.perf_counter() - start
                parts = [p for p in result.partitions if p.path]
                tickets = [Ticket(query_id, 0, 0, p.partition) for p in parts]
                sizes = {p.partition: p.bytes for p in parts}
                file_bytes = sum(p.bytes for p in parts)
                rows = sum(p.rows for p in parts)
                # Arrow bytes on the wire: do_get sends the batches uncompressed.
                arrow_bytes = [stream_bytes(client, t) for t in tickets]
                row: dict = {
                    "rows": rows,
                    "spool_file_bytes": file_bytes,
                    "arrow_bytes": sum(arrow_bytes),
                    "produce_seconds": produce,
                    "task_seconds": result.seconds,
                }

                def fetch(ticket, suffix="", sizes=sizes):
                    path = os.path.join(scratch, f"{ticket.partition}{suffix}.arrow")
                    size = client.fetch_to_file(ticket, path, sizes[ticket.partition])
                    os.remove(path)
                    return size

                one_stream, one_file, four_stream, four_file = [], [], [], []
                for _ in range(args.exchange_runs):
                    t0 = time.perf_counter()
                    stream_bytes(client, tickets[0])
                    one_stream.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    fetch(tickets[0])
                    one_file.append(time.perf_counter() - t0)
                    four = [tickets[i % len(tickets)] for i in range(4)]
                    seconds, _ = timed_parallel(lambda t: stream_bytes(client, t), four)
                    four_stream.append(seconds)
                    seconds, _ = timed_parallel(lambda t: fetch(t, f"-{uuid.uuid4().hex}"), four)
                    four_file.append(seconds)
                one = arrow_bytes[0]
                four_total = sum(arrow_bytes[i % len(tickets)] for i in range(4))
                row.update(
                    {
                        "one_partition_arrow_bytes": one,
                        "stream_1_gbps": one / min(one_stream) / GB,
                        "fetch_to_file_1_gbps": one / min(one_file) / GB,
                        "stream_4_concurrent_gbps": four_total / min(four_stream) / GB,
                        "fetch_to_file_4_concurrent_gbps": four_total / min(four_file) / GB,
                    }
                )
                out[name] = row
                client.release(query_id)
        finally:
            client.close()
            shutil.rmtree(scratch, ignore_errors=True)
    return out


def print_exchange(r: dict) -> None:
    print(f"exchange: SF {r['scale_factor']:g} lineitem scan, {r['partitions']} output partitions,")
    print("  best of", r["runs"], "runs; GB/s of Arrow (uncompressed) bytes delivered to this process")
    print(f"  {'spool':>6} {'rows':>9} {'file MB':>8} {'arrow MB':>9} | {'1 stream':>8} {'1 file':>7} | "
          f"{'4 stream':>8} {'4 file':>7}")  # fmt: skip
    for name in ("lz4", "none"):
        x = r.get(name)
        if not x:
            continue
        print(
            f"  {name:>6} {x['rows']:>9} {x['spool_file_bytes'] / 1e6:>8.0f} {x['arrow_bytes'] / 1e6:>9.0f} | "
            f"{x['stream_1_gbps']:>8.2f} {x['fetch_to_file_1_gbps']:>7.2f} | "
            f"{x['stream_4_concurrent_gbps']:>8.2f} {x['fetch_to_file_4_concurrent_gbps']:>7.2f}"
        )


# -- 2. fixed cost of a trivial query ---------------------------------------------------------
def bench_fixed(args) -> dict:
    scratch = tempfile.mkdtemp(prefix="bench-fixed-")
    try:
        path = os.path.join(scratch, "one_row")
        os.makedirs(path)
        pq.write_table(pa.table({"x": [1]}), os.path.join(path, "part-0.parquet"))
        two = os.path.join(scratch, "two_rows")
        os.makedirs(two)
        for i in range(2):
            pq.write_table(pa.table({"x": [i]}), os.path.join(two, f"part-{i}.parquet"))
        queries = {
            "select_1": "SELECT 1 AS one",
            "count_1_row_parquet": "SELECT count(*) AS n FROM one_row",
            # bytes_per_partition=1 below splits this scan over both workers: two stages of two
            # tasks each (scan + partial aggregate, shuffle, final aggregate), results gathered
            # from the workers, so it measures the round trips a real distributed query makes.
            "group_by_2_files_on_workers": "SELECT x, count(*) AS n FROM two_rows GROUP BY x",
        }
        config = DistributedConfig(partitions_per_task=1, embedded_workers=2, bytes_per_partition=1)

        single = SessionContext(SessionConfig().with_target_partitions(2))
        single.register_parquet("one_row", path)
        single.register_parquet("two_rows", two)
        runners = {"single": lambda sql: single.sql(sql).to_arrow_table()}
        worker_pids: dict[str, list[int]] = {"single": [], "embedded": []}  # CPU: this process and these
        closers = []
        emb_ctx = SessionContext()
        emb_ctx.register_parquet("one_row", path)
        emb_ctx.register_parquet("two_rows", two)
        embedded = DistributedContext(emb_ctx, config=config)
        closers.append(embedded.close)
        runners["embedded"] = lambda sql: embedded.sql(sql).to_arrow_table()
        if not args.no_processes:
            cluster = LocalCluster(2)
            closers.append(cluster.close)
            proc_ctx = SessionContext()
            proc_ctx.register_parquet("one_row", path)
            proc_ctx.register_parquet("two_rows", two)
            processes = DistributedContext(proc_ctx, workers=cluster, config=config)
            closers.insert(0, processes.close)
            runners["processes"] = lambda sql: processes.sql(sql).to_arrow_table()
            worker_pids["processes"] = [p.pid for p in cluster.processes]
        out: dict = {"runs": args.runs}
        try:
            for name, sql in queries.items():
                stages = len(embedded.sql(sql).distributed_plan().stages)
                times: dict[str, list[float]] = {m: [] for m in runners}
                cpu: dict[str, float] = dict.fromkeys(runners, 0.0)
                for i in range(args.runs + 5):
                    for mode in runners if i % 2 == 0 else list(runners)[::-1]:
                        cpu0, t0 = cpu_seconds(worker_pids[mode]), time.perf_counter()
                        runners[mode](sql)
                        if i >= 5:  # first runs warm connections and caches
                            times[mode].append(time.perf_counter() - t0)
                            cpu[mode] += cpu_seconds(worker_pids[mode]) - cpu0
                out[name] = {
                    "stages": stages,
                    **{f"{m}_median_ms": median_ms(t) for m, t in times.items()},
                    **{f"{m}_min_ms": min(t) * 1000 for m, t in times.items()},
                    # summed over the runs: /proc counts CPU time in ticks of 10 ms
                    **{f"{m}_cpu_ms": seconds / args.runs * 1000 for m, seconds in cpu.items()},
                }
        finally:
            for close in closers:
                close()
        return out
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def print_fixed(r: dict) -> None:
    print(
        f"fixed cost: median latency of {r['runs']} runs (ms), interleaved; [CPU ms per run: this "
        "process and the worker processes]"
    )
    for name, x in r.items():
        if not isinstance(x, dict):
            continue
        line = f"  {name:<28} stages={x['stages']}  single {x['single_median_ms']:7.2f} [{x['single_cpu_ms']:.1f}]"
        for m in ("embedded", "processes"):
            if f"{m}_median_ms" in x:
                extra = x[f"{m}_median_ms"] - x["single_median_ms"]
                line += f"  {m} {x[f'{m}_median_ms']:7.2f} (+{extra:.2f}) [{x[f'{m}_cpu_ms']:.1f}]"
        print(line)


# -- 3. planning time -------------------------------------------------------------------------
def bench_planning(args) -> dict:
    data = tpch_data(args.sf, 4)
    ctx = SessionContext()
    register_tpch(ctx, data)
    dctx = DistributedContext(
        ctx, workers=["grpc://127.0.0.1:1"] * 2, config=DistributedConfig(partitions_per_task=1)
    )
    planner = dctx.config.planner(2)
    out: dict = {"runs": args.plan_runs}
    for n in (2, 8, 21):
        sql = tpch_query(n)
        df = dctx.sql(sql).df
        physical, parse, stages, whole = [], [], [], []
        for _ in range(args.plan_runs):
            t0 = time.perf_counter()
            dctx.distributed_plan(df)  # what a query pays: session copy, plan, stages, checks
            whole.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            plan = df.execution_plan()
            t1 = time.perf_counter()
            node = PlanNode.from_plan(plan)
            t2 = time.perf_counter()
            distributed = plan_stages(plan, planner)
            t3 = time.perf_counter()
            physical.append(t1 - t0)
            parse.append(t2 - t1)
            stages.append(t3 - t2)
            del node
        out[f"q{n:02d}"] = {
            "stages": len(distributed.stages),
            "tasks": sum(s.task_count for s in distributed.stages),
            "plan_bytes": len(plan.to_bytes()),
            "datafusion_physical_plan_ms": median_ms(physical),
            "plan_node_from_plan_ms": median_ms(parse),
            "plan_stages_incl_from_plan_ms": median_ms(stages),
            "distributed_plan_ms": median_ms(whole),
        }
    return out


def print_planning(r: dict) -> None:
    print(f"planning: median of {r['runs']} runs (ms)")
    for name, x in r.items():
        if not isinstance(x, dict):
            continue
        print(
            f"  {name}: {x['stages']} stages, {x['tasks']} tasks, plan {x['plan_bytes']} bytes; "
            f"DataFusion physical planning {x['datafusion_physical_plan_ms']:.2f}, "
            f"PlanNode.from_plan {x['plan_node_from_plan_ms']:.2f}, plan_stages (incl. from_plan) {x['plan_stages_incl_from_plan_ms']:.2f}; "
            f"DistributedContext.distributed_plan {x['distributed_plan_ms']:.2f}"
        )


BENCHES = {
    "exchange": (bench_exchange, print_exchange),
    "fixed": (bench_fixed, print_fixed),
    "planning": (bench_planning, print_planning),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=sorted(BENCHES), action="append", help="run only these (repeatable)")
    add_common_args(p, helps={"sf": "TPC-H scale factor for exchange/planning"}, sf=1.0)
    p.add_argument("--runs", type=int, default=50, help="runs per trivial query (50)")
    p.add_argument("--exchange-runs", type=int, default=3, help="runs per exchange measurement (3)")
    p.add_argument("--plan-runs", type=int, default=20, help="runs per planning measurement (20)")
    p.add_argument("--no-processes", action="store_true", help="fixed cost: skip the worker-process cluster")
    add_output_arg(p)
    args = p.parse_args(argv)
    result: dict = {"meta": {"timestamp": utc_timestamp()}}
    for name in args.only or list(BENCHES):
        run, show = BENCHES[name]
        result[name] = run(args)
        show(result[name])
        print(flush=True)
    out = result_path(args.output, "micro")
    write_json(out, result)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
