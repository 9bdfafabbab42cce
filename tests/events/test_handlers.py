"""The handler chain through the public API: routing, task counts, plan rewrites and
lifecycle events."""

from __future__ import annotations

import socket

import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext, EmbeddedCluster
from datafusion_distributed.events import (
    DistributedHandler,
    Event,
    EventKind,
    HandlerChain,
    RoutingRequest,
    TaskCount,
)
from datafusion_distributed.metrics.query_metrics import COORDINATOR
from datafusion_distributed.test_utils.tpch import register_tpch

CONFIG = DistributedConfig(bytes_per_partition=1024)
QUERY = "SELECT o_orderpriority, count(*) AS n FROM orders GROUP BY 1 ORDER BY 1"


class Recorder(DistributedHandler):
    def __init__(self):
        self.events: list[Event] = []

    def on_event(self, event: Event) -> None:
        self.events.append(event)


@pytest.fixture(scope="module")
def cluster():
    with EmbeddedCluster(3) as cluster:
        yield cluster


def _context(tpch, cluster, handlers, **options) -> DistributedContext:
    ctx = SessionContext()
    register_tpch(ctx, tpch)
    return DistributedContext(ctx, workers=cluster, config=CONFIG, handlers=handlers, **options)


def test_routing_handler_pins_tasks_to_chosen_workers(tpch_sf001, cluster):
    chosen = cluster.get_urls()[2]
    seen: list[RoutingRequest] = []

    class PinToOne(DistributedHandler):
        def route_task(self, request: RoutingRequest) -> str:
            seen.append(request)
            return chosen

    recorder = Recorder()
    dctx = _context(tpch_sf001, cluster, [PinToOne(), recorder])
    rows = dctx.sql(QUERY).to_pylist()
    assert len(rows) == 5
    assert seen and all(r.workers == tuple(cluster.get_urls()) for r in seen)
    workers = {e.worker for e in recorder.events if e.kind is EventKind.TASK_STARTED}
    assert workers <= {chosen, "coordinator"} and chosen in workers


def test_routing_answer_outside_the_cluster_falls_through(tpch_sf001, cluster):
    class Nowhere(DistributedHandler):
        def route_task(self, request):
            return "grpc://not-a-worker:1"

    dctx = _context(tpch_sf001, cluster, [Nowhere()])
    assert len(dctx.sql(QUERY).to_pylist()) == 5


def test_task_count_handler_changes_a_stages_task_count(tpch_sf001, cluster):
    default = _context(tpch_sf001, cluster, [])
    leaf = next(s for s in default.sql(QUERY).distributed_plan().stages if not s.inputs)
    assert leaf.task_count == 3

    class TwoTasksPerScan(DistributedHandler):
        def task_count(self, request):
            if request.scanned_bytes:
                return TaskCount(desired=2)
            return None  # the built-in answers for every other stage

    dctx = _context(tpch_sf001, cluster, [TwoTasksPerScan()])
    df = dctx.sql(QUERY)
    leaf = next(s for s in df.distributed_plan().stages if not s.inputs)
    assert leaf.task_count == 2
    assert "(by TwoTasksPerScan)" in df.explain_string()
    assert df.to_pylist() == default.sql(QUERY).to_pylist()


def test_task_count_maximum_is_a_hard_cap(tpch_sf001, cluster):
    class AtMostTwo(DistributedHandler):
        def task_count(self, request):
            return TaskCount(desired=100, maximum=2)

    plan = _context(tpch_sf001, cluster, [AtMostTwo()]).sql(QUERY).distributed_plan()
    assert max(s.task_count for s in plan.stages) == 2


def test_lifecycle_events_arrive_in_order(tpch_sf001, cluster):
    recorder = Recorder()
    dctx = _context(tpch_sf001, cluster, [recorder])
    dctx.sql(QUERY).to_pylist()
    events = recorder.events
    kinds = [e.kind for e in events]
    assert kinds[0] is EventKind.QUERY_STARTED and kinds[-1] is EventKind.QUERY_FINISHED
    assert len({e.query_id for e in events}) == 1
    started, finished = set(), set()
    for e in events[1:-1]:
        if e.kind is EventKind.STAGE_STARTED:
            started.add(e.stage)
        elif e.kind is EventKind.TASK_STARTED:
            assert e.stage in started and e.stage not in finished
        elif e.kind is EventKind.TASK_FINISHED:
            assert e.stage in started and e.metrics.rows >= 0
            assert any(
                s.kind is EventKind.TASK_STARTED and (s.stage, s.task) == (e.stage, e.task)
                for s in events[: events.index(e)]
            )
        elif e.kind is EventKind.STAGE_FINISHED:
            assert e.stage in started
            finished.add(e.stage)
            assert e.metrics.stage == e.stage
    assert started == finished
    assert events[-1].metrics.finished


