"""A task told to stop stops its work: the wait for its next batch is interrupted, its DataFusion
streams are dropped, and its joins yield often enough for that to abort them.

The plan is a self-join whose hash join produces four billion pairs: tens of seconds of work
that yields no batch until it is done. This process's CPU time shows whether it stopped.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from datafusion import SessionConfig, SessionContext, udf

from datafusion_distributed.execution_plans.plan_node import PlanNode
from datafusion_distributed.metrics.task_metrics import plan_metrics
from datafusion_distributed.runtime import interruption
from datafusion_distributed.runtime.outputs import write_task_outputs
from datafusion_distributed.runtime.streaming import TaskCancelled, stream_partitions
from datafusion_distributed.runtime.task_plan import prepare_task_plan

ROWS = 200_000
GROUPS = 10
HEAVY_SQL = "SELECT count(*) AS n FROM t a JOIN t b ON a.g = b.g WHERE a.k + b.k > 7"
STOP_AFTER = 1.0
IDLE_CORES = 0.25


class Stop(Exception):
    """Raised by a stream's check."""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("heavy")
    for part in range(4):
        keys = pa.array(range(part * ROWS // 4, (part + 1) * ROWS // 4), pa.int64())
        table = pa.table({"k": keys, "g": pc.remainder(keys, GROUPS)})
        pq.write_table(table, folder / f"p{part}.parquet", row_group_size=8192)
    return folder


@pytest.fixture(scope="module")
def ctx(folder):
    ctx = SessionContext()
    ctx.register_parquet("t", str(folder))
    return ctx


def heavy_task_plan(ctx: SessionContext):
    """The heavy query as a task runs it: rebuilt from its bytes by prepare_task_plan."""
    return prepare_task_plan(ctx, ctx.sql(HEAVY_SQL).execution_plan().to_bytes(), [])


def cores_busy(seconds: float = 1.0) -> float:
    cpu, wall = time.process_time(), time.monotonic()
    time.sleep(seconds)
    return (time.process_time() - cpu) / (time.monotonic() - wall)


def busy_until_idle(windows: int = 4) -> list[float]:
    seen: list[float] = []
    while len(seen) < windows and (not seen or seen[-1] >= IDLE_CORES):
        seen.append(round(cores_busy(), 2))
    return seen


def after(seconds: float):
    deadline = time.monotonic() + seconds
    return lambda: time.monotonic() > deadline


@pytest.mark.timeout(300)
def test_a_cancelled_task_stops_while_its_join_runs(ctx, tmp_path):
    plan = heavy_task_plan(ctx)
    started = time.monotonic()
    with pytest.raises(TaskCancelled):
        write_task_outputs(ctx, plan, str(tmp_path), cancelled=after(STOP_AFTER))
    assert time.monotonic() - started < STOP_AFTER + 3  # within a second, not at the join's end
    busy = busy_until_idle()
    assert busy[-1] < IDLE_CORES, f"cores still busy in each second after the task stopped: {busy}"


@pytest.mark.timeout(300)
def test_a_stream_whose_check_raises_stops_its_work(ctx):
    plan = heavy_task_plan(ctx)
    stop = after(STOP_AFTER)

    def check() -> None:
        if stop():
            raise Stop()

    started = time.monotonic()
    with pytest.raises(Stop):
        list(stream_partitions(ctx, plan, check=check))
    assert time.monotonic() - started < STOP_AFTER + 3  # the wait ends within a second
    busy = busy_until_idle()
    assert busy[-1] < IDLE_CORES, f"cores still busy in each second after the stream stopped: {busy}"


def test_the_yield_points_a_task_adds_are_invisible_to_its_metrics(ctx):
    """Metrics are matched to the stage's plan node by node: the executed plan's extra
    CooperativeExec above each join must not shift them."""
    sql = """SELECT a.k, c.k FROM t a JOIN t b ON a.k = b.k CROSS JOIN (SELECT k FROM t WHERE k < 2) c
             WHERE a.k < 5 ORDER BY a.k, c.k"""
    original = ctx.sql(sql).execution_plan()
    task_plan = prepare_task_plan(ctx, original.to_bytes(), [])
    assert task_plan.display_indent().count("CooperativeExec") == 2  # over each join
    assert list(stream_partitions(ctx, task_plan))  # metrics are read from an executed plan
    names = [n.name for n in PlanNode.from_plan(original).walk()]
    assert [n.name for n in plan_metrics(task_plan).walk()] == names


@pytest.mark.timeout(300)
def test_a_failing_partition_stops_the_others_of_its_task(ctx, tmp_path):
    """One partition fails at once while another is inside the join: the task fails with the
    first error right away, not when the join is done, and the join's work stops."""

    def boom(values: pa.Array) -> pa.Array:
        raise ValueError("boom")

    ctx.register_udf(udf(boom, [pa.int64()], pa.int64(), "volatile", "boom"))
    sql = f"SELECT boom(k) AS n FROM t WHERE k < 10 UNION ALL {HEAVY_SQL}"
    plan = prepare_task_plan(ctx, ctx.sql(sql).execution_plan().to_bytes(), [])
    assert plan.partition_count > 1
    started = time.monotonic()
    with pytest.raises(Exception, match="boom"):
        write_task_outputs(ctx, plan, str(tmp_path))
    assert time.monotonic() - started < 4
    busy = busy_until_idle()
    assert busy[-1] < IDLE_CORES, f"cores still busy in each second after the task failed: {busy}"


def test_an_interrupted_wait_leaves_no_exception_behind(folder, monkeypatch):
    """Stopped at many points of a stream whose batches a Python UDF computes in the reading
    thread (0.1 s each), so that the wait is interrupted: reading raises the check's exception,
    never the interruption, and the thread then runs on without a stray exception."""
    sent = []
    set_async_exc = interruption._set_async_exc
    monkeypatch.setattr(
        interruption, "_set_async_exc", lambda t, exc: (sent.append(exc), set_async_exc(t, exc))
    )
    small = SessionContext(SessionConfig().with_target_partitions(1))
    small.register_parquet("t", str(folder))

    def slow(values: pa.Array) -> pa.Array:
        time.sleep(0.1)
        return values

    small.register_udf(udf(slow, [pa.int64()], pa.int64(), "volatile", "slow"))
    # Until four waits were interrupted (a loaded machine may stop more of them between
    # batches, which tests nothing here), at most 40 tries.
    for attempt in range(40):
        if sent.count(interruption._Interrupt) >= 4:
            break
        plan = small.sql("SELECT slow(k) AS k FROM t").execution_plan()  # a scan runs once
        stop = after(0.05 + (attempt % 8) * 0.037)

        def check(stop=stop) -> None:
            if stop():
                raise Stop()

        with pytest.raises(Stop):
            for _ in stream_partitions(small, plan, check=check):
                pass
        for _ in range(100):  # a pending interruption would be raised here
            time.sleep(0.001)
    assert sent.count(interruption._Interrupt) >= 4  # the waits were interrupted


def test_an_interruption_lost_in_other_python_code_is_raised_again(folder):
    """Python code that runs in the waiting thread for something else (a gc callback, whose
    exceptions Python ignores) may receive the interruption and drop it: the watchdog raises
    it again while the thread stays inside the wait, so the task still stops."""
    small = SessionContext(SessionConfig().with_target_partitions(1))
    small.register_parquet("t", str(folder))
    dropped = []

    def stubborn(values: pa.Array) -> pa.Array:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                time.sleep(0.01)
            except interruption._Interrupt:
                if dropped:
                    raise
                dropped.append(time.monotonic())  # the first one is lost, as in a gc callback
        return values

    small.register_udf(udf(stubborn, [pa.int64()], pa.int64(), "volatile", "stubborn"))
    plan = small.sql("SELECT stubborn(k) AS k FROM t").execution_plan()
    stop = after(0.2)

    def check() -> None:
        if stop():
            raise Stop()

    started = time.monotonic()
    with pytest.raises(Stop):
        for _ in stream_partitions(small, plan, check=check):
            pass
    assert dropped, "the wait was never interrupted"
    assert time.monotonic() - started < 0.2 + interruption.REARM_SECONDS + 3
