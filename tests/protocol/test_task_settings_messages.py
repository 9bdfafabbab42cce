"""A RunTask's settings on the wire: left out while empty, validated when present, and a worker
refuses any setting a task may not carry before it touches anything."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedContext, EmbeddedCluster
from datafusion_distributed.errors import WorkerError
from datafusion_distributed.protocol.flight import ClientConfig, WorkerClient
from datafusion_distributed.protocol.messages import ProtocolError, RunTask, decode_run_task, encode

ZONE = ("datafusion.execution.time_zone", "+05:00")


def _message(settings=(), worker="grpc://127.0.0.1:1") -> RunTask:
    ctx = SessionContext()
    ctx.register_record_batches("t", [[pa.record_batch({"k": list(range(10))})]])
    plan = ctx.sql("SELECT k * 2 AS v FROM t").execution_plan().to_bytes()
    return RunTask("settingsquery", 0, 0, 0, plan, (), worker, None, settings)


def test_settings_round_trip_and_stay_off_the_wire_while_empty():
    message = _message((("datafusion.execution.batch_size", "7"), ZONE))
    assert decode_run_task(encode(message)) == message
    plain = _message()
    assert "settings" not in json.loads(encode(plain))  # a worker that predates the field reads it
    assert decode_run_task(encode(plain)).settings == ()


@pytest.mark.parametrize(
    "settings, reason",
    [
        ([["datafusion.runtime.memory_limit", "1G"]], "may not travel with a task"),
        ([["datafusion.optimizer.max_passes", "1"]], "may not travel with a task"),
        ([["datafusion.execution.target_partitions", "64"]], "may not travel with a task"),
        ([["datafusion.execution.enable_file_stream_work_stealing", "true"]], "may not travel"),
        ([["datafusion.execution.no_such_setting", "1"]], "unknown DataFusion setting"),
        ([["datafusion.execution.time_zone", "x" * 5000]], "longer than 4096"),
        ([ZONE[0], ZONE[1]], r"\[name, value\] pairs"),
        ([[ZONE[0], 5]], r"\[name, value\] pairs"),
        ([list(ZONE), list(ZONE)], "each setting once, in name order"),
        ({"datafusion.execution.time_zone": "+05:00"}, "settings must be a list"),
    ],
)
def test_settings_a_task_may_not_carry_are_refused(settings, reason):
    body = json.loads(encode(_message()))
    body["settings"] = settings
    with pytest.raises(ProtocolError, match=reason):
        decode_run_task(json.dumps(body).encode())


def test_a_worker_refuses_a_forbidden_setting_and_still_serves():
    with EmbeddedCluster(1) as cluster:
        url = cluster.get_urls()[0]
        client = WorkerClient(url, ClientConfig(timeout=10, task_timeout=10, auth_token=cluster.auth_token))
        forbidden = _message((("datafusion.runtime.memory_limit", "1K"),), url)
        with pytest.raises(
            WorkerError, match="refused message: settings: setting datafusion.runtime.memory_limit"
        ):
            client.run_task(forbidden)
        assert cluster.workers[0].spool.files() == []  # refused before it touched anything
        assert client.run_task(_message((ZONE,), url)).partitions  # a travelling setting is run
        client.close()
        with DistributedContext(SessionContext(), workers=cluster) as dctx:
            assert dctx.sql("SELECT 1 AS one").to_pylist() == [{"one": 1}]