def test_failed_query_notifies(tpch_sf001, cluster):
    recorder = Recorder()
    dctx = _context(tpch_sf001, cluster, [recorder])
    dctx.register_udf(_failing_udf())
    with pytest.raises(Exception, match="boom"):
        dctx.sql("SELECT explode(o_orderkey) FROM orders").to_pylist()
    kinds = [e.kind for e in recorder.events]
    assert EventKind.TASK_FAILED in kinds or EventKind.QUERY_FAILED in kinds
    assert kinds[-1] is EventKind.QUERY_FAILED


def test_a_query_failing_in_the_head_stage_reports_its_task_failed_not_finished(tpch_sf001, cluster):
    recorder = Recorder()
    dctx = _context(tpch_sf001, cluster, [recorder])
    dctx.register_udf(_failing_udf())
    # over a shuffle, the final aggregate's projection runs in the coordinator and fails there
    sql = "SELECT o_orderstatus, explode(count(*)) FROM orders GROUP BY o_orderstatus"
    with pytest.raises(Exception, match="boom"):
        dctx.sql(sql).to_pylist()
    head = max(e.stage for e in recorder.events if e.kind is EventKind.STAGE_STARTED)
    assert head > 0  # stages ran on workers before the head
    of_head = [e for e in recorder.events if e.stage == head and e.kind is not EventKind.STAGE_ADAPTED]
    assert [e.kind for e in of_head] == [
        EventKind.STAGE_STARTED,
        EventKind.TASK_STARTED,
        EventKind.TASK_FAILED,
    ]
    assert of_head[-1].worker == COORDINATOR and "boom" in str(of_head[-1].error)
    assert recorder.events[-1].kind is EventKind.QUERY_FAILED


def _failing_udf():
    import pyarrow as pa
    from datafusion import udf

    def explode(values):
        raise ValueError("boom")

    return udf(explode, [pa.int64()], pa.int64(), "volatile", name="explode")


def test_unreachable_worker_is_reported(tpch_sf001, cluster):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"grpc://127.0.0.1:{s.getsockname()[1]}"
    recorder = Recorder()
    ctx = SessionContext()
    register_tpch(ctx, tpch_sf001)
    config = DistributedConfig(
        bytes_per_partition=1024, connect_timeout=5, auth_token=cluster.auth_token, check_workers="off"
    )  # the loss is found by the query
    dctx = DistributedContext(ctx, workers=[dead, *cluster.get_urls()], config=config, handlers=[recorder])
    assert len(dctx.sql(QUERY).to_pylist()) == 5
    lost = [e for e in recorder.events if e.kind is EventKind.WORKER_UNREACHABLE]
    assert lost and lost[0].worker == dead
    assert recorder.events[-1].kind is EventKind.QUERY_FINISHED


def test_worker_plan_rewrite(tpch_sf001):
    rewritten = []

    class Observe(DistributedHandler):
        def rewrite_plan(self, request):
            rewritten.append((request.stage, request.task, len(request.plan_bytes)))
            return request.plan_bytes  # a replacement (here: the same plan, rebuilt)

    ctx = SessionContext()
    register_tpch(ctx, tpch_sf001)
    with DistributedContext(ctx, config=CONFIG, handlers=[Observe()]) as dctx:
        assert len(dctx.sql(QUERY).to_pylist()) == 5
    assert rewritten and all(size > 0 for _, _, size in rewritten)


def test_a_raising_observer_does_not_fail_the_query(tpch_sf001, cluster):
    class Broken(DistributedHandler):
        def on_event(self, event):
            raise RuntimeError("observer bug")

    assert len(_context(tpch_sf001, cluster, [Broken()]).sql(QUERY).to_pylist()) == 5


def test_chain_order_user_first_then_defaults():
    class Fixed(DistributedHandler):
        def task_count(self, request):
            return TaskCount(3)

    chain = HandlerChain([Fixed()])
    answer, handler = chain.task_count(None)
    assert answer == TaskCount(3) and isinstance(handler, Fixed)
    assert [type(h).__name__ for h in chain.handlers] == [
        "Fixed",
        "ScanSizeTaskCount",
        "RoundRobinRouting",
        "InputSizeAdaptation",
    ]
    with pytest.raises(ValueError):
        TaskCount(0)
