"""Memory scans read from plan bytes: rows, data bytes, partitions, and a declared ordering."""

from __future__ import annotations

import pyarrow as pa
from datafusion import SessionContext

from datafusion_distributed.codec import fields as F
from datafusion_distributed.codec.memory import memory_scan
from datafusion_distributed.codec.wire import encode_len_field, iter_fields
from datafusion_distributed.execution_plans.plan_node import PlanNode


def _leaf(ctx: SessionContext, query: str) -> PlanNode:
    return next(n for n in PlanNode.from_plan(ctx.sql(query).execution_plan()).walk() if not n.children)


def test_a_memory_scan_tells_its_rows_partitions_and_size():
    ctx = SessionContext()
    batch = pa.record_batch({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    ctx.register_record_batches("t", [[batch, batch], [batch.slice(0, 1)], []])
    scan = memory_scan(_leaf(ctx, "SELECT a FROM t").raw)
    assert scan is not None
    assert (scan.rows, scan.partitions, scan.ordered) == (7, 3, False)
    assert 0 < scan.data_bytes < len(_leaf(ctx, "SELECT a FROM t").raw)


def test_other_nodes_are_not_memory_scans(tpch_sf001):
    ctx = SessionContext()
    ctx.register_parquet("nation", str(tpch_sf001 / "nation"))
    assert memory_scan(_leaf(ctx, "SELECT * FROM nation").raw) is None
    assert memory_scan(b"\xff") is None


def test_a_memory_scan_with_sort_information_is_ordered():
    ctx = SessionContext()
    ctx.register_record_batches("t", [[pa.record_batch({"a": [1, 2, 3]})]])
    raw = _leaf(ctx, "SELECT a FROM t").raw
    (top,) = iter_fields(raw)
    # sort_information is only set on a table made sorted in Rust: add an (empty) entry
    scan = top.payload(raw) + encode_len_field(F.MEMORY_SORT_INFORMATION, b"")
    found = memory_scan(encode_len_field(F.MEMORY_SCAN, scan))
    assert found is not None and found.ordered
