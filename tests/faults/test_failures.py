"""Bad input and dying workers give clear errors naming the cause; nothing hangs."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from datafusion_distributed import (
    DistributedConfig,
    DistributedContext,
    EmbeddedCluster,
    LocalCluster,
    QueryFailed,
)
from datafusion_distributed.protocol.auth import connect_options
from datafusion_distributed.protocol.messages import PROTOCOL_VERSION, Ticket, encode


@pytest.fixture
def table_dir(tmp_path):
    for part in range(4):
        pq.write_table(
            pa.table({"k": list(range(part * 100, part * 100 + 100))}), tmp_path / f"p{part}.parquet"
        )
    return tmp_path


SQL = "SELECT k % 10 AS g, count(*) AS n FROM t GROUP BY 1"


def test_worker_killed_before_a_query(table_dir):
    """Without retries the error names the dead worker at once; with them the query succeeds."""
    with LocalCluster(2) as cluster:
        ctx = SessionContext()
        ctx.register_parquet("t", str(table_dir))
        no_retry = DistributedConfig(bytes_per_partition=1024, connect_timeout=5, task_attempts=1)
        with DistributedContext(ctx, workers=cluster, config=no_retry) as dctx:
            assert len(dctx.sql(SQL).to_pylist()) == 10
            dead = cluster.urls[1]
            cluster.kill(1)
            started = time.monotonic()
            with pytest.raises(QueryFailed, match=f"worker {dead} is unreachable"):
                dctx.sql(SQL).to_pylist()
            assert time.monotonic() - started < 10
        retrying = DistributedConfig(bytes_per_partition=1024, connect_timeout=5)
        with DistributedContext(ctx, workers=cluster, config=retrying) as dctx:
            assert sorted(r["n"] for r in dctx.sql(SQL).to_pylist()) == [40] * 10
        assert cluster.spool_files() == []


def test_every_worker_gone_fails_with_the_cause(table_dir):
    with LocalCluster(2) as cluster:
        ctx = SessionContext()
        ctx.register_parquet("t", str(table_dir))
        with DistributedContext(
            ctx, workers=cluster, config=DistributedConfig(bytes_per_partition=1024)
        ) as dctx:
            cluster.kill(0)
            cluster.kill(1)
            with pytest.raises(QueryFailed, match="unreachable"):
                dctx.sql(SQL).to_pylist()


def test_a_failing_udf_fails_at_once_with_its_message(table_dir):
    import pyarrow.compute as pc
    from datafusion import udf

    def explode(arr):
        raise ValueError("the UDF refused its input")

    with LocalCluster(2) as cluster:
        ctx = SessionContext()
        ctx.register_parquet("t", str(table_dir))
        ctx.register_udf(udf(explode, [pa.int64()], pa.int64(), "immutable", "explode"))
        with DistributedContext(
            ctx, workers=cluster, config=DistributedConfig(bytes_per_partition=1024)
        ) as dctx:
            started = time.monotonic()
            with pytest.raises(QueryFailed, match="the UDF refused its input") as info:
                dctx.sql("SELECT explode(k) % 3, count(*) FROM t GROUP BY 1").to_pylist()
            assert "attempts" not in str(info.value)  # not retried: the error is the query's own
            assert time.monotonic() - started < 10
            assert pc is not None


def test_unreachable_url_is_named(table_dir):
    url = "grpc://127.0.0.1:9"  # the discard port: nothing listens there
    config = DistributedConfig(bytes_per_partition=1024, connect_timeout=3, check_workers="off")
    dctx = DistributedContext(SessionContext(), workers=[url, url], config=config)
    dctx.register_parquet("t", str(table_dir))
    started = time.monotonic()
    with pytest.raises(QueryFailed, match="every worker is unreachable: grpc://127.0.0.1:9"):
        dctx.sql("SELECT k % 10, count(*) FROM t GROUP BY 1").to_pylist()
    assert time.monotonic() - started < 10


@pytest.fixture(scope="module")
def worker_client():
    with EmbeddedCluster(1) as cluster:
        url = cluster.get_urls()[0]
        yield flight.connect(url, **connect_options(cluster.auth_token, None)), url


def _action(client, name, body):
    return list(client.do_action(flight.Action(name, body)))


@pytest.mark.parametrize(
    "body, reason",
    [
        (b"not json", "not valid JSON"),
        (json.dumps({"version": 99}).encode(), "unsupported protocol version 99"),
        # a huge value is not echoed back whole (gRPC would refuse the oversized error)
        (
            json.dumps({"version": [0] * 100_000}).encode(),
            r"unsupported protocol version \[0, 0, .{0,30}\.\.\.:",
        ),
        (json.dumps({"version": PROTOCOL_VERSION, "query_id": "x"}).encode(), "missing fields"),
    ],
)
def test_worker_refuses_malformed_run_task(worker_client, body, reason):
    client, _ = worker_client
    with pytest.raises(flight.FlightServerError, match=reason):
        _action(client, "run_task", body)


def test_ticket_cannot_escape_the_spool(worker_client):
    client, _ = worker_client
    bad = json.dumps(
        {"version": PROTOCOL_VERSION, "query_id": "../../etc", "stage": 0, "task": 0, "partition": 0}
    )
    with pytest.raises(flight.FlightServerError, match="query_id must match"):
        client.do_get(flight.Ticket(bad.encode())).read_all()
    missing = encode(Ticket("nosuchquery", 0, 0, 0))
    with pytest.raises(flight.FlightServerError, match="no output for query nosuchquery"):
        client.do_get(flight.Ticket(missing)).read_all()


def test_unknown_action_and_health(worker_client):
    client, url = worker_client
    with pytest.raises(flight.FlightServerError, match="unknown action"):
        _action(client, "format_disk", b"")
    health = json.loads(_action(client, "health", b"")[0].body.to_pybytes())
    assert health["protocol"] == PROTOCOL_VERSION and health["url"] == url


def test_task_timeout_is_reported_as_a_timeout_not_a_lost_worker(table_dir):
    with LocalCluster(2) as cluster:
        ctx = SessionContext()
        ctx.register_parquet("t", str(table_dir))
        config = DistributedConfig(bytes_per_partition=1024, task_timeout=0.001)
        with DistributedContext(ctx, workers=cluster, config=config) as dctx:
            with pytest.raises(QueryFailed, match="did not answer within 0.001s") as info:
                dctx.sql(SQL).to_pylist()
            assert "attempts" not in str(info.value)


def test_a_task_that_cannot_reach_an_input_names_the_lost_worker():
    """The worker reports which producer it lost in the error's extra info, so the coordinator
    can recompute that producer's outputs instead of failing the query."""
    from datafusion_distributed import EmbeddedCluster
    from datafusion_distributed.distributed_planner.build_stages import input_marker
    from datafusion_distributed.errors import WorkerError
    from datafusion_distributed.protocol.flight import ClientConfig, WorkerClient
    from datafusion_distributed.protocol.messages import FileLocation, RunTask, TaskInput

    gone = "grpc://127.0.0.1:9"  # the discard port: nothing listens there
    marker = input_marker(0)
    with EmbeddedCluster(1) as cluster:
        url = cluster.get_urls()[0]
        message = RunTask(
            query_id="lostinput",
            stage=1,
            task=0,
            attempt=0,
            plan=marker,
            inputs=(
                TaskInput(
                    marker=marker,
                    kind="shuffle",
                    schema=pa.schema([("a", pa.int64())]).serialize().to_pybytes(),
                    boundary=b"",
                    boundary_child=b"",
                    groups=((FileLocation(gone, 0, 0, 0, "part-0.arrow", 10),),),
                ),
            ),
            worker=url,
        )
        client = WorkerClient(url, ClientConfig(timeout=10, task_timeout=10, auth_token=cluster.auth_token))
        with pytest.raises(WorkerError) as info:
            client.run_task(message)
        assert info.value.lost_worker == gone
        client.close()
