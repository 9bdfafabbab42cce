"""`cancel_attempt`: one task attempt is stopped and its outputs deleted; the task's other
attempts and the query's other data stay, and two attempts of a task never share a file."""

from __future__ import annotations

import os

import pytest

from datafusion_distributed import EmbeddedCluster
from datafusion_distributed.protocol.flight import ClientConfig, WorkerClient
from datafusion_distributed.protocol.messages import TaskKey
from datafusion_distributed.runtime.streaming import TaskCancelled
from datafusion_distributed.worker.spool import Spool

QUERY = "c" * 32


def write(spool: Spool, key: TaskKey, partition: int = 0, size: int = 100) -> str:
    path = spool.attempt_output_path(key, partition)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"x" * size)
    spool.charge(key.query_id, size)
    return path


def test_two_attempts_of_a_task_never_share_a_file(tmp_path):
    spool = Spool(str(tmp_path))
    first, second = TaskKey(QUERY, 1, 0, 0), TaskKey(QUERY, 1, 0, 1)
    assert spool.attempt_output_path(first, 0) != spool.attempt_output_path(second, 0)


def test_a_ticket_is_served_the_attempt_that_finished_last(tmp_path):
    spool = Spool(str(tmp_path))
    first, second = TaskKey(QUERY, 1, 0, 0), TaskKey(QUERY, 1, 0, 2)
    assert spool.output_path(QUERY, 1, 0, 3) == spool.attempt_output_path(first, 3)  # a shipped table
    spool.finish_attempt(second)
    assert spool.output_path(QUERY, 1, 0, 3) == spool.attempt_output_path(second, 3)
    spool.discard_attempt(second)
    assert spool.output_path(QUERY, 1, 0, 3) == spool.attempt_output_path(first, 3)


def test_discarding_an_attempt_keeps_the_others_and_refunds_its_bytes(tmp_path):
    spool = Spool(str(tmp_path))
    kept = write(spool, TaskKey(QUERY, 1, 0, 0))
    other_task = write(spool, TaskKey(QUERY, 1, 1, 1))
    write(spool, TaskKey(QUERY, 1, 0, 1), size=1000)
    spool.discard_attempt(TaskKey(QUERY, 1, 0, 1))
    assert sorted(spool.files()) == sorted([kept, other_task])
    assert spool.used_bytes() == 200
    spool.discard_attempt(TaskKey(QUERY, 1, 0, 7))  # nothing there: nothing happens


@pytest.fixture
def worker():
    with EmbeddedCluster(1) as cluster:
        yield cluster


def test_cancel_attempt_deletes_that_attempt_and_refuses_it(worker):
    server = worker.workers[0]
    loser, winner = TaskKey(QUERY, 2, 0, 1), TaskKey(QUERY, 2, 0, 0)
    kept = write(server.spool, winner)
    write(server.spool, loser, partition=0)
    write(server.spool, loser, partition=1)
    client = WorkerClient(server.url, ClientConfig(auth_token=worker.auth_token))
    try:
        client.cancel_attempt(loser)
    finally:
        client.close()
    assert server.spool.files() == [kept]
    with pytest.raises(TaskCancelled, match="task attempt 1 was cancelled"):
        server._cancelled.check(loser)
    server._cancelled.check(winner)  # the task's other attempt, and the query, go on
    server._cancelled.check(QUERY)
