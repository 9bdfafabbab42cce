"""A cancelled query that runs wholly in the coordinator stops its work, not only its caller.

A query of one task runs in the coordinator from DataFusion's plan. A join in it that emits
millions of rows per input batch never yields, so dropping its stream on cancel left
DataFusion's tokio tasks working for seconds, or minutes. Such a plan now runs with a yield
point over each join when that costs nothing: it travels faithfully and carries no dynamic
join filter (which its bytes would drop).
"""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionContext

from datafusion_distributed import DistributedContext, QueryCancelled

# Two keys: each of 400,000 rows meets 200,000 others, 8e10 pairs; about 1.6e9 per input batch.
SPINNING_JOIN = (
    "SELECT count(*) AS n FROM generate_series(1, 400000) a "
    "JOIN generate_series(1, 400000) b ON a.value % 2 = b.value % 2"
)
STOP_AFTER = 2.0  # seconds into the query
AFTER_CANCEL = 3.0  # seconds watched after the query raised
MAX_CPU = 1.5  # CPU seconds allowed in that time (a join that goes on burns about 2.5 on 2 cores)


def cpu_seconds_over(seconds: float) -> float:
    """CPU seconds this process uses over the next `seconds`."""
    start = time.process_time()
    time.sleep(seconds)
    return time.process_time() - start


@pytest.mark.timeout(120)
def test_a_cancelled_one_node_join_frees_the_cpu():
    with DistributedContext(SessionContext()) as dctx:
        df = dctx.sql(SPINNING_JOIN)
        plan = df.distributed_plan()
        assert plan.in_memory  # one task, run in the coordinator
        threading.Timer(STOP_AFTER, df.cancel).start()
        started = time.monotonic()
        with pytest.raises(QueryCancelled):
            df.to_pylist()
        assert time.monotonic() - started < STOP_AFTER + 5
        burnt = cpu_seconds_over(AFTER_CANCEL)
        assert burnt < MAX_CPU, f"{burnt:.2f} CPU seconds in the {AFTER_CANCEL:g} s after cancel"


def test_a_one_node_join_runs_with_yield_points_and_the_same_answer():
    sql = (
        "SELECT a.value % 3 AS k, count(*) AS n FROM generate_series(1, 300) a "
        "JOIN generate_series(1, 300) b ON a.value % 3 = b.value % 3 GROUP BY 1 ORDER BY 1"
    )
    with DistributedContext(SessionContext()) as dctx:
        df = dctx.sql(sql)
        assert "CooperativeExec" in df.distributed_plan().physical.display_indent()
        assert df.to_pylist() == [{"k": 0, "n": 10000}, {"k": 1, "n": 10000}, {"k": 2, "n": 10000}]


def test_a_join_with_dynamic_filters_runs_from_memory(tmp_path):
    """Its bytes would drop the filters a hash join pushes into a Parquet scan (they make short
    queries faster): the plan runs as DataFusion made it."""
    pq.write_table(pa.table({"k": list(range(1000))}), tmp_path / "t.parquet")
    ctx = SessionContext()
    ctx.register_parquet("t", str(tmp_path / "t.parquet"))
    with DistributedContext(ctx) as dctx:
        df = dctx.sql("SELECT count(*) AS n FROM t a JOIN t b ON a.k = b.k")
        shown = df.distributed_plan().physical.display_indent()
        assert "DynamicFilter" in shown and "CooperativeExec" not in shown
        assert df.to_pylist() == [{"n": 1000}]


def test_a_plan_without_a_join_runs_from_memory():
    with DistributedContext(SessionContext()) as dctx:
        df = dctx.sql("SELECT count(*) AS n FROM generate_series(1, 1000)")
        assert "CooperativeExec" not in df.distributed_plan().physical.display_indent()
        assert df.to_pylist() == [{"n": 1000}]


def test_a_join_over_a_memory_table_runs_from_memory():
    """Its bytes would hold the table's rows: copying them costs more than the query."""
    ctx = SessionContext()
    ctx.register_record_batches("m", [[pa.record_batch({"k": list(range(100))})]])
    with DistributedContext(ctx) as dctx:
        df = dctx.sql("SELECT count(*) AS n FROM m a JOIN m b ON a.k % 2 = b.k % 2")
        assert "CooperativeExec" not in df.distributed_plan().physical.display_indent()
        assert df.to_pylist() == [{"n": 5000}]


def test_a_join_that_would_not_travel_faithfully_runs_from_memory():
    """IGNORE NULLS of a window function is dropped by the plan's bytes: never rebuilt."""
    sql = (
        "SELECT first_value(CASE WHEN b.value > 2 THEN b.value END) IGNORE NULLS "
        "OVER (ORDER BY a.value) AS f FROM generate_series(1, 5) a "
        "JOIN generate_series(1, 5) b ON a.value = b.value ORDER BY a.value"
    )
    with DistributedContext(SessionContext()) as dctx:
        df = dctx.sql(sql)
        assert "CooperativeExec" not in df.distributed_plan().physical.display_indent()
        assert df.to_pylist() == [{"f": None}, {"f": None}, {"f": 3}, {"f": 3}, {"f": 3}]


def test_a_join_of_series_is_judged_from_its_repaired_bytes():
    """DataFusion serialises a series generator wrongly (see `codec.generate_series`): whether
    a plan may be rebuilt with yield points is judged on the bytes as repaired, as for a
    distributed plan. Judged on DataFusion's own bytes, this one was rebuilt and failed with
    "number of columns(1) must match number of fields(0)"."""
    sql = "SELECT g1.value FROM generate_series(1, 3) g1 CROSS JOIN generate_series(1, 3) g2"
    with DistributedContext(SessionContext()) as dctx:
        assert sorted(r["value"] for r in dctx.sql(sql).to_pylist()) == [1, 1, 1, 2, 2, 2, 3, 3, 3]
