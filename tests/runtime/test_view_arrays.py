"""Compacting view columns before they are written to an exchange file."""

import pyarrow as pa
import pytest
from datafusion import SessionContext

from datafusion_distributed.runtime.outputs import write_task_outputs
from datafusion_distributed.runtime.view_arrays import compact_views, held_bytes

LONG = [f"customer name number {i:08d}" for i in range(100_000)]  # 30 bytes: not inlined


def shared_buffer_rows(view_type):
    """A few rows sliced from a large view array: they still reference all of its data."""
    values = pa.array(LONG[:99_999] + [None], pa.string()).cast(view_type)
    return values.slice(99_995)


@pytest.mark.parametrize("view_type", [pa.string_view(), pa.binary_view()])
def test_oversized_view_columns_are_compacted_without_changing_values(view_type):
    column = shared_buffer_rows(view_type)
    batch = pa.record_batch({"name": column, "id": pa.array(range(5))})
    assert held_bytes(column) > 2_000_000

    compacted = compact_views(batch)

    assert compacted.equals(batch)
    assert compacted.schema == batch.schema
    assert held_bytes(compacted.column(0)) < 1000


def test_columns_holding_little_are_left_alone():
    small = pa.array(LONG[:100], pa.string_view()).slice(10)  # holds 3 KB: not worth a copy
    compacted = compact_views(pa.record_batch({"c": small})).column(0)
    assert compacted.buffers()[2].address == small.buffers()[2].address
    plain = pa.record_batch({"id": pa.array([1, 2]), "s": pa.array(["x", "y"])})
    assert compact_views(plain) is plain


def test_exchange_files_do_not_repeat_a_join_build_side(tmp_path):
    """A join's output rows reference the build side's buffers; its files must not repeat them."""
    ctx = SessionContext()
    names = pa.table({"k": pa.array(range(100_000)), "name": pa.array(LONG, pa.string_view())})
    ctx.register_record_batches("names", [names.to_batches(max_chunksize=100_000)])
    keys = pa.table({"k": pa.array([i * 7 % 100_000 for i in range(50_000)])})
    ctx.register_record_batches("keys", [keys.to_batches(max_chunksize=1000)])
    plan = ctx.sql("SELECT keys.k, names.name FROM keys JOIN names ON keys.k = names.k").execution_plan()

    output = write_task_outputs(ctx, plan, str(tmp_path), compression=None)

    written = sum(p.bytes for p in output.partitions)
    assert output.rows == 50_000
    assert written < 50_000 * (8 + 16 + 30) * 2, written  # without compaction: ~50 x the build side


def test_a_few_rows_holding_under_a_megabyte_are_compacted_too():
    # Small batches each holding most of a build side's strings added up to megabytes per
    # handful of rows (TPC-H q10's last exchange: 4.4 MB for 40 rows).
    column = pa.array(LONG[:30_000], pa.string_view()).slice(100, 3)
    assert 500_000 < held_bytes(column) < 1 << 20
    compacted = compact_views(pa.record_batch({"c": column})).column(0)
    assert compacted.equals(column)
    assert held_bytes(compacted) < 1000
