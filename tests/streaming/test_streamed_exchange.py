"""Streamed exchanges (the compiled data plane) against single-node DataFusion.

Every TPC-H query runs over the embedded cluster with `exchange="stream"` and a small
`bytes_per_partition`, so stages split into tasks and their exchanges stream; the answer must
equal single-node DataFusion's, the run must show which stages streamed, and no channel may be
left open afterwards. The same queries with `exchange="spool"` stream nothing.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from datafusion_distributed import DistributedConfig, DistributedContext
from datafusion_distributed.errors import QueryFailed
from datafusion_distributed.runtime import streams
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import (
    assert_ran_distributed,
    assert_ran_on_one_node,
    tasks_run,
)
from datafusion_distributed.test_utils.tpch import TPCH_QUERY_NUMBERS, tpch_query

SPLIT = {"bytes_per_partition": 8 * 1024, "broadcast_total_rows": None, "adaptive": False}


@pytest.fixture(scope="module")
def streamed(tpch_sf001, distributed_tpch):
    with distributed_tpch(tpch_sf001, config=DistributedConfig(exchange="stream", **SPLIT)) as dctx:
        yield dctx


ONE_TASK = {13}  # its outer join reads all of `orders` as one partition at this scale
STREAMED: dict[int, list[int]] = {}  # query -> the stages whose outputs streamed


@pytest.mark.parametrize("n", TPCH_QUERY_NUMBERS, ids=lambda n: f"q{n:02d}")
def test_tpch_streamed_equals_single_node(n, streamed, single_node_sf001):
    df = streamed.sql(tpch_query(n))
    got = df.to_arrow_table()
    if n in ONE_TASK:
        assert_ran_on_one_node(df.metrics)
    else:
        assert_ran_distributed(df.metrics)
    assert_tables_equal(got, single_node_sf001.sql(tpch_query(n)).to_arrow_table(), sql=tpch_query(n))
    assert streams.open_channels() == 0
    STREAMED[n] = df.metrics.streamed_stages


def test_most_tpch_queries_stream():
    """Exchanges read more than once (broadcasts) or by the coordinator keep their files."""
    if len(STREAMED) < len(TPCH_QUERY_NUMBERS):
        pytest.skip("runs after the 22 queries above")
    streaming = [n for n, stages in STREAMED.items() if stages]
    assert len(streaming) >= 10, f"only {streaming} streamed"  # 11 of 22 at SF 0.01


def test_spool_streams_nothing(tpch_sf001, distributed_tpch, single_node_sf001):
    with distributed_tpch(tpch_sf001, config=DistributedConfig(exchange="spool", **SPLIT)) as dctx:
        df = dctx.sql(tpch_query(3))
        got = df.to_arrow_table()
    assert_ran_distributed(df.metrics)
    assert df.metrics.streamed_stages == []
    assert_tables_equal(got, single_node_sf001.sql(tpch_query(3)).to_arrow_table())


def test_a_limit_stops_its_producers_early(streamed):
    """A LIMIT over a shuffled aggregate answers, and its producers, which stop sending once
    their reader needs no more, leave nothing behind."""
    df = streamed.sql("SELECT l_orderkey, sum(l_quantity) FROM lineitem GROUP BY l_orderkey LIMIT 10")
    assert df.to_arrow_table().num_rows == 10
    assert df.metrics.streamed_stages
    assert streams.open_channels() == 0


def head_inputs(df) -> set[int]:
    """The stages the head of `df`'s query reads (its last stage, run in the coordinator)."""
    final = df.distributed_plan().final
    assert final.task_count == 1, "the last stage runs on the workers"
    return {inp.producer for inp in final.inputs}


def test_the_head_reads_its_inputs_as_streams(streamed, single_node_sf001):
    """The last stage, one task run in the coordinator, reads its producers' streams."""
    df = streamed.sql(tpch_query(1))
    got = df.to_arrow_table()
    assert head_inputs(df) <= set(df.metrics.streamed_stages)
    assert_ran_distributed(df.metrics)
    assert_tables_equal(got, single_node_sf001.sql(tpch_query(1)).to_arrow_table())


