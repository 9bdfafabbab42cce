"""Liveness: a worker that stops answering is found by the coordinator's probes within the
liveness timeout and treated as lost; the probes renew the query's spool lease on the workers."""

from __future__ import annotations

import socket
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, EmbeddedCluster
from datafusion_distributed.coordinator.liveness import LivenessMonitor
from datafusion_distributed.events import EventKind
from datafusion_distributed.protocol.flight import ClientConfig, ClientPool

QUERY = "a" * 32


@pytest.fixture
def silent_url():
    """A URL whose port accepts connections but never answers: a frozen worker."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"grpc://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster(2) as c:
        yield c


def wait_for(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    return condition()


def test_a_silent_worker_is_lost_after_the_timeout_and_a_live_one_never(cluster, silent_url):
    live = cluster.get_urls()[0]
    monitor = LivenessMonitor(ClientPool(ClientConfig(auth_token=cluster.auth_token)), timeout=0.5)
    monitor.watch(QUERY, live)
    monitor.watch(QUERY, silent_url)
    started = time.monotonic()
    assert wait_for(lambda: monitor.lost(silent_url))
    assert time.monotonic() - started >= 0.5
    time.sleep(1.0)  # several probe rounds
    assert not monitor.lost(live)
    monitor.forget(QUERY)
    assert wait_for(lambda: monitor._thread is None), "the probing thread outlived its queries"


def test_probes_renew_the_leases_of_the_queries_they_name(cluster):
    worker = cluster.workers[1]
    monitor = LivenessMonitor(ClientPool(ClientConfig(auth_token=cluster.auth_token)), timeout=0.4)
    monitor.watch(QUERY, worker.url)
    try:
        assert wait_for(lambda: QUERY in worker.spool._leases)
        first = worker.spool._leases[QUERY]
        assert wait_for(lambda: worker.spool._leases[QUERY] > first), "the lease was not renewed"
    finally:
        monitor.forget(QUERY)
        worker.spool.release(QUERY)


class SendFirstTasksTo:
    """Routes task 0 of every stage to `url` while it is live, and hears of lost workers."""

    def __init__(self, url: str):
        self.url = url
        self.unreachable: list[str] = []
        self.failures: list[str] = []

    def route_task(self, request):
        return self.url if request.task == 0 else None

    def on_event(self, event):
        if event.kind is EventKind.WORKER_UNREACHABLE:
            self.unreachable.append(event.worker)
        if event.kind is EventKind.TASK_FAILED:
            self.failures.append(str(event.error))


@pytest.mark.timeout(120)
def test_a_task_sent_to_a_silent_worker_reruns_elsewhere_within_the_liveness_timeout(
    cluster, silent_url, tmp_path
):
    for p in range(4):
        table = pa.table({"g": pa.array([i % 7 for i in range(p * 1000, (p + 1) * 1000)], pa.int64())})
        pq.write_table(table, tmp_path / f"p{p}.parquet")
    ctx = SessionContext()
    ctx.register_parquet("t", str(tmp_path))
    config = DistributedConfig(
        bytes_per_partition=1024,
        auth_token=cluster.auth_token,
        task_timeout=60,
        liveness_timeout=0.5,
        check_workers="off",  # the silent worker is found by the query
    )
    router = SendFirstTasksTo(silent_url)
    sql = "SELECT g, count(*) AS n FROM t GROUP BY g ORDER BY g"
    workers = [*cluster.get_urls(), silent_url]
    with DistributedContext(ctx, workers=workers, config=config, handlers=[router]) as dctx:
        df = dctx.sql(sql)
        assert len(df.distributed_plan().stages) > 1, "nothing would run on the workers"
        started = time.monotonic()
        got = df.to_pylist()
        seconds = time.monotonic() - started
    assert got == ctx.sql(sql).to_pylist()
    assert router.unreachable == [silent_url]
    assert router.failures and all("(liveness_timeout)" in f for f in router.failures), router.failures
    # gRPC itself gives up connecting after about 20 s; the task timeout is 60 s
    assert seconds < 15, f"took {seconds:.1f}s"
