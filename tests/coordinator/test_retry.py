"""The query's one retry policy: only a lost worker is retried, a bounded number of times, and
every lost worker is marked dead and reported once."""

from __future__ import annotations

import pytest

from datafusion_distributed.coordinator.lifecycle import QueryCollector
from datafusion_distributed.coordinator.retry import RetryPolicy
from datafusion_distributed.errors import QueryFailed, WorkerError, WorkerUnreachable
from datafusion_distributed.events import EventKind
from datafusion_distributed.events.chain import HandlerChain
from datafusion_distributed.test_utils.recorder import EventRecorder as Recorder

GONE = "grpc://127.0.0.1:1"


def policy(attempts: int = 3) -> tuple[RetryPolicy, Recorder]:
    recorder = Recorder()
    return RetryPolicy(attempts, QueryCollector("q", HandlerChain([recorder]))), recorder


def test_an_error_of_the_query_is_not_retried():
    retry, recorder = policy()
    error = WorkerError("grpc://127.0.0.1:2", "division by zero")
    with pytest.raises(QueryFailed, match=r"^stage 1 task 0 failed: worker .*division by zero") as info:
        retry.after_failure(error, 1, "stage 1 task 0")
    assert info.value.__cause__ is error
    assert not retry.dead and not recorder.events


def test_a_lost_worker_is_marked_dead_and_reported_once():
    retry, recorder = policy()
    retry.after_failure(WorkerUnreachable(GONE, "refused"), 1, "stage 1 task 0")
    retry.after_failure(
        WorkerError("grpc://127.0.0.1:2", "fetch failed", lost_worker=GONE), 1, "stage 1 task 1"
    )
    assert retry.dead == {GONE}
    lost = [e for e in recorder.events if e.kind is EventKind.WORKER_UNREACHABLE]
    assert [e.worker for e in lost] == [GONE]


def test_a_lost_worker_found_behind_another_error_counts():
    retry, _ = policy()
    try:
        try:
            raise WorkerUnreachable(GONE, "reset")
        except WorkerUnreachable as exc:
            raise QueryFailed("fetching stage 1 output failed") from exc
    except QueryFailed as wrapped:
        retry.after_failure(wrapped, 1, "fetching")
    assert retry.dead == {GONE}


def test_the_tries_are_bounded():
    retry, _ = policy(attempts=2)
    retry.after_failure(WorkerUnreachable(GONE, "refused"), 1, "stage 2 task 3")
    with pytest.raises(QueryFailed, match=r"^stage 2 task 3 failed after 2 attempts: worker"):
        retry.after_failure(WorkerUnreachable(GONE, "refused"), 2, "stage 2 task 3")