SHUFFLED_JOIN = (
    "SELECT l_orderkey, l_quantity, o_orderdate FROM lineitem JOIN orders ON l_orderkey = o_orderkey "
    "WHERE l_quantity > 10"
)


def test_a_limit_over_a_shuffled_join_answers_from_the_first_batches(
    tpch_sf001, distributed_tpch, single_node_sf001
):
    """Every stage streams, the head included: its ten rows are rows of the join, and every
    task of every stage ends and reports (a producer whose reader left stops at once)."""
    shuffled = DistributedConfig(
        exchange="stream",
        bytes_per_partition=8 * 1024,
        broadcast_total_rows=0,
        broadcast_total_bytes=0,
        adaptive=False,
    )
    with distributed_tpch(tpch_sf001, config=shuffled) as dctx:
        df = dctx.sql(SHUFFLED_JOIN + " LIMIT 10")
        got = df.to_arrow_table()
        plan = df.distributed_plan()
    assert got.num_rows == 10
    join = single_node_sf001.sql(SHUFFLED_JOIN).to_arrow_table()
    assert set(map(tuple, got.to_pylist())) <= set(map(tuple, join.to_pylist()))  # some ten rows of it
    assert any("mode=Partitioned" in node.line for node in plan.final.root.walk())
    assert set(df.metrics.streamed_stages) == {stage.id for stage in plan.stages[:-1]}
    assert_ran_distributed(df.metrics)
    assert tasks_run(df.metrics) == {stage.id: stage.task_count for stage in plan.stages}
    assert streams.open_channels() == 0


def losing_a_head_producer(monkeypatch, lost: list[str], handed_out: threading.Event) -> None:
    """Task 1 of the stage the head reads fails as if its worker were lost, once the head has
    handed a batch out (or 2 s passed)."""
    from datafusion_distributed.coordinator.scheduler import QueryRun
    from datafusion_distributed.errors import WorkerUnreachable

    run_task = QueryRun._run_task

    def losing(self, stage, task, worker, attempt=0, plan=None, feeds=()):
        final = self.state.plan.final
        feeds_head = any(inp.producer == stage.id for inp in final.inputs)
        if not lost and feeds_head and task.index == 1 and self.state.streams.head:
            handed_out.wait(timeout=2)
            lost.append(worker)
            raise WorkerUnreachable(worker, "connection refused (made up by the test)")
        return run_task(self, stage, task, worker, attempt, plan, feeds)

    monkeypatch.setattr(QueryRun, "_run_task", losing)


# the head coalesces the aggregate's two tasks (a limit above the result's size keeps it in the
# coordinator), handing out each task's batches as they come
GROUPED = "SELECT l_orderkey, sum(l_quantity) AS q FROM lineitem GROUP BY l_orderkey LIMIT 1000000"


def test_a_worker_lost_while_the_head_reads_streams_is_recovered_for_a_whole_result(
    tpch_sf001, distributed_tpch, single_node_sf001, monkeypatch
):
    """collect() gathers the whole result before handing it out: what the head read is
    dropped, and the stages run again spooled, with the same answer."""
    lost: list[str] = []
    handed_out = threading.Event()
    handed_out.set()
    losing_a_head_producer(monkeypatch, lost, handed_out)
    with distributed_tpch(tpch_sf001, config=DistributedConfig(exchange="stream", **SPLIT)) as dctx:
        df = dctx.sql(GROUPED)
        got = df.to_arrow_table()
    assert lost and df.metrics.lost_workers == lost
    assert df.metrics.streamed_stages == []  # run again spooled
    assert_ran_distributed(df.metrics)
    assert_tables_equal(got, single_node_sf001.sql(GROUPED).to_arrow_table(), sql=GROUPED)
    assert streams.open_channels() == 0


