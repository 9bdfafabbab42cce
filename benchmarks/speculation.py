"""Speculative execution of stragglers: TPC-H with speculation on and off, with one worker
slowed down and with none, side by side in one run.

    python benchmarks/speculation.py --sf 1 --queries 1,3,9,18 --iterations 2

One ``LocalCluster`` of ``--workers`` worker processes serves two contexts, one with
``DistributedConfig(speculation=True)`` and one without (the default). A worker is slowed by
stopping its process with SIGSTOP and letting it go with SIGCONT, over and over while a query
runs (``--stop`` seconds stopped, ``--run`` seconds running: by default it gets a fifth of the
time it would have), and always let go at the end, also on Ctrl-C. It still answers the
coordinator's liveness probes within a fraction of a second, so it is slow, never lost.

Sides, interleaved query by query (their order alternating between iterations): ``off`` and
``on`` undisturbed, ``off slowed`` and ``on slowed`` with worker 0 slowed. Every answer is
checked against single-node DataFusion's. Per query it prints the median seconds of each side,
and for the speculating sides the extra attempts started and how many of them won. Results
go to ``benchmarks/results/`` as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import statistics
import threading
import time
from contextlib import contextmanager

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
from datafusion_distributed.test_utils.tpch import register_tpch, tpch_data, tpch_query

SIDES = ("off", "on", "off slowed", "on slowed")


class Attempts:
    """An event handler counting the speculative attempts started and those that won."""

    def __init__(self) -> None:
        self.started = self.won = 0

    def on_event(self, event) -> None:
        if event.kind is EventKind.TASK_STARTED and event.attempt > 0:
            self.started += 1
        if event.kind is EventKind.TASK_FINISHED and event.attempt > 0:
            self.won += 1


@contextmanager
def slowed(pid: int, stop: float, run: float):
    """Keep process `pid` stopped `stop` seconds out of every `stop + run` while the block runs."""
    done = threading.Event()

    def throttle() -> None:
        while not done.is_set():
            os.kill(pid, signal.SIGSTOP)
            done.wait(stop)
            os.kill(pid, signal.SIGCONT)
            done.wait(run)

    thread = threading.Thread(target=throttle, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        os.kill(pid, signal.SIGCONT)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_args(parser, sf=1.0, workers=3, iterations=2, queries="1,3,9,18")
    parser.add_argument(
        "--stop", type=float, default=0.4, help="seconds the slowed worker is stopped (default 0.4)"
    )
    parser.add_argument("--run", type=float, default=0.1, help="seconds it then runs (default 0.1)")
    parser.add_argument(
        "--min-seconds", type=float, default=None, help="speculation_min_seconds (default: the setting's)"
    )
    add_output_arg(parser)
    args = parser.parse_args()
    queries = query_numbers(args.queries)

    single = SessionContext(SessionConfig().with_target_partitions(args.workers * 2))
    register_tpch(single, tpch_data(args.sf))
    seconds: dict[int, dict[str, list[float]]] = {q: {s: [] for s in SIDES} for q in queries}
    counts = {s: Attempts() for s in SIDES if s.startswith("on")}
    with LocalCluster(args.workers) as cluster:
        contexts = {}
        for side in SIDES:
            handlers = [counts[side]] if side in counts else []
            config = DistributedConfig(speculation=side.startswith("on"))
            if args.min_seconds is not None:
                config = dataclasses.replace(config, speculation_min_seconds=args.min_seconds)
            contexts[side] = DistributedContext(single, workers=cluster, config=config, handlers=handlers)
        slow_pid = cluster.processes[0].pid
        for q in queries:
            sql = tpch_query(q)
            expected = single.sql(sql).to_arrow_table()
            for iteration in range(args.iterations):
                order = SIDES if iteration % 2 == 0 else SIDES[::-1]
                for side in order:
                    with slowed(slow_pid, args.stop, args.run) if "slowed" in side else _nothing():
                        started = time.perf_counter()
                        answer = contexts[side].sql(sql).to_arrow_table()
                        seconds[q][side].append(time.perf_counter() - started)
                    assert_tables_equal(answer, expected, sql=sql)
            medians = {s: statistics.median(v) for s, v in seconds[q].items()}
            print(f"q{q:02d} " + "  ".join(f"{s}: {medians[s]:6.2f}s" for s in SIDES), flush=True)
        for context in contexts.values():
            context.close()
    for side, count in counts.items():
        print(f"{side}: {count.started} speculative attempt(s) started, {count.won} won")
    result = {
        "measured_at": utc_timestamp(),
        "commit": git_commit(),
        "args": vars(args),
        "seconds": {f"q{q}": v for q, v in seconds.items()},
        "speculative_attempts": {s: {"started": c.started, "won": c.won} for s, c in counts.items()},
    }
    path = result_path(args.output, "speculation")
    write_json(path, result)
    print(f"results: {path}")


@contextmanager
def _nothing():
    yield


if __name__ == "__main__":
    main()
