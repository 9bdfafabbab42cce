"""A panic inside DataFusion (pyo3's PanicException, a BaseException) and any other
BaseException that is not Python's own control flow fail the task like any error: a worker
answers a WorkerError naming the stage, the task and the worker, with the panic's message and
none of the worker's traceback; the coordinator's head stage raises a QueryFailed naming its
stage and task."""

from __future__ import annotations

import struct

import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext
from datafusion.plan import ExecutionPlan

from datafusion_distributed import (
    DistributedConfig,
    DistributedContext,
    EmbeddedCluster,
    QueryFailed,
    WorkerError,
)
from datafusion_distributed.metrics.recorder import TaskRecorder
from datafusion_distributed.protocol.auth import connect_options
from datafusion_distributed.protocol.flight import ClientConfig, WorkerClient
from datafusion_distributed.protocol.messages import PROTOCOL_VERSION, RunTask, encode

OPTIONS = flight.FlightCallOptions(timeout=20)
BUFFER_LENGTH = struct.pack("<q", 800)  # the data buffer of 100 int64 values, inside the plan


class NotAnException(BaseException):
    """Some library's BaseException that is neither an Exception nor Python's control flow."""


@pytest.fixture(scope="module")
def plan_bytes() -> bytes:
    ctx = SessionContext()
    ctx.register_record_batches("t", [[pa.record_batch({"k": list(range(100))})]])
    return ctx.sql("SELECT k * 2 AS v FROM t WHERE k > 3").execution_plan().to_bytes()


@pytest.fixture(scope="module")
def panicking_plan(plan_bytes) -> bytes:
    """Plan bytes whose in-memory batch claims a data buffer longer than its bytes: DataFusion
    panics decoding them."""
    assert plan_bytes.count(BUFFER_LENGTH) == 1
    return plan_bytes.replace(BUFFER_LENGTH, struct.pack("<q", 900))


@pytest.fixture(scope="module")
def panic_type(panicking_plan) -> type[BaseException]:
    """pyo3's PanicException, as DataFusion raises it."""
    with pytest.raises(BaseException) as info:
        ExecutionPlan.from_bytes(SessionContext(), panicking_plan)
    assert type(info.value).__name__ == "PanicException" and not isinstance(info.value, Exception)
    return type(info.value)


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster(2) as cluster:
        yield cluster


def _run_task(cluster, plan: bytes) -> tuple[WorkerError, str]:
    """The error a coordinator sees for a task of stage 2, task 3, and the raw Flight text."""
    url = cluster.get_urls()[0]
    message = RunTask("panicquery", 2, 3, 0, plan, (), url)
    client = WorkerClient(url, ClientConfig(timeout=20, task_timeout=20, auth_token=cluster.auth_token))
    with pytest.raises(WorkerError) as info:
        client.run_task(message)
    raw = flight.connect(url, **connect_options(cluster.auth_token, None))
    with pytest.raises(flight.FlightServerError) as raw_info:
        list(raw.do_action(flight.Action("run_task", encode(message)), OPTIONS))
    raw.close()
    client.release("panicquery")  # what the coordinator does once the query has failed
    client.close()
    return info.value, str(raw_info.value)


def _assert_named_without_traceback(error: WorkerError, raw: str, cluster, reason: str) -> None:
    assert error.url == cluster.get_urls()[0] and str(error).startswith(f"worker {error.url}: ")
    assert "stage 2 task 3 failed" in str(error) and reason in str(error)
    assert "Traceback" not in raw and ".py" not in raw, raw
    assert cluster.spool_files() == []


def test_a_panic_decoding_the_plan_is_a_worker_error_naming_the_task(cluster, panicking_plan):
    error, raw = _run_task(cluster, panicking_plan)
    _assert_named_without_traceback(error, raw, cluster, "cannot exceed the existing length")


def test_a_panic_after_the_task_ran_is_a_worker_error_naming_the_task(
    cluster, plan_bytes, panic_type, monkeypatch
):
    def panics(self, plan=None):
        raise panic_type("index out of bounds while reading metrics")

    monkeypatch.setattr(TaskRecorder, "finish", panics)
    error, raw = _run_task(cluster, plan_bytes)
    _assert_named_without_traceback(error, raw, cluster, "index out of bounds while reading metrics")


def test_any_other_base_exception_is_a_worker_error_naming_the_task(cluster, plan_bytes, monkeypatch):
    def raises(*args, **kwargs):
        raise NotAnException("a library's own BaseException")

    monkeypatch.setattr("datafusion_distributed.worker.task_runner.run_task", raises)
    error, raw = _run_task(cluster, plan_bytes)
    _assert_named_without_traceback(error, raw, cluster, "a library's own BaseException")


def test_a_panic_in_another_action_is_refused_without_a_traceback(cluster, panic_type, monkeypatch):
    def panics(query_id):
        raise panic_type("a panic while cancelling")

    monkeypatch.setattr(cluster.workers[0].spool, "release", panics)
    raw = flight.connect(cluster.get_urls()[0], **connect_options(cluster.auth_token, None))
    body = encode({"version": PROTOCOL_VERSION, "query_id": "panicquery"})
    with pytest.raises(flight.FlightServerError, match="cancel failed: .*a panic while cancelling") as info:
        list(raw.do_action(flight.Action("cancel", body), OPTIONS))
    raw.close()
    assert "Traceback" not in str(info.value)


def test_a_panic_in_the_head_stage_is_a_query_failure_naming_the_stage(
    cluster, panic_type, tmp_path, monkeypatch
):
    def panics(*args, **kwargs):
        raise panic_type("a panic in the final stage")

    monkeypatch.setattr("datafusion_distributed.coordinator.head.run_task", panics)
    for part in range(4):
        pq.write_table(
            pa.table({"k": list(range(part * 100, part * 100 + 100))}), tmp_path / f"p{part}.parquet"
        )
    ctx = SessionContext()
    ctx.register_parquet("t", str(tmp_path))
    config = DistributedConfig(bytes_per_partition=1024, auth_token=cluster.auth_token)
    with DistributedContext(ctx, workers=cluster.get_urls(), config=config) as dctx:
        df = dctx.sql("SELECT k % 10 AS g, count(*) AS n FROM t GROUP BY 1 ORDER BY 1")
        plan = df.distributed_plan()
        assert len(plan.stages) > 1 and len(plan.final.tasks) == 1  # the final stage runs here
        with pytest.raises(QueryFailed) as info:
            df.to_pylist()
    final = plan.final.id
    assert str(info.value) == (
        f"stage {final} task 0 on the coordinator failed: panic inside DataFusion: a panic in the final stage"
    )
    assert cluster.spool_files() == []