def test_a_worker_lost_after_the_head_handed_batches_out_says_so(tpch_sf001, distributed_tpch, monkeypatch):
    """A result streamed to the caller cannot take back the batches it handed out."""
    from datafusion_distributed.errors import ResultStreamLost

    lost: list[str] = []
    handed_out = threading.Event()
    losing_a_head_producer(monkeypatch, lost, handed_out)
    with distributed_tpch(tpch_sf001, config=DistributedConfig(exchange="stream", **SPLIT)) as dctx:
        df = dctx.sql(GROUPED)
        stream = df.execute_stream()
        next(stream)
        handed_out.set()
        with pytest.raises(ResultStreamLost, match=r"after \d+ batch"):
            for _ in stream:
                pass
    assert lost and df.metrics.lost_workers == lost  # reported, and avoided by later queries
    assert streams.open_channels() == 0


def test_an_error_in_the_head_is_its_own(streamed):
    """The head fails on its own: its error is the query's, at once."""
    sql = "SELECT 1 / (sum(l_linenumber) - sum(l_linenumber)) FROM lineitem"
    df = streamed.sql(sql)
    assert head_inputs(df) and len(df.distributed_plan().stages) > 1
    with pytest.raises(QueryFailed, match="(?i)divide by zero"):
        df.to_arrow_table()
    assert streams.open_channels() == 0


def test_an_error_in_a_producer_fails_the_query_with_its_message(streamed):
    sql = "SELECT l_returnflag, sum(l_quantity / (l_linenumber - l_linenumber)) FROM lineitem GROUP BY 1"
    with pytest.raises(QueryFailed, match="(?i)divide by zero"):
        streamed.sql(sql).to_arrow_table()
    assert streams.open_channels() == 0


def test_set_distributed_exchange(streamed):
    streamed.sql("SET distributed.exchange = 'spool'")
    try:
        df = streamed.sql(tpch_query(1))
        df.to_arrow_table()
        assert df.metrics.streamed_stages == []
    finally:
        streamed.sql("SET distributed.exchange = 'stream'")
    with pytest.raises(ValueError, match="exchange"):
        DistributedConfig(exchange="pipes")


def test_worker_processes_stream_through_their_data_planes(tpch_sf001, single_node_sf001):
    """Between worker processes each stream crosses its producer's data-plane server."""
    from datafusion_distributed.clusters.local import LocalCluster

    with (
        LocalCluster(2) as cluster,
        DistributedContext(
            single_node_sf001, workers=cluster, config=DistributedConfig(exchange="stream", **SPLIT)
        ) as dctx,
    ):
        for n in (3, 9, 18):
            df = dctx.sql(tpch_query(n))
            got = df.to_arrow_table()
            assert df.metrics.streamed_stages, n
            assert head_inputs(df) <= set(df.metrics.streamed_stages), n  # the coordinator reads streams
            assert_ran_distributed(df.metrics)
            assert_tables_equal(got, single_node_sf001.sql(tpch_query(n)).to_arrow_table(), sql=tpch_query(n))
        assert cluster.spool_files() == []


def test_channels_stream_batches_in_one_process():
    """The two nodes alone: a sink over a plan streams every batch to a source standing for it."""
    from datafusion import SessionContext
    from datafusion.plan import ExecutionPlan

    from datafusion_distributed.protocol.messages import StreamChannel, TaskKey
    from datafusion_distributed.runtime.outputs import stream_task_outputs

    ctx = streams.with_exchange_codec(SessionContext())
    table = pa.table({"k": list(range(50_000)), "v": [i % 7 for i in range(50_000)]})
    ctx.register_record_batches("t", [table.to_batches(max_chunksize=1000)])
    plan = ctx.sql("SELECT v, k FROM t WHERE k % 3 = 0").execution_plan()
    raw = plan.to_bytes()
    key = TaskKey("q-two-nodes", 1, 0, 0)
    sink = ExecutionPlan.from_bytes(ctx, streams.sink_plan(raw, key))
    channels = [[StreamChannel("", 1, 0, 0, p)] for p in range(plan.partition_count)]
    schema = streams.declared_schema(ctx, raw)
    source = ExecutionPlan.from_bytes(ctx, streams.source_leaf(key.query_id, schema, channels))
    from datafusion_distributed.common.threads import kept_threads

    sent = kept_threads.submit(stream_task_outputs, ctx, sink)
    batches = [b.to_pyarrow() for p in range(source.partition_count) for b in ctx.execute(source, p)]
    assert sent.result().rows == sum(b.num_rows for b in batches) == 16_667
    assert sorted(pa.Table.from_batches(batches).column("k").to_pylist()) == list(range(0, 50_000, 3))
    streams.release(key.query_id)
    assert streams.open_channels() == 0


