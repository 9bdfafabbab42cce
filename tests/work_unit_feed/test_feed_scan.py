"""Reading a feed scan from plan bytes and display lines: which feed, which columns."""

from __future__ import annotations

import pyarrow as pa
import pytest
from datafusion import SessionContext

from datafusion_distributed.codec.feed_scan import (
    feed_folder_name,
    feed_scan_ref,
    is_plain_projection,
    projected_columns,
)
from datafusion_distributed.execution_plans.plan_node import PlanNode


@pytest.mark.parametrize(
    "line, columns, plain",
    [
        ("DataSourceExec: file_groups={4 groups}, projection=[k, v], file_type=arrow", ("k", "v"), True),
        ("DataSourceExec: projection=[CAST(tag@3 AS Utf8View) as tag], file_type=arrow", ("tag",), False),
        ("DataSourceExec: projection=[k, upper(name@1) as n], file_type=arrow", ("k", "name"), False),
        ("DataSourceExec: projection=[k], limit=10, file_type=arrow", ("k",), False),
        ("DataSourceExec: file_groups={4 groups}, file_type=arrow", None, False),
        ("DataSourceExec: projection=[k, v", None, False),  # cut: read everything
        ('DataSourceExec: projection=["odd name"], file_type=arrow', None, False),
    ],
)
def test_projected_columns(line, columns, plain):
    assert projected_columns(line) == columns
    assert is_plain_projection(line) is plain


def test_a_feed_scan_is_recognised_by_its_folder(tmp_path):
    schema = pa.schema([("k", pa.int64())])
    feed_id = "ab" * 16
    folder = tmp_path / "events" / feed_folder_name(feed_id, 3)
    folder.mkdir(parents=True)
    for i in range(3):
        with pa.ipc.new_file(str(folder / f"part-{i}.arrow"), schema):
            pass
    ctx = SessionContext()
    ctx.register_arrow("events", str(folder) + "/", schema=schema)
    plan = PlanNode.from_plan(ctx.sql("SELECT k FROM events").execution_plan())
    scans = [node for node in plan.walk() if node.name == "DataSourceExec"]
    ref = feed_scan_ref(scans[0].raw)
    assert (ref.feed_id, ref.tasks, ref.name) == (feed_id, 3, "events")
    assert ref.partitions == scans[0].partitions


def test_other_scans_are_not_feeds(tmp_path):
    path = tmp_path / "t.arrow"
    with pa.ipc.new_file(str(path), pa.schema([("k", pa.int64())])) as writer:
        writer.write_batch(pa.record_batch({"k": [1]}))
    ctx = SessionContext()
    ctx.register_arrow("t", str(path))
    plan = PlanNode.from_plan(ctx.sql("SELECT k FROM t").execution_plan())
    assert all(feed_scan_ref(node.raw) is None for node in plan.walk())
    with pytest.raises(ValueError, match="32 lowercase hex digits"):
        feed_folder_name("nope", 0)
