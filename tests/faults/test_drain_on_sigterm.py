"""Worker processes given SIGTERM (or the `drain` command) drain: the task they run finishes
there and nothing is recomputed, unless the grace period (`--drain-timeout`) ends first; then
only that task runs again elsewhere. Either way the worker exits 0, and a second SIGTERM ends
the wait at once.

The tasks are slowed by a Python UDF that sleeps on every batch (it travels inside the plan),
so a signal lands while one runs."""

from __future__ import annotations

import os
import signal
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext, udf

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.events import EventKind
from datafusion_distributed.protocol.auth import TOKEN_ENV
from datafusion_distributed.test_utils.recorder import EventRecorder

FILES, ROWS = 4, 1000
CONFIG = DistributedConfig(partitions_per_task=1, bytes_per_partition=1, adaptive=False)
SQL = "SELECT sum(slow(k)) AS s FROM t"
ANSWER = FILES * ROWS * (FILES * ROWS - 1) // 2


def slow_udf(seconds: float, marks: str):
    """`slow(k) = k`, sleeping `seconds` per batch, after leaving a file named by its process id
    in the folder `marks` (a closure: pickled by value, for the workers)."""

    def slow(values: pa.Array) -> pa.Array:
        open(os.path.join(marks, str(os.getpid())), "a").close()
        time.sleep(seconds)
        return values

    return udf(slow, [pa.int64()], pa.int64(), "volatile", name="slow")


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    folder = tmp_path_factory.mktemp("drain")
    for part in range(FILES):
        keys = pa.array(range(part * ROWS, (part + 1) * ROWS), pa.int64())
        pq.write_table(pa.table({"k": keys}), folder / f"p{part}.parquet")
    return str(folder)


class SignalWhenRunning:
    """Calls `act` once, on a thread of its own, `delay` seconds after a task of the query is
    seen running in worker process `pid` (its UDF left a mark): a drain waits for the query,
    so it cannot be waited for by the thread running it."""

    def __init__(self, pid: int, marks: str, delay: float, act):
        self.mark, self.delay, self.act = os.path.join(marks, str(pid)), delay, act
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        deadline = time.monotonic() + 120
        while not os.path.exists(self.mark) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(self.delay)
        self.act()


def run_query(table: str, cluster, seconds_per_batch: float, marks: str, handlers=()) -> int:
    ctx = SessionContext()
    ctx.register_parquet("t", table)
    ctx.register_udf(slow_udf(seconds_per_batch, marks))
    with DistributedContext(ctx, workers=cluster, config=CONFIG, handlers=list(handlers)) as dctx:
        return dctx.sql(SQL).to_pylist()[0]["s"]


def finished_on(recorder, worker):
    return [e for e in recorder.events if e.kind is EventKind.TASK_FINISHED and e.worker == worker]


def test_sigterm_lets_the_running_task_finish_and_nothing_is_recomputed(table, tmp_path):
    with LocalCluster(2, share_spools=False, drain_timeout=30) as cluster:
        victim, pid = cluster.urls[0], cluster.processes[0].pid
        codes: list[int] = []
        drainer = SignalWhenRunning(pid, str(tmp_path), 0.3, lambda: codes.append(cluster.drain(0)))
        recorder = EventRecorder()
        assert run_query(table, cluster, 1.5, str(tmp_path), [recorder]) == ANSWER
        drainer.thread.join(60)
        assert codes == [0]
        assert finished_on(recorder, victim)  # its task finished there, after the SIGTERM
        assert recorder.lost() == []
        assert not [e for e in recorder.events if e.kind is EventKind.TASK_FAILED]
        assert cluster.urls and victim not in cluster.urls


def test_a_grace_period_ending_mid_task_costs_only_that_task(table, tmp_path):
    with LocalCluster(2, share_spools=False, drain_timeout=0.5) as cluster:
        victim, pid = cluster.urls[0], cluster.processes[0].pid
        codes: list[int] = []
        drainer = SignalWhenRunning(pid, str(tmp_path), 0.1, lambda: codes.append(cluster.drain(0)))
        recorder = EventRecorder()
        assert run_query(table, cluster, 2.0, str(tmp_path), [recorder]) == ANSWER
        drainer.thread.join(60)
        assert codes == [0]
        assert recorder.lost() == [victim]  # it left with a task unfinished: run again elsewhere
        rerun = [e for e in recorder.events if e.kind is EventKind.TASK_STARTED and e.attempt]
        assert rerun and all(e.worker != victim for e in rerun)


def test_a_second_sigterm_exits_at_once(table, tmp_path):
    with LocalCluster(2, share_spools=False, drain_timeout=60) as cluster:
        process = cluster.processes[0]
        seen = threading.Event()
        SignalWhenRunning(process.pid, str(tmp_path), 0.2, seen.set)
        answers: list[int] = []
        runner = threading.Thread(
            target=lambda: answers.append(run_query(table, cluster, 2.0, str(tmp_path)))
        )
        runner.start()
        assert seen.wait(120)
        process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert process.poll() is None  # draining: waiting for its task
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(10) == 0
        assert time.monotonic() - signalled < 5
        runner.join(120)
        assert answers == [ANSWER]  # its task ran again on the other worker


def test_the_drain_command_drains_a_worker_which_then_exits_0(run_cli, monkeypatch):
    with LocalCluster(1, share_spools=False) as cluster:
        monkeypatch.setenv(TOKEN_ENV, cluster.auth_token)
        process = cluster.processes[0]
        result = run_cli("drain", cluster.urls[0], "--wait", "--timeout", "20")
        assert result.returncode == 0, result.stderr
        assert result.stdout.count(f"{cluster.urls[0]}: drained") == 1  # once printed twice
        assert process.wait(20) == 0


def test_the_drain_command_fails_naming_a_worker_it_cannot_reach(run_cli, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, "x" * 32)
    result = run_cli("drain", "grpc://127.0.0.1:9", "--connect-timeout", "2")
    assert result.returncode == 1
    assert "could not drain grpc://127.0.0.1:9" in result.stderr
    assert os.environ[TOKEN_ENV]