def test_a_worker_lost_while_stages_stream_runs_them_again_spooled(
    tpch_sf001, distributed_tpch, single_node_sf001, monkeypatch
):
    """The first task of a streamed stage finds its worker gone: the query's streams stop, the
    worker counts as lost, and the stages run again spooled on the worker left, with the same
    answer."""
    from datafusion_distributed.coordinator.scheduler import QueryRun
    from datafusion_distributed.errors import WorkerUnreachable

    run_task, lost = QueryRun._run_task, []

    def losing(self, stage, task, worker, attempt=0, plan=None, feeds=()):
        if not lost and stage.id in self.state.streams.producers:
            lost.append(worker)
            raise WorkerUnreachable(worker, "connection refused (made up by the test)")
        return run_task(self, stage, task, worker, attempt, plan, feeds)

    monkeypatch.setattr(QueryRun, "_run_task", losing)
    with distributed_tpch(tpch_sf001, config=DistributedConfig(exchange="stream", **SPLIT)) as dctx:
        df = dctx.sql(tpch_query(3))
        got = df.to_arrow_table()
    assert lost and df.metrics.lost_workers == lost
    assert df.metrics.streamed_stages == []  # run again spooled
    assert_ran_distributed(df.metrics)
    assert_tables_equal(got, single_node_sf001.sql(tpch_query(3)).to_arrow_table())
    assert streams.open_channels() == 0


def test_cancelling_stops_every_streaming_task(tpch_sf01, distributed_tpch):
    """A cancel while stages stream ends the query at once and leaves no channel, nor a task
    waiting on one (the next query runs)."""
    import threading
    import time

    from datafusion_distributed.errors import QueryCancelled

    sql = "SELECT count(*) FROM lineitem a JOIN lineitem b ON a.l_partkey = b.l_partkey"
    with distributed_tpch(tpch_sf01, config=DistributedConfig(exchange="stream", **SPLIT)) as dctx:
        df = dctx.sql(sql)
        outcome: list[BaseException | None] = []

        def run() -> None:
            try:
                df.to_arrow_table()
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        deadline = time.monotonic() + 10
        while not df.cancel() and time.monotonic() < deadline:  # once it runs
            time.sleep(0.05)
        thread.join(timeout=10)
        assert not thread.is_alive(), "the query did not end after its cancel"
        assert isinstance(outcome[0], QueryCancelled)
        for _ in range(40):
            if streams.open_channels() == 0:
                break
            time.sleep(0.05)
        assert streams.open_channels() == 0
        assert dctx.sql("SELECT count(*) FROM nation").to_arrow_table().column(0)[0].as_py() == 25


def test_auto_spools_in_one_process(tpch_sf001, distributed_tpch, single_node_sf001):
    """Streaming measured no faster than files read in place (benchmarks/README.md): "auto",
    the default, spools there."""
    with distributed_tpch(tpch_sf001, config=DistributedConfig(**SPLIT)) as dctx:
        assert dctx.config.exchange == "auto"
        df = dctx.sql(tpch_query(3))
        got = df.to_arrow_table()
    assert df.metrics.streamed_stages == []
    assert_ran_distributed(df.metrics)
    assert_tables_equal(got, single_node_sf001.sql(tpch_query(3)).to_arrow_table())


