"""Rolling restarts and scaling while TPC-H queries run: what changing a cluster's workers costs
the queries running on it.

    python benchmarks/rolling_restart.py --sf 1 --seconds 90

A ``LocalCluster`` of ``--workers`` worker processes that share nothing (each with a spool of
its own, every exchange over Arrow Flight, as on separate machines) is the coordinator's
resolver. TPC-H queries (``--queries``, in turn) run one after another for ``--seconds``; each
answer is checked against single-node DataFusion's. Meanwhile every worker is replaced in turn,
evenly spaced over the run: a new worker is started and listed, then the old one gets SIGTERM
and drains (``LocalCluster.replace``). Then, unless ``--no-scale``, the cluster grows by
``--add`` workers while a query runs, and the tasks that query and the next ones give the new
workers are counted; last it shrinks back, draining the workers it added.

It prints, and writes as JSON to ``benchmarks/results/``: queries run and failed, wrong answers,
workers lost and found draining, tasks run again, each drained worker's exit code, and the tasks
the added workers ran.
"""

from __future__ import annotations

import argparse
import threading
import time

from common import (
    add_common_args,
    add_output_arg,
    git_commit,
    query_numbers,
    result_path,
    utc_timestamp,
    write_json,
)
from datafusion import SessionConfig, SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.events import EventKind
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.forced import FORCED_CONFIG
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data, tpch_query


