"""A worker's drain (`worker.drain`): from the moment it begins, new tasks are refused before
they do anything; running tasks and the outputs queries still hold are waited for, and only
they."""

from __future__ import annotations

import threading
import time

import pytest

from datafusion_distributed import FlightWorker
from datafusion_distributed.protocol.flight import ClientConfig, WorkerClient
from datafusion_distributed.worker.drain import DRAINED, DRAINING, SERVING, Drain, TaskRefused


def test_a_drain_refuses_new_tasks_and_waits_for_the_running_ones():
    drain = Drain(lambda: [])
    drain.task_begins("task a")
    assert drain.state() == SERVING
    assert drain.start() is True and drain.start() is False  # begun once
    with pytest.raises(TaskRefused, match="task b refused: the worker is draining"):
        drain.task_begins("task b")
    assert drain.state() == DRAINING and drain.running_tasks == 1
    assert drain.wait(0.05) is False
    threading.Timer(0.1, drain.task_ends).start()
    assert drain.wait(5) is True
    assert drain.state() == DRAINED


def test_a_drain_waits_until_the_queries_holding_outputs_release_them():
    held = ["q1"]
    drain = Drain(lambda: list(held))
    drain.start()
    assert drain.wait(0.05) is False and drain.state() == DRAINING
    threading.Timer(0.1, held.clear).start()
    started = time.monotonic()
    assert drain.wait(5, poll=0.02) is True
    assert time.monotonic() - started < 2


@pytest.fixture
def worker(tmp_path):
    w = FlightWorker(str(tmp_path / "spool"), insecure_no_auth=True)
    threading.Thread(target=w.serve, daemon=True).start()
    yield w
    w.stop()


def test_the_drain_action_and_the_heartbeat_say_the_worker_drains(worker, tmp_path):
    client = WorkerClient(worker.url, ClientConfig(timeout=10))
    try:
        assert client.heartbeat((), 10) is False
        assert client.health()["state"] == "serving"
        (tmp_path / "spool" / ("a" * 32)).mkdir()  # a query's outputs are held
        answer = client.drain()
        assert answer["state"] == "draining" and answer["held_queries"] == 1
        assert worker.draining and worker.drain_requested.is_set()
        assert client.heartbeat((), 10) is True
        assert worker.wait_drained(0.05) is False
        client.release("a" * 32)  # its query read them
        assert worker.wait_drained(5) is True
        assert client.health()["state"] == "drained"
    finally:
        client.close()
