"""A worker one query lost is avoided by the next ones until it answers again: a dead worker is
not retried and logged by every query, and a hung one does not cost every query the liveness
timeout (once about 10 s each)."""

from __future__ import annotations

import os
import signal
import socket
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, LocalCluster
from datafusion_distributed.coordinator import quarantine
from datafusion_distributed.coordinator.quarantine import WorkerQuarantine
from datafusion_distributed.events import DistributedHandler, EventKind
from datafusion_distributed.protocol.flight import ClientConfig, ClientPool
from datafusion_distributed.worker.flight_worker import FlightWorker

SQL = "SELECT g, count(*) AS n, sum(v) AS s FROM t GROUP BY g ORDER BY g"


def _closed_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"grpc://127.0.0.1:{s.getsockname()[1]}"


def _wait(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_a_worker_is_asked_again_with_backoff_and_released_when_it_answers(tmp_path, monkeypatch):
    monkeypatch.setattr(quarantine, "FIRST_BACKOFF", 0.1)
    worker = FlightWorker(str(tmp_path / "spool"), auth_token="t" * 32)
    dead = _closed_url()
    pool = ClientPool(ClientConfig(2.0, 10.0, auth_token="t" * 32))
    held = WorkerQuarantine(pool)
    try:
        held.add(worker.url)
        held.add(dead)
        assert held.marked() == {worker.url, dead}
        assert _wait(lambda: held.marked() == {dead}, 5)  # the live one answered: released
        time.sleep(1.0)
        assert held.marked() == {dead}  # still away: kept, asked less and less often
    finally:
        held.close()
        pool.close()
        worker.stop()


class Recorder(DistributedHandler):
    """The workers each task attempt of a query started on, and the workers found lost."""

    def __init__(self):
        self.started: list[str] = []
        self.unreachable: list[str] = []
        self.quarantine: list[tuple[str, str, str]] = []

    def on_event(self, event):
        if event.kind is EventKind.TASK_STARTED:
            self.started.append(event.worker)
        elif event.kind is EventKind.WORKER_UNREACHABLE:
            self.unreachable.append(event.worker)
        elif event.kind in (EventKind.WORKER_QUARANTINED, EventKind.WORKER_RESTORED):
            self.quarantine.append((event.kind.value, event.worker, event.query_id))


@pytest.fixture
def table(tmp_path):
    for i in range(6):
        pq.write_table(pa.table({"g": [i % 3] * 200, "v": list(range(200))}), tmp_path / f"part-{i}.parquet")
    return str(tmp_path)


def test_a_hung_worker_costs_one_query_its_timeout_and_the_next_ones_nothing(table, monkeypatch):
    monkeypatch.setattr(quarantine, "FIRST_BACKOFF", 0.2)
    ctx = SessionContext()
    ctx.register_parquet("t", table)
    expected = ctx.sql(SQL).to_pylist()
    with LocalCluster(3) as cluster:
        config = DistributedConfig(
            bytes_per_partition=1024, liveness_timeout=1.0, auth_token=cluster.auth_token
        )
        recorder = Recorder()
        with DistributedContext(ctx, workers=cluster, config=config, handlers=[recorder]) as dctx:
            hung = cluster.get_urls()[0]
            assert dctx.sql(SQL).distributed_plan().is_distributed
            os.kill(cluster.processes[0].pid, signal.SIGSTOP)
            try:
                assert dctx.sql(SQL).to_pylist() == expected  # finds it lost, reruns elsewhere
                assert hung in recorder.unreachable
                assert hung in dctx.engine.liveness.quarantine.marked()
                recorder.started.clear()
                started = time.monotonic()
                assert dctx.sql(SQL).to_pylist() == expected
                assert time.monotonic() - started < 1.0  # no liveness timeout paid again
                assert recorder.started and hung not in recorder.started
            finally:
                os.kill(cluster.processes[0].pid, signal.SIGCONT)
            # back: its quarantine ends at the next ask, and queries use it again
            assert _wait(lambda: hung not in dctx.engine.liveness.quarantine.marked(), 10)
            recorder.started.clear()
            assert dctx.sql(SQL).to_pylist() == expected
            assert hung in recorder.started
            assert recorder.quarantine == [("worker_quarantined", hung, ""), ("worker_restored", hung, "")]
