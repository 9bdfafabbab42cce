"""A worker lost while the coordinator reads the final result: a result gathered whole
(collect, to_arrow_table) is recomputed and read again from the start; a stream that has already
handed batches out fails with an error saying so."""

from __future__ import annotations

import dataclasses
import threading
import time

import pyarrow as pa
import pytest
from datafusion import SessionContext, udf

from datafusion_distributed import (
    DistributedConfig,
    DistributedContext,
    EmbeddedCluster,
    QueryFailed,
    ResultStreamLost,
)
from datafusion_distributed.coordinator import head
from datafusion_distributed.coordinator.head import HeadStage
from datafusion_distributed.events import EventKind
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.recorder import EventRecorder as Recorder
from datafusion_distributed.test_utils.tpch import register_tpch

pytestmark = pytest.mark.timeout(120)

CONFIG = DistributedConfig(bytes_per_partition=1024, connect_timeout=5)
# One stage of three tasks: its outputs are the result, streamed from the workers one by one.
GATHERED = "SELECT l_orderkey, l_linenumber, l_quantity FROM lineitem WHERE l_quantity > 45"
# A last stage of one task, run in the coordinator over inputs it copies from the workers.
FETCHED = "SELECT o_orderpriority, count(*) AS n FROM orders GROUP BY 1 ORDER BY 1"


@pytest.fixture
def cluster():
    """Workers whose files the coordinator cannot read in place: it fetches or streams them."""
    with EmbeddedCluster(3, shared_spool_root=None) as c:
        yield c


@pytest.fixture
def tpch(tpch_sf001):
    ctx = SessionContext()
    register_tpch(ctx, tpch_sf001)
    return ctx


def context(cluster, ctx, recorder: Recorder | None = None) -> DistributedContext:
    config = dataclasses.replace(CONFIG, auth_token=cluster.auth_token)
    return DistributedContext(
        ctx, workers=cluster.get_urls(), config=config, handlers=[recorder or Recorder()]
    )


def stop(cluster, url: str) -> None:
    """Stop the embedded worker at `url`: it no longer answers, as if its process had died."""
    next(w for w in cluster.workers if w.url == url).stop()


def stop_on_stream(monkeypatch, cluster, call: int) -> list[str]:
    """Stop the worker the head stage is about to stream a result file from, at its `call`-th
    stream; returns the workers stopped."""
    real, calls, stopped = HeadStage._stream, [], []

    def stream(self, worker, ticket):
        calls.append(worker)
        if len(calls) == call:
            stop(cluster, worker)
            stopped.append(worker)
        return real(self, worker, ticket)

    monkeypatch.setattr(HeadStage, "_stream", stream)
    return stopped


def test_collect_recovers_a_worker_lost_while_the_result_is_gathered(
    monkeypatch, cluster, tpch, single_node_sf001
):
    stopped = stop_on_stream(monkeypatch, cluster, call=2)  # after the first file's batches were read
    recorder = Recorder()
    dctx = context(cluster, tpch, recorder)
    got = dctx.sql(GATHERED).to_arrow_table()
    assert stopped and recorder.lost() == stopped
    # every row once: what was read before the loss was discarded
    expected = single_node_sf001.sql(GATHERED).to_arrow_table()
    assert got.num_rows == expected.num_rows
    assert_tables_equal(got, expected, sql=GATHERED)
    assert_ran_distributed(dctx)
    # the live workers released the query (the stopped one is left to its TTL sweep)
    assert [f for w in cluster.workers if w.url not in stopped for f in w.spool.files()] == []


def test_explain_analyze_recovers_a_worker_lost_while_the_result_is_read(monkeypatch, cluster, tpch):
    stopped = stop_on_stream(monkeypatch, cluster, call=2)
    text = context(cluster, tpch).sql(GATHERED).explain_string(analyze=True)
    assert stopped and "Stage 0" in text


def test_a_stream_that_handed_out_batches_fails_clearly(monkeypatch, cluster, tpch):
    stopped = stop_on_stream(monkeypatch, cluster, call=2)
    stream = context(cluster, tpch).sql(GATHERED).execute_stream()
    assert next(stream).num_rows > 0
    with pytest.raises(ResultStreamLost, match=r"lost worker grpc://\S+ after \d+ batch") as info:
        list(stream)
    assert isinstance(info.value, QueryFailed)
    assert info.value.delivered >= 1
    assert stopped and stopped[0] in str(info.value)


def test_a_stream_recovers_a_loss_before_its_first_batch(monkeypatch, cluster, tpch, single_node_sf001):
    stopped = stop_on_stream(monkeypatch, cluster, call=1)
    dctx = context(cluster, tpch)
    batches = list(dctx.sql(GATHERED).execute_stream())
    assert stopped
    got = pa.Table.from_batches(batches)
    assert_tables_equal(got, single_node_sf001.sql(GATHERED).to_arrow_table(), sql=GATHERED)
    assert_ran_distributed(dctx)


def test_collect_recovers_a_worker_lost_while_inputs_are_fetched(
    monkeypatch, cluster, tpch, single_node_sf001
):
    real, stopped = head.fetch_input, []

    lock = threading.Lock()

    def fetch_input(location, *args, **kwargs):  # called by several threads at once
        with lock:
            if not stopped:
                stopped.append(location.worker)
                stop(cluster, location.worker)
        return real(location, *args, **kwargs)

    monkeypatch.setattr(head, "fetch_input", fetch_input)
    recorder = Recorder()
    dctx = context(cluster, tpch, recorder)
    got = dctx.sql(FETCHED).to_arrow_table()
    assert stopped and recorder.lost() == stopped
    assert_tables_equal(got, single_node_sf001.sql(FETCHED).to_arrow_table(), sql=FETCHED)
    assert_ran_distributed(dctx)


class StopWhileRunning:
    """Stops the worker of the first task of stage 0 once that task has started on it."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.stopped: list[str] = []

    def on_event(self, event):
        if event.kind is EventKind.TASK_STARTED and event.stage == 0 and not self.stopped:
            self.stopped.append(event.worker)
            threading.Timer(0.05, stop, (self.cluster, event.worker)).start()


def test_a_worker_stopped_while_its_task_runs_is_a_lost_worker(cluster, tpch, single_node_sf001):
    """A stopping worker cancels its running tasks: their failure tells the coordinator the worker
    is gone, so the task is retried elsewhere rather than failing the query."""

    def slowly_true(keys: pa.Array) -> pa.Array:  # each task still runs when its worker stops
        time.sleep(0.2)
        return pa.array([True] * len(keys))

    tpch.register_udf(udf(slowly_true, [pa.int64()], pa.bool_(), "stable", "slowly_true"))
    slow = FETCHED.replace("FROM orders", "FROM orders WHERE slowly_true(o_orderkey)")
    stopper, recorder = StopWhileRunning(cluster), Recorder()
    config = dataclasses.replace(CONFIG, auth_token=cluster.auth_token)
    dctx = DistributedContext(tpch, workers=cluster.get_urls(), config=config, handlers=[stopper, recorder])
    got = dctx.sql(slow).to_arrow_table()
    assert stopper.stopped and recorder.lost() == stopper.stopped
    assert_tables_equal(got, single_node_sf001.sql(FETCHED).to_arrow_table(), sql=FETCHED)
    assert_ran_distributed(dctx)
