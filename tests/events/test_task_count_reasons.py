"""explain() says why a stage has the tasks it has. Once it showed `tasks=1 desired=1` for
README's own example and never said that the scan was too small to split."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext
from datafusion_distributed.distributed_planner.config import MiB, QueryPlanConfig
from datafusion_distributed.events.defaults import ScanSizeTaskCount
from datafusion_distributed.events.handlers import TaskCountRequest


def _count(scanned: int, inputs: tuple[int, ...] = (), **config):
    request = TaskCountRequest(None, scanned, inputs, 8, 4, QueryPlanConfig(workers=4, **config), ())
    return ScanSizeTaskCount().task_count(request)


def test_a_scan_says_its_bytes_and_the_bytes_a_task_takes():
    count = _count(int(9.5 * MiB))
    assert (count.desired, count.why) == (
        1,
        "9.5 MiB to scan, 32.0 MiB a task: bytes_per_partition x partitions_per_task",
    )
    assert _count(int(9.5 * MiB), bytes_per_partition=MiB).desired == 5


def test_a_stage_above_shuffles_follows_its_largest_input():
    assert _count(0, (3, 2)).why == "its largest input stage's 3 task(s)"
    halved = _count(0, (4,), cardinality_factor=0.5)
    assert (halved.desired, halved.why) == (2, "its largest input stage's 4 task(s) x cardinality_factor 0.5")
    assert _count(0).why == "no scan or shuffle to size it by"


@pytest.fixture
def table(tmp_path):
    for i in range(4):
        pq.write_table(
            pa.table({"k": [i % 3] * 5000, "v": list(range(5000))}), tmp_path / f"part-{i}.parquet"
        )
    return str(tmp_path)


def _tasks_lines(table: str, **config) -> list[str]:
    ctx = SessionContext()
    ctx.register_parquet("t", table)
    with DistributedContext(ctx, config=DistributedConfig(**config)) as dctx:
        text = dctx.sql("SELECT k, sum(v) FROM t GROUP BY k ORDER BY k").explain_string()
    return [line for line in text.splitlines() if line.startswith("│ tasks:")]


def test_a_query_folded_into_one_stage_shows_its_scan_s_reason(table):
    (line,) = _tasks_lines(table)
    assert "to scan, 32.0 MiB a task" in line and "desired=1 (" in line


def test_a_split_query_shows_each_stage_s_reason(table):
    lines = _tasks_lines(table, bytes_per_partition="4KiB")
    assert len(lines) > 1 and any("to scan, 8.0 KiB a task" in line for line in lines)
