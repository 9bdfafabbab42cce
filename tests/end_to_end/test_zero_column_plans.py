"""Plans that carry rows of no columns: `count(*)` over a series, a filter, a join, a limit.

DataFusion 55 serialises a `generate_series`/`range` whose every column is projected away
with an empty schema and no projection, so the plan rebuilt from bytes made one-column
batches against a schema of none and failed with "number of columns(1) must match number of
fields(0)", whatever the configuration. Zero-column batches crossing an exchange must keep
their row counts too.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datafusion import SessionConfig, SessionContext

from datafusion_distributed import DistributedConfig, DistributedContext
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed, assert_ran_on_one_node

CONFIGS = {
    "default": DistributedConfig(),
    "forced": DistributedConfig(bytes_per_partition=1, broadcast_inline_bytes=0),
}

SERIES = {
    "cte_where_true": (
        "WITH t AS (SELECT i AS c1 FROM generate_series(1,10) t(i)) SELECT count(*) FROM t WHERE 1 = 1"
    ),
    "generate_series": "SELECT count(*) FROM generate_series(1, 100000)",
    "range": "SELECT count(*) FROM range(7, 100000, 3)",
    "empty_series": "SELECT count(*) FROM generate_series(5, 1)",
    "dates": "SELECT count(*) FROM generate_series(DATE '2020-01-01', DATE '2021-01-01', INTERVAL '1 day')",
    "timestamps": (
        "SELECT count(*) FROM generate_series(TIMESTAMP '2020-01-01', TIMESTAMP '2020-02-01', INTERVAL '1 hour')"
    ),
    "timestamps_with_zone": (
        "SELECT count(*) FROM generate_series(TIMESTAMPTZ '2020-01-01T00:00:00+02:00', "
        "TIMESTAMPTZ '2020-01-03T00:00:00Z', INTERVAL '1 hour')"
    ),
    "two_series": "SELECT count(*) FROM generate_series(1, 10) a, generate_series(1, 20) b",
    "union_of_series": (
        "SELECT count(*) FROM (SELECT 1 FROM generate_series(1, 10) UNION ALL SELECT 1 FROM generate_series(1, 10))"
    ),
    "series_and_table": "SELECT count(*) FROM t, generate_series(1, 30) g WHERE t.b > 10",
    "table_and_series": "SELECT count(*) FROM generate_series(1, 30) g, t WHERE t.b > 10",
    "grouped_over_series": "SELECT t.a, count(*) AS n FROM t, range(3) g WHERE t.b > 10 GROUP BY t.a",
}

# Zero-column batches produced by Parquet scans: across coalesce exchanges (a filter's
# output, a cross join's build side, a limit), and aggregated from several tasks.
TABLES = {
    "filtered": "SELECT count(*) FROM t WHERE b > 3",
    "subquery_of_constants": "SELECT count(*) FROM (SELECT 1 FROM t WHERE b > 3)",
    "whole_table": "SELECT count(*) FROM (SELECT 1 FROM t)",
    "limit": "SELECT count(*) FROM (SELECT a FROM t WHERE b > 3 LIMIT 70)",
    "cross_join": "SELECT count(*) FROM t, u WHERE t.b > 3 AND u.b > 50",
    "hash_join": "SELECT count(*) FROM t JOIN u ON t.a = u.a WHERE t.b > 3",
    "union": "SELECT count(*) FROM (SELECT 1 FROM t WHERE b > 3 UNION ALL SELECT 1 FROM u WHERE b < 50)",
    "semi_join": "SELECT count(*) FROM t WHERE a IN (SELECT a FROM u WHERE b > 10)",
}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("zero_columns")
    for name, rows in (("t", 400), ("u", 300)):
        (root / name).mkdir()
        table = pa.table(
            {"a": pa.array([i % 5 for i in range(rows)], pa.int32()), "b": pa.array(range(rows), pa.int64())}
        )
        for f in range(4):
            pq.write_table(table.slice(f * rows // 4, rows // 4), root / name / f"part-{f}.parquet")
    return root


def _context(root) -> SessionContext:
    ctx = SessionContext(SessionConfig().with_target_partitions(4))
    ctx.register_parquet("t", str(root / "t"))
    ctx.register_parquet("u", str(root / "u"))
    return ctx


@pytest.fixture(scope="module", params=list(CONFIGS))
def contexts(request, data_dir):
    with DistributedContext(_context(data_dir), config=CONFIGS[request.param]) as dctx:
        yield _context(data_dir), dctx, request.param


@pytest.mark.parametrize("sql", SERIES.values(), ids=SERIES)
def test_count_over_a_series_matches_single_node(contexts, sql):
    single, dctx, config = contexts
    df = dctx.sql(sql)
    assert_tables_equal(df.to_arrow_table(), single.sql(sql).to_arrow_table(), sql=sql)
    # a series is one partition: only a table beside it splits, and only when forced
    split = config == "forced" and sql in (SERIES["series_and_table"], SERIES["grouped_over_series"])
    (assert_ran_distributed if split else assert_ran_on_one_node)(df)


@pytest.mark.parametrize("sql", TABLES.values(), ids=TABLES)
def test_zero_column_rows_keep_their_count(contexts, sql):
    single, dctx, config = contexts
    df = dctx.sql(sql)
    assert_tables_equal(df.to_arrow_table(), single.sql(sql).to_arrow_table(), sql=sql)
    if config == "forced" and sql != TABLES["whole_table"]:  # that one is answered from statistics
        assert_ran_distributed(df)
    else:  # small data, by default, or no data to read
        assert_ran_on_one_node(df)


def test_a_zero_column_exchange_is_cut_and_counted(data_dir):
    """A cross join's build side of no columns is a stage of its own, read by every task."""
    sql = TABLES["cross_join"]
    with DistributedContext(_context(data_dir), config=CONFIGS["forced"]) as dctx:
        df = dctx.sql(sql)
        producers = [
            s for s in df.distributed_plan().stages[:-1] if "projection=[]" in s.root.children[0].line
        ]
        assert producers, "no stage writes rows of zero columns"
        assert_tables_equal(df.to_arrow_table(), _context(data_dir).sql(sql).to_arrow_table(), sql=sql)
        assert_ran_distributed(df)
