"""Threads kept between tasks and queries: every partition of a plan gets one at once, inputs
are located a few at a time, and tasks leave no threads behind."""

import threading
import time

import pyarrow as pa
import pytest
from datafusion import SessionConfig, SessionContext

from datafusion_distributed.common.threads import kept_threads, map_concurrently
from datafusion_distributed.runtime.outputs import write_task_outputs
from datafusion_distributed.runtime.streaming import stream_partitions

PARTITIONS = 48  # more than any fixed pool a worker would keep


def test_partitions_waiting_for_each_other_are_never_queued():
    # Partitions of one plan can wait for each other: if the pool queued some behind others,
    # the ones running would wait forever. A barrier of all of them passes only if all run.
    barrier = threading.Barrier(PARTITIONS, timeout=20)
    futures = [kept_threads.submit(barrier.wait) for _ in range(PARTITIONS)]
    assert sorted(f.result(timeout=30) for f in futures) == list(range(PARTITIONS))


def test_tasks_leave_no_threads_behind():
    ctx = SessionContext(SessionConfig().with_target_partitions(4))
    ctx.register_record_batches("t", [pa.table({"k": list(range(100))}).to_batches(max_chunksize=10)])
    for _ in range(3):  # warm: the pool holds idle threads for this many partitions
        list(stream_partitions(ctx, ctx.sql("SELECT k FROM t WHERE k > 5").execution_plan()))
    started = threading.active_count()
    for _ in range(10):
        assert (
            sum(b.num_rows for b in stream_partitions(ctx, ctx.sql("SELECT k FROM t").execution_plan()))
            == 100
        )
    assert threading.active_count() <= started  # threads of earlier tests may end meanwhile


def test_a_wide_join_runs_through_the_shared_threads(tmp_path):
    ctx = SessionContext(SessionConfig().with_target_partitions(PARTITIONS))
    build = pa.table({"k": pa.array(range(1000)), "v": pa.array(range(1000))})
    probe = pa.table({"k": pa.array([i % 1000 for i in range(20_000)])})
    ctx.register_record_batches("build", [build.to_batches(max_chunksize=10)])
    ctx.register_record_batches("probe", [probe.to_batches(max_chunksize=100)])
    plan = ctx.sql("SELECT probe.k, build.v FROM probe JOIN build ON probe.k = build.k").execution_plan()
    assert plan.partition_count == PARTITIONS
    assert write_task_outputs(ctx, plan, str(tmp_path)).rows == 20_000


def test_map_concurrently_keeps_order_bounds_concurrency_and_waits_for_all():
    running, most, ended = 0, 0, []
    lock = threading.Lock()

    def work(i):
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.01)
        with lock:
            running -= 1
            ended.append(i)
        if i == 3:
            raise ValueError("item 3")
        return i * 10

    assert map_concurrently(lambda i: i * 10, list(range(20)), 4) == [i * 10 for i in range(20)]
    with pytest.raises(ValueError, match="item 3"):
        map_concurrently(work, list(range(20)), 4)
    assert most == 4 and sorted(ended) == list(range(20))  # the others still ran to their end
    assert map_concurrently(work, [], 4) == []
