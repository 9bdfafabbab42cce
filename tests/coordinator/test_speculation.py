"""Speculative execution: a straggler gets a second attempt on another worker, the first attempt
to finish wins, and the other is stopped. The straggler is made deterministic by a worker-side
plan-rewrite handler that holds back one attempt of one task before it runs."""

from __future__ import annotations

import logging
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, EmbeddedCluster, QueryFailed
from datafusion_distributed.events import EventKind
from datafusion_distributed.protocol.messages import TaskKey
from datafusion_distributed.test_utils.recorder import EventRecorder

SQL = "SELECT g, count(*) AS n, sum(k) AS total FROM t GROUP BY g ORDER BY g"
SLOW = 4.0  # seconds the straggling attempt is held back
SPECULATE = DistributedConfig(
    bytes_per_partition=1024, speculation=True, speculation_min_seconds=0.3, speculation_factor=2.0
)


class HoldBack:
    """Holds back (or fails) chosen attempts of stage 0's tasks before they run, on any worker."""

    def __init__(self) -> None:
        self.hold: dict[tuple[int, int], float] = {}  # (task, attempt) -> seconds
        self.fail: set[tuple[int, int]] = set()  # (task, attempt)
        self.held: list[tuple[int, int, str]] = []  # (task, attempt, worker) held back

    def rewrite_plan(self, request):
        if request.stage != 0:
            return None
        key = (request.task, request.attempt)
        if key in self.hold:
            self.held.append((request.task, request.attempt, request.worker))
            time.sleep(self.hold[key])
        if key in self.fail:
            raise RuntimeError(f"task {request.task} attempt {request.attempt} broke")
        return None


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    folder = tmp_path_factory.mktemp("speculation")
    for p in range(6):
        keys = pa.array(range(p * 20_000, (p + 1) * 20_000), pa.int64())
        pq.write_table(pa.table({"k": keys, "g": pa.compute.remainder(keys, 7)}), folder / f"p{p}.parquet")
    ctx = SessionContext()
    ctx.register_parquet("t", str(folder))
    return ctx


@pytest.fixture(scope="module")
def hold_back():
    return HoldBack()


@pytest.fixture(scope="module")
def cluster(hold_back):
    with EmbeddedCluster(3, handlers=[hold_back]) as c:
        yield c


@pytest.fixture(autouse=True)
def fresh(hold_back):
    hold_back.hold.clear()
    hold_back.fail.clear()
    hold_back.held.clear()


def run(ctx, cluster, config: DistributedConfig, *handlers) -> tuple[list[dict], EventRecorder, float]:
    recorder = EventRecorder()
    with DistributedContext(ctx, workers=cluster, config=config, handlers=[recorder, *handlers]) as dctx:
        df = dctx.sql(SQL)
        assert len(df.distributed_plan().stages[0].tasks) == 3  # one task on each worker
        started = time.monotonic()
        rows = df.to_pylist()
        return rows, recorder, time.monotonic() - started


def attempts(
    recorder: EventRecorder, kind: EventKind, stage: int = 0, task: int = 0
) -> list[tuple[int, str]]:
    return [
        (e.attempt, e.worker)
        for e in recorder.events
        if e.kind is kind and (e.stage, e.task) == (stage, task)
    ]


class LoserStopped:
    """Once stage 0 has finished (the query still runs), whether the losing attempt of task 0
    was cancelled on its worker by itself, not with its query."""

    def __init__(self, cluster: EmbeddedCluster, hold_back: HoldBack):
        self.cluster, self.hold_back = cluster, hold_back
        self.seen: bool | None = None

    def on_event(self, event) -> None:
        if event.kind is not EventKind.STAGE_FINISHED or event.stage != 0:
            return
        (_, _, url) = self.hold_back.held[0]
        (worker,) = [w for w in self.cluster.workers if w.url == url]
        loser = TaskKey(event.query_id, 0, 0, 0)
        deadline = time.monotonic() + 5
        while not worker._cancelled.is_cancelled(loser) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.seen = worker._cancelled.is_cancelled(loser) and not worker._cancelled.is_cancelled(
            event.query_id
        )


def test_the_speculative_attempt_wins_and_the_straggler_is_stopped(ctx, cluster, hold_back, caplog):
    hold_back.hold[0, 0] = SLOW
    stopped = LoserStopped(cluster, hold_back)
    with caplog.at_level(logging.DEBUG, logger="datafusion_distributed"):
        rows, recorder, seconds = run(ctx, cluster, SPECULATE, stopped)
        assert stopped.seen, "the losing attempt was not cancelled while the query ran"
        assert rows == ctx.sql(SQL).to_pylist()
        assert seconds < SLOW - 1, "the query waited for the straggler"
        ((_, _, slow_worker),) = hold_back.held
        started = attempts(recorder, EventKind.TASK_STARTED)
        assert started[0] == (0, slow_worker) and len(started) == 2
        speculative, elsewhere = started[1]
        assert speculative > 0 and elsewhere != slow_worker
        assert attempts(recorder, EventKind.TASK_FINISHED) == [(speculative, elsewhere)]
        (finished,) = [e for e in recorder.events if e.kind is EventKind.QUERY_FINISHED]
        assert finished.metrics.stages[0].tasks[0].attempt == speculative  # the winner is what ran
        assert any("straggler" in r.message and r.levelno == logging.INFO for r in caplog.records)
        time.sleep(SLOW - seconds + 1.5)  # the held-back attempt goes on: it must stop at once
    assert [r for r in caplog.records if "stage 0 task 0 cancelled" in r.message]  # it never ran its plan
    assert cluster.spool_files() == []


def test_off_by_default_the_query_waits_for_the_straggler(ctx, cluster, hold_back):
    assert DistributedConfig().speculation is False
    hold_back.hold[0, 0] = 1.5
    rows, recorder, seconds = run(ctx, cluster, DistributedConfig(bytes_per_partition=1024))
    assert rows == ctx.sql(SQL).to_pylist()
    assert seconds >= 1.5
    assert all(e.attempt == 0 for e in recorder.events if e.kind is EventKind.TASK_STARTED)


def test_a_stage_whose_tasks_are_all_slow_is_not_speculated(ctx, cluster, hold_back):
    for task in range(3):
        hold_back.hold[task, 0] = 1.5
    rows, recorder, _ = run(ctx, cluster, SPECULATE)
    assert rows == ctx.sql(SQL).to_pylist()
    assert all(e.attempt == 0 for e in recorder.events if e.kind is EventKind.TASK_STARTED)


def test_a_failed_speculative_attempt_costs_nothing_when_the_first_succeeds(ctx, cluster, hold_back):
    hold_back.hold[0, 0] = 1.5
    hold_back.fail.update((0, attempt) for attempt in range(1, 5))
    rows, recorder, _ = run(ctx, cluster, SPECULATE)
    assert rows == ctx.sql(SQL).to_pylist()
    (failed,) = attempts(recorder, EventKind.TASK_FAILED)
    assert failed[0] > 0
    assert [a for a, _ in attempts(recorder, EventKind.TASK_FINISHED)] == [0]


def test_both_attempts_failing_fails_the_query_with_the_real_error(ctx, cluster, hold_back):
    hold_back.hold[0, 0] = 1.5
    hold_back.fail.update((0, attempt) for attempt in range(5))
    with pytest.raises(QueryFailed, match="task 0 attempt 0 broke|task 0 attempt 1 broke"):
        run(ctx, cluster, SPECULATE)
    assert cluster.spool_files() == []