class Tally:
    """A handler counting what the cluster's changes cost the queries."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lost: list[str] = []
        self.draining: list[str] = []
        self.failed_tasks = 0
        self.rerun_tasks = 0
        self.tasks_on: dict[str, int] = {}

    def on_event(self, event) -> None:
        with self.lock:
            if event.kind is EventKind.WORKER_UNREACHABLE:
                self.lost.append(event.worker)
            elif event.kind is EventKind.WORKER_DRAINING:
                self.draining.append(event.worker)
            elif event.kind is EventKind.TASK_FAILED:
                self.failed_tasks += 1
            elif event.kind is EventKind.TASK_FINISHED:
                self.tasks_on[event.worker] = self.tasks_on.get(event.worker, 0) + 1
            elif event.kind is EventKind.QUERY_FINISHED or event.kind is EventKind.QUERY_FAILED:
                self.rerun_tasks += event.metrics.rerun_tasks


class Queries:
    """TPC-H queries one after another on a thread, each answer checked, until stopped."""

    def __init__(self, dctx: DistributedContext, single: SessionContext, queries: list[int]):
        self.dctx, self.queries = dctx, queries
        self.expected = {q: single.sql(tpch_query(q)).to_arrow_table() for q in queries}
        self.done: list[tuple[int, float]] = []
        self.failures: list[str] = []
        self.wrong: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            q = self.queries[i % len(self.queries)]
            i += 1
            started = time.perf_counter()
            try:
                answer = self.dctx.sql(tpch_query(q)).to_arrow_table()
            except Exception as exc:  # counted and reported: the run goes on
                self.failures.append(f"q{q:02d}: {type(exc).__name__}: {exc}")
                continue
            try:
                assert_tables_equal(answer, self.expected[q], sql=tpch_query(q))
            except AssertionError as exc:
                self.wrong.append(f"q{q:02d}: {exc}")
            self.done.append((q, time.perf_counter() - started))


def wait_for_queries(run: Queries, n: int, timeout: float = 300.0) -> None:
    """Wait until `n` more queries have finished (at most `timeout` seconds)."""
    deadline, target = time.monotonic() + timeout, len(run.done) + n
    while len(run.done) < target and run.thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(parser, sf=1.0, workers=3, queries="1,3,5,9,18")
    parser.add_argument("--seconds", type=float, default=90.0, help="how long queries run (default 90)")
    parser.add_argument("--add", type=int, default=2, help="workers added at the end (default 2)")
    parser.add_argument("--no-scale", action="store_true", help="only the rolling restart")
    parser.add_argument(
        "--drain-timeout", type=float, default=25.0, help="each worker's --drain-timeout (default 25)"
    )
    parser.add_argument(
        "--forced",
        action="store_true",
        help="split every stage over the workers, as on large data (for tiny scale factors)",
    )
    add_output_arg(parser)
    args = parser.parse_args()
    queries = query_numbers(args.queries)

    single = SessionContext(SessionConfig().with_target_partitions(args.workers * 2))
    register_tpch(single, tpch_data(args.sf))
    tally = Tally()
    codes: list[int] = []
    added: list[str] = []
    added_tasks = 0
    with LocalCluster(args.workers, share_spools=False, drain_timeout=args.drain_timeout) as cluster:
        first = list(cluster.urls)
        config = FORCED_CONFIG if args.forced else DistributedConfig()
        with DistributedContext(single, workers=cluster, config=config, handlers=[tally]) as dctx:
            run = Queries(dctx, single, queries)
            started = time.monotonic()
            run.thread.start()
            for i in range(args.workers):  # evenly spaced over the run, the last well before its end
                time.sleep(max(0.0, started + args.seconds * (i + 1) / (args.workers + 2) - time.monotonic()))
                at = time.monotonic() - started
                codes.append(cluster.replace(i))
                print(f"{at:6.1f}s  worker {i} replaced: the old one exited {codes[-1]}", flush=True)
            if not args.no_scale:
                time.sleep(
                    max(
                        0.0,
                        started + args.seconds * (args.workers + 1) / (args.workers + 2) - time.monotonic(),
                    )
                )
                before = set(cluster.urls)
                cluster.scale(args.workers + args.add)
                added = sorted(set(cluster.urls) - before)
                print(f"{time.monotonic() - started:6.1f}s  {len(added)} worker(s) added", flush=True)
                wait_for_queries(run, 3)  # some start after the workers joined, however short the run
            time.sleep(max(0.0, started + args.seconds - time.monotonic()))
            run.stop.set()
            run.thread.join()
            with tally.lock:
                added_tasks = sum(tally.tasks_on.get(url, 0) for url in added)
            if added:
                scaled_down = cluster.scale(args.workers)
                codes += scaled_down
                print(f"scaled back to {args.workers}: the drained workers exited {scaled_down}", flush=True)
        replaced = not set(first) & set(cluster.urls)

    print(f"queries: {len(run.done)} run, {len(run.failures)} failed, {len(run.wrong)} wrong answers")
    print(
        f"workers: {len(tally.lost)} lost, {len(set(tally.draining))} found draining, all replaced: {replaced}"
    )
    print(f"tasks: {tally.rerun_tasks} run again, {tally.failed_tasks} failed attempts")
    print(f"exit codes of drained workers: {codes}")
    if added:
        print(f"tasks run by the {len(added)} added workers: {added_tasks}")
    for failure in run.failures + run.wrong:
        print("  ", failure[:300])
    path = result_path(args.output, "rolling_restart")
    write_json(
        path,
        {
            "measured_at": utc_timestamp(),
            "commit": git_commit(),
            "sf": args.sf,
            "workers": args.workers,
            "seconds": args.seconds,
            "forced": args.forced,
            "queries": queries,
            "queries_run": len(run.done),
            "query_seconds": run.done,
            "failures": run.failures,
            "wrong_answers": run.wrong,
            "lost_workers": tally.lost,
            "draining_workers": sorted(set(tally.draining)),
            "rerun_tasks": tally.rerun_tasks,
            "failed_task_attempts": tally.failed_tasks,
            "exit_codes": codes,
            "added_workers": added,
            "tasks_on_added_workers": added_tasks,
        },
    )
    print(f"written to {path}")
    ok = (
        not run.failures and not run.wrong and not tally.lost and tally.rerun_tasks == 0 and set(codes) <= {0}
    )
    raise SystemExit(0 if ok and (not added or added_tasks > 0) else 1)


if __name__ == "__main__":
    main()