def test_auto_streams_a_limit_that_may_stop_its_producers_early(
    tpch_sf001, distributed_tpch, single_node_sf001
):
    """The one case streaming was measured to pay in one process: a last stage with a limit
    and no sort under it answers once its rows arrive, and the stages below stop then."""
    config = DistributedConfig(bytes_per_partition=8 * 1024, broadcast_total_rows=0, broadcast_total_bytes=0)
    with distributed_tpch(tpch_sf001, config=config) as dctx:
        assert dctx.config.exchange == "auto"
        limited = dctx.sql(SHUFFLED_JOIN + " LIMIT 10")
        assert limited.to_arrow_table().num_rows == 10
        stages = len(limited.distributed_plan().stages)
        sorted_first = dctx.sql(SHUFFLED_JOIN + " ORDER BY l_orderkey, l_quantity, o_orderdate LIMIT 10")
        got = sorted_first.to_arrow_table()
    assert len(limited.metrics.streamed_stages) == stages - 1
    assert sorted_first.metrics.streamed_stages == []  # a sort reads everything first: spooled
    assert_ran_distributed(sorted_first.metrics)
    expected = single_node_sf001.sql(SHUFFLED_JOIN + " ORDER BY l_orderkey, l_quantity, o_orderdate LIMIT 10")
    assert_tables_equal(got, expected.to_arrow_table())
    assert streams.open_channels() == 0


def test_explain_analyze_says_which_stages_streamed(streamed):
    text = streamed.sql(tpch_query(3)).explain_string(analyze=True)
    assert "streamed=" in text


def test_a_worker_process_killed_while_stages_stream(tpch_sf01, single_node_sf01):
    """A worker process killed while its tasks stream: the consumers' streams from it break,
    the query stops its streams and runs those stages again, spooled, on the worker left."""
    import threading

    from datafusion import SessionContext

    from datafusion_distributed.clusters.local import LocalCluster
    from datafusion_distributed.events.handlers import DistributedHandler
    from datafusion_distributed.test_utils.tpch import register_tpch

    class KillOnFirstStreamedConsumer(DistributedHandler):
        """Kills worker 1 a moment after the first task of the stage that reads a stream is routed."""

        def __init__(self, cluster: LocalCluster) -> None:
            self.cluster, self.done = cluster, False

        def route_task(self, request):
            if not self.done and request.stage.inputs:
                self.done = True
                threading.Timer(0.05, self.cluster.kill, args=(1,)).start()
            return None

    ctx = SessionContext()
    register_tpch(ctx, tpch_sf01)
    sql = tpch_query(18)
    with LocalCluster(2) as cluster:
        killer = KillOnFirstStreamedConsumer(cluster)
        config = DistributedConfig(exchange="stream", **SPLIT)
        with DistributedContext(ctx, workers=cluster, config=config, handlers=[killer]) as dctx:
            df = dctx.sql(sql)
            got = df.to_arrow_table()
    assert killer.done and df.metrics.lost_workers
    assert_ran_distributed(df.metrics)
    assert_tables_equal(got, single_node_sf01.sql(sql).to_arrow_table(), sql=sql)


def test_a_worker_reports_its_data_plane_and_serves_none_where_a_producer_would_miss_its_runtime(tmp_path):
    import socket

    from datafusion_distributed.worker.flight_worker import FlightWorker

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    worker = FlightWorker(str(tmp_path / "a"), auth_token="t" * 32, data_plane_port=port)
    limited = FlightWorker(str(tmp_path / "b"), auth_token="t" * 32, memory_limit_bytes=1 << 30)
    try:
        assert worker.health()["data_plane_port"] == port
        assert limited.health()["data_plane_port"] == 0  # its memory pool would not reach a sink's child
    finally:
        worker.stop()
        limited.stop()
