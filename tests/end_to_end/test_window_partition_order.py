"""Windows whose PARTITION BY order DataFusion derived from below an exchange.

A filter `a = 1` makes `a` constant, a projection `1 AS x` makes `x` constant, a filter
`a = c` makes `a` and `c` equal: DataFusion then leaves those columns out of the sort under a
window partitioned by them (or drops the sort), and the window checks, when rebuilt or run,
that its input declares them ordered. Cut at the hash repartition under the window, the
consumer's exchange scan declares nothing, and every task failed with "Expects PARTITION BY
expression to be ordered" (BoundedWindowAggExec) or "All partition by columns should have an
ordering" (WindowAggExec).

Distribution is forced on small data (one byte per partition, no inlined broadcasts) so the
producer and the consumer of that repartition both run as several tasks.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionConfig, SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed, assert_ran_on_one_node

FORCED = DistributedConfig(bytes_per_partition=1, broadcast_inline_bytes=0)

# b is unique, so a window ordered by b has one right answer.
WINDOWS_OVER_FACTS_FROM_BELOW = {
    "row_number_order_by_partition": (
        "SELECT a, b, row_number() OVER (PARTITION BY a ORDER BY a, b) AS rn FROM t WHERE a = 1"
    ),
    "rank_order_by_other": "SELECT a, b, rank() OVER (PARTITION BY a ORDER BY b) AS r FROM t WHERE a = 1",
    "rank_order_by_partition": "SELECT a, b, rank() OVER (PARTITION BY a ORDER BY a) AS r FROM t WHERE a = 2",
    "sum_running": "SELECT a, b, sum(b) OVER (PARTITION BY a ORDER BY a, b) AS s FROM t WHERE a = 1 AND b > 3",
    "sum_whole_partition": "SELECT a, b, sum(b) OVER (PARTITION BY a) AS s FROM t WHERE a = 1",
    "two_keys_one_constant": "SELECT a, c, b, rank() OVER (PARTITION BY a, c ORDER BY b) AS r FROM t WHERE a = 1",
    "equal_columns": "SELECT a, c, b, rank() OVER (PARTITION BY a, c ORDER BY b) AS r FROM t WHERE a = c",
    "constant_projection": (
        "SELECT x, b, rank() OVER (PARTITION BY x ORDER BY b) AS r FROM (SELECT 1 AS x, b FROM t WHERE b > 2)"
    ),
    "stacked_windows": (
        "SELECT a, b, c, rank() OVER (PARTITION BY c ORDER BY b) AS r, "
        "row_number() OVER (PARTITION BY a ORDER BY b) AS rn FROM t WHERE a = 2"
    ),
    "final_sort": (
        "SELECT a, b, rank() OVER (PARTITION BY a ORDER BY b) AS r FROM t WHERE a = 1 ORDER BY r, b LIMIT 7"
    ),
}

# The usual plans, whose sorts order the PARTITION BY columns themselves: still cut and split.
WINDOWS_SORTED_IN_STAGE = {
    "no_filter": "SELECT a, b, rank() OVER (PARTITION BY a ORDER BY b) AS r FROM t",
    "range_filter": "SELECT a, b, row_number() OVER (PARTITION BY a ORDER BY a, b) AS rn FROM t WHERE b > 1",
    "constant_not_partitioned": "SELECT a, c, b, rank() OVER (PARTITION BY c ORDER BY b) AS r FROM t WHERE a = 1",
}


@pytest.fixture(scope="module")
def parquet_dir(tmp_path_factory):
    """Six Parquet files: a in 0..3, c in 0..4, b unique."""
    root = tmp_path_factory.mktemp("window_order")
    rows = 600
    table = pa.table(
        {
            "a": pa.array([i % 4 for i in range(rows)], pa.int32()),
            "b": pa.array([(i * 7919) % rows for i in range(rows)], pa.int64()),
            "c": pa.array([(i // 3) % 5 for i in range(rows)], pa.int32()),
        }
    )
    for f in range(6):
        pq.write_table(table.slice(f * 100, 100), root / f"part-{f}.parquet")
    return root


def _parquet(root) -> SessionContext:
    ctx = SessionContext(SessionConfig().with_target_partitions(4))
    ctx.register_parquet("t", str(root))
    return ctx


def _values() -> SessionContext:
    """The same shape as a table made by SQL: one partition, so nothing below it splits."""
    ctx = SessionContext(SessionConfig().with_target_partitions(4))
    rows = ", ".join(f"({i % 4}, {(i * 7919) % 600}, {(i // 3) % 5})" for i in range(600))
    ctx.sql(f"CREATE TABLE t (a INT, b BIGINT, c INT) AS VALUES {rows}").collect()
    return ctx


@pytest.fixture(scope="module", params=["parquet", "values"])
def contexts(request, parquet_dir):
    """(single-node context, distributed context, table kind) over the same table."""
    make = (lambda: _parquet(parquet_dir)) if request.param == "parquet" else _values
    with DistributedContext(make(), config=FORCED) as dctx:
        yield make(), dctx, request.param


@pytest.mark.parametrize("sql", WINDOWS_OVER_FACTS_FROM_BELOW.values(), ids=WINDOWS_OVER_FACTS_FROM_BELOW)
def test_window_over_facts_from_below_an_exchange_stays_on_one_node_and_matches(contexts, sql):
    single, dctx, _ = contexts
    df = dctx.sql(sql)
    assert_tables_equal(df.to_arrow_table(), single.sql(sql).to_arrow_table(), sql=sql)
    # the window relies on an order an exchange does not carry: its stage is never split
    assert_ran_on_one_node(df)


@pytest.mark.parametrize("sql", WINDOWS_SORTED_IN_STAGE.values(), ids=WINDOWS_SORTED_IN_STAGE)
def test_window_sorted_in_its_stage_is_still_split(contexts, sql):
    single, dctx, kind = contexts
    df = dctx.sql(sql)
    assert_tables_equal(df.to_arrow_table(), single.sql(sql).to_arrow_table(), sql=sql)
    if kind == "parquet":  # a table made by SQL is one partition: nothing to split
        assert_ran_distributed(df)
        plan = df.distributed_plan()
        assert len(plan.stages) > 1 and plan.final.task_count > 1, plan.final.reason
    else:
        assert_ran_on_one_node(df)


def test_default_config_matches_single_node(parquet_dir):
    """Without forcing, small data runs as one stage: the queries must still answer."""
    single = _parquet(parquet_dir)
    with DistributedContext(_parquet(parquet_dir)) as dctx:
        for sql in WINDOWS_OVER_FACTS_FROM_BELOW.values():
            df = dctx.sql(sql)
            assert_tables_equal(df.to_arrow_table(), single.sql(sql).to_arrow_table(), sql=sql)
            assert_ran_on_one_node(df)
