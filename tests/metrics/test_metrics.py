"""Per-task metrics: row counts match the data, bytes read match bytes written, and the
protocol field is validated."""

from __future__ import annotations

import json

import pytest

from datafusion_distributed import DistributedConfig
from datafusion_distributed.metrics.query_metrics import COORDINATOR
from datafusion_distributed.metrics.task_metrics import (
    MAX_DEPTH,
    MAX_NODES,
    InputMetrics,
    NodeMetrics,
    TaskMetrics,
)
from datafusion_distributed.protocol.messages import (
    PartitionResult,
    ProtocolError,
    TaskResult,
    decode_task_result,
    encode,
)

# Small partitions so SF 0.01 splits into several tasks per stage.
CONFIG = DistributedConfig(
    embedded_workers=3, bytes_per_partition=1024, exchange="spool"
)  # file exchanges measured


@pytest.fixture(scope="module")
def dctx(tpch_sf001, distributed_tpch):
    with distributed_tpch(tpch_sf001, config=CONFIG) as dctx:
        yield dctx


def _scan_stage(plan):
    return next(s for s in plan.stages if not s.inputs and s.task_count > 1)


def test_scan_stage_rows_match_filtered_rows(dctx, single_node_sf001):
    sql = "SELECT l_returnflag, count(*) AS n FROM lineitem WHERE l_quantity < 10 GROUP BY 1"
    df = dctx.sql(sql)
    df.to_arrow_table()
    plan, metrics = df.distributed_plan(), df.metrics
    assert metrics is not None and metrics.finished
    single = single_node_sf001
    expected = single.sql("SELECT count(*) AS n FROM lineitem WHERE l_quantity < 10").to_pylist()[0]["n"]
    total = single.sql("SELECT count(*) AS n FROM lineitem").to_pylist()[0]["n"]
    scan = metrics.stage(_scan_stage(plan).id)
    assert len(scan.tasks) > 1
    nodes = {n.name: n for n in scan.plan.walk()}
    assert nodes["FilterExec"].get("output_rows") == expected
    # the scan reads at least the filtered rows, at most the table (row groups may be pruned)
    assert expected <= nodes["DataSourceExec"].get("output_rows") <= total
    # every task reports its worker, wall time and queue time
    for task in scan.tasks:
        assert task.worker.startswith("grpc://")
        assert task.metrics.wall_seconds > 0 and task.metrics.queue_seconds >= 0
    # the final result's row count
    final = metrics.stage(plan.final.id)
    assert final.rows == 3


def test_bytes_fetched_equal_bytes_written(dctx):
    df = dctx.sql("SELECT o_orderpriority, count(*) FROM orders GROUP BY 1")
    df.to_arrow_table()
    plan, metrics = df.distributed_plan(), df.metrics
    checked = 0
    for stage in plan.stages:
        for index, inp in enumerate(stage.inputs):
            written = metrics.stage(inp.producer).bytes
            read = metrics.stage(stage.id).input_totals(index)
            assert written > 0
            assert read.bytes == written, (stage.id, index)
            assert read.fetched_bytes <= read.bytes
            checked += 1
    assert checked >= 1
    # the producer's rows per partition add up to its output rows
    for stage in plan.stages[:-1]:
        sm = metrics.stage(stage.id)
        assert sum(r for t in sm.tasks for r, _ in t.partitions) == sm.rows


def test_metrics_collected_when_a_limit_stops_early(dctx):
    df = dctx.sql("SELECT l_orderkey FROM lineitem LIMIT 5")
    assert df.to_arrow_table().num_rows == 5
    final = df.metrics.stage(df.distributed_plan().final.id)
    assert final.tasks and final.tasks[0].rows == 5
    # a reader that stops after the first batch still leaves metrics behind
    df = dctx.sql("SELECT * FROM lineitem")
    stream = df.execute_stream()
    next(stream)
    stream.close()
    assert df.metrics is not None and df.metrics.finished
    head = df.metrics.stage(df.distributed_plan().final.id)
    if head is not None and head.tasks[0].worker == COORDINATOR:
        assert head.tasks[0].metrics.plan is not None


def _result(metrics) -> bytes:
    result = TaskResult((PartitionResult(0, 1, 10, "/x"),), None, 0.5, 0, metrics)
    return encode(result)


def test_metrics_round_trip_the_protocol():
    metrics = TaskMetrics(
        "grpc://h:1",
        0.25,
        0.01,
        NodeMetrics("FilterExec", {"output_rows": 3}, (NodeMetrics("DataSourceExec", {"output_rows": 9}),)),
        (InputMetrics(0, 100, 50, 2, 0.1, 0.05),),
    )
    assert decode_task_result(_result(metrics)).metrics == metrics
    assert decode_task_result(_result(None)).metrics is None
    # a worker that leaves the field out is still understood
    body = json.loads(_result(None))
    del body["metrics"]
    assert decode_task_result(json.dumps(body).encode()).metrics is None


@pytest.mark.parametrize(
    "bad",
    [
        {"worker": "w", "wall_seconds": -1},
        {"worker": "w", "wall_seconds": 1, "surprise": 1},
        {"worker": "w", "wall_seconds": 1, "plan": {"name": "X", "values": {"output_rows": "many"}}},
        {"worker": "w", "wall_seconds": 1, "inputs": [{"index": 0, "fetched_bytes": -5}]},
    ],
)
def test_malformed_metrics_are_refused(bad):
    body = json.loads(_result(None))
    body["metrics"] = bad
    with pytest.raises(ProtocolError, match="metrics"):
        decode_task_result(json.dumps(body).encode())


def test_oversized_metrics_are_refused():
    node: dict = {"name": "X", "values": {}, "children": []}
    wide = {"name": "Root", "values": {}, "children": [node] * (MAX_NODES + 1)}
    body = json.loads(_result(None))
    body["metrics"] = {"worker": "w", "wall_seconds": 1, "plan": wide}
    with pytest.raises(ProtocolError, match="nodes"):
        decode_task_result(json.dumps(body).encode())


def test_deeply_nested_metrics_are_refused():
    node: dict = {"name": "X", "values": {}, "children": []}
    for _ in range(MAX_DEPTH + 1):
        node = {"name": "X", "values": {}, "children": [node]}
    body = json.loads(_result(None))
    body["metrics"] = {"worker": "w", "wall_seconds": 1, "plan": node}
    with pytest.raises(ProtocolError, match="nested"):
        decode_task_result(json.dumps(body).encode())
