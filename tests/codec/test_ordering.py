"""Sort keys and PARTITION BY keys read out of real plans."""

from __future__ import annotations

import pyarrow as pa
from datafusion import SessionConfig, SessionContext

from datafusion_distributed.codec.ordering import sort_keys, window_partition_keys
from datafusion_distributed.execution_plans.plan_node import PlanNode


def _nodes(sql: str) -> dict[str, PlanNode]:
    ctx = SessionContext(SessionConfig().with_target_partitions(4))
    batch = pa.record_batch({"a": [1, 2], "b": [3, 4], "c": [5, 6]})
    ctx.register_record_batches("t", [[batch]] * 4)
    root = PlanNode.from_plan(ctx.sql(sql).execution_plan())
    return {n.name: n for n in root.walk()}


def test_window_partition_keys_are_the_sort_keys_that_order_them():
    nodes = _nodes("SELECT rank() OVER (PARTITION BY a, c ORDER BY b) FROM t")
    (partitions,) = window_partition_keys(nodes["BoundedWindowAggExec"].raw)
    keys = sort_keys(nodes["SortExec"].raw)
    assert len(partitions) == 2 and len(keys) == 3
    assert set(partitions) == set(keys[:2])
    assert keys[2] not in partitions  # b, the ORDER BY column


def test_a_constant_partition_column_is_missing_from_the_sort():
    nodes = _nodes("SELECT rank() OVER (PARTITION BY a ORDER BY b) FROM t WHERE a = 1")
    (partitions,) = window_partition_keys(nodes["BoundedWindowAggExec"].raw)
    assert sort_keys(nodes["SortExec"].raw)[:1] != partitions


def test_expressions_compare_by_bytes():
    nodes = _nodes("SELECT sum(b) OVER (PARTITION BY a % 2 ORDER BY b), c FROM t")
    window = next(n for name, n in nodes.items() if name.endswith("WindowAggExec"))
    (partitions,) = window_partition_keys(window.raw)
    assert sort_keys(nodes["SortExec"].raw)[:1] == partitions


def test_merge_keys_and_windows_without_partitions():
    nodes = _nodes("SELECT a, row_number() OVER (ORDER BY b) FROM t ORDER BY a")
    assert window_partition_keys(nodes["BoundedWindowAggExec"].raw) == [[]]
    assert len(sort_keys(nodes["SortPreservingMergeExec"].raw)) == 1
