"""DataFusion's answers (and errors) for SQL that once came out different distributed.

Each query runs through `DistributedContext` with distribution forced on small multi-partition
tables, and on the same (plain) context; the answers must match. Where a plan cannot travel
faithfully as bytes, it must run on one node and say why.
"""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest
from datafusion import SessionConfig, SessionContext

from datafusion_distributed import DistributedContext, QueryFailed
from datafusion_distributed.errors import as_query_failure
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed, assert_ran_on_one_node
from datafusion_distributed.test_utils.forced import forced_distribution


def _context() -> SessionContext:
    ctx = SessionContext(SessionConfig().with_target_partitions(4).with_information_schema(True))
    rng = random.Random(3)
    n = 400
    t = pa.table(
        {
            "a": [rng.randrange(6) for _ in range(n)],
            "b": [rng.choice([None, 1, 2, 3]) for _ in range(n)],
            "c": [rng.random() for _ in range(n)],
        }
    )
    ctx.register_record_batches("t", [[batch] for batch in t.to_batches(max_chunksize=100)])
    sales = pa.table(
        {
            "category": [rng.choice("xyz") for _ in range(n)],
            "amount": [float(rng.randrange(100)) for _ in range(n)],
        }
    )
    ctx.register_record_batches("sales", [[batch] for batch in sales.to_batches(max_chunksize=100)])
    ctx.sql("CREATE TABLE h AS SELECT a, arrow_cast(c, 'Float16') AS f FROM t").collect()
    return ctx


@pytest.fixture(scope="module")
def ctx() -> SessionContext:
    return _context()


@pytest.fixture(scope="module")
def dctx(ctx):
    with DistributedContext(ctx, **forced_distribution(query_timeout=60)) as dctx:
        yield dctx


def _same(ctx, dctx, sql: str, distributed: bool = True):
    """`sql` answers through `dctx` as on `ctx`, having run as several tasks (`distributed`)
    or on one node; returns its plan."""
    expected = ctx.sql(sql).to_arrow_table()
    df = dctx.sql(sql)
    actual = df.to_arrow_table()
    assert actual.schema.types == expected.schema.types, sql
    assert_tables_equal(actual, expected, sql=sql)
    if distributed:
        assert_ran_distributed(df)
    else:
        assert_ran_on_one_node(df)
    return df.distributed_plan()


# Lost by DataFusion 55's own plan serialisation: run on one node, say why.
LOSSY = {
    "window IGNORE NULLS": "SELECT a, b, first_value(b) IGNORE NULLS OVER (PARTITION BY a ORDER BY c) FROM t",
    "window FILTER": "SELECT a, count(*) FILTER (WHERE b > 1) OVER (PARTITION BY a ORDER BY c) FROM t",
    # DataFusion reverses the second window to share the first one's sort
    "lag and lead reversed": (
        "SELECT a, c, lag(b) OVER (PARTITION BY a ORDER BY c DESC) AS p, "
        "lead(b, 2) OVER (PARTITION BY a ORDER BY c) AS q FROM t"
    ),
    "nth_value reversed": (
        "SELECT a, c, sum(b) OVER (PARTITION BY a ORDER BY c DESC) AS s, "
        "nth_value(b, 2) OVER (PARTITION BY a ORDER BY c) AS n FROM t"
    ),
    "float16": "SELECT f, count(*) FROM h GROUP BY f",
}


@pytest.mark.parametrize("sql", LOSSY.values(), ids=LOSSY.keys())
def test_constructs_serialisation_loses_run_on_one_node(ctx, dctx, sql):
    plan = _same(ctx, dctx, sql, distributed=False)
    assert plan.in_memory and "when the plan is serialised" in plan.single_node
    assert "runs on one node" in dctx.sql(sql).explain_string()


# Windows sorted for themselves, as written: hash-partitioned by their PARTITION BY keys.
SHIFTING_WINDOWS = {
    "lag": "SELECT a, c, lag(b) OVER (PARTITION BY a ORDER BY c DESC) FROM t",
    "lead with a default": "SELECT a, c, lead(b, 3, -1) OVER (PARTITION BY a ORDER BY c) FROM t",
    "nth_value descending": "SELECT a, c, nth_value(b, 2) OVER (PARTITION BY a ORDER BY c DESC) FROM t",
    "lag by two keys": "SELECT a, b, c, lag(c, 2) OVER (PARTITION BY a, b ORDER BY c) FROM t",
}


@pytest.mark.parametrize("sql", SHIFTING_WINDOWS.values(), ids=SHIFTING_WINDOWS.keys())
def test_partitioned_lag_lead_and_nth_value_run_distributed(ctx, dctx, sql):
    plan = _same(ctx, dctx, sql)
    assert plan.is_distributed and not plan.single_node, plan.single_node
    assert "Hash([a@" in dctx.sql(sql).explain_string()


SAME = {
    "grouping sets with ()": "SELECT a, count(*) FROM t GROUP BY GROUPING SETS ((a), ())",
    "share of total": (
        "SELECT category, sum(amount) / (SELECT sum(amount) FROM sales) AS share FROM sales GROUP BY category"
    ),
}
# The same answers on one node, each for the reason its plan's display gives.
SAME_ON_ONE_NODE = {
    "grouping sets of ()": (
        "SELECT count(*) FROM t GROUP BY GROUPING SETS (())",
        "splittable partitions=1",
    ),
    "float16 min max": ("SELECT a, min(f), max(f) FROM h GROUP BY a", "Float16 value becomes Float32"),
    "empty projection": (
        "WITH t AS (SELECT i AS c1 FROM generate_series(1, 10) t(i)) SELECT count(*) FROM t WHERE 1 = 1",
        "splittable partitions=1",
    ),
    "subquery in an aggregate": (
        "SELECT a, sum(c + (SELECT max(c) FROM t)) FROM t GROUP BY a",
        "reads a scalar subquery's value computed above it",
    ),
    "subquery in a filter": (
        "SELECT a, c FROM t WHERE c > (SELECT avg(c) FROM t)",
        "is a source that cannot be split",
    ),
    "show tables": ("SHOW TABLES", "StreamingTableExec has no serialised form"),
    "information schema": (
        "SELECT table_name FROM information_schema.tables",
        "StreamingTableExec has no serialised form",
    ),
    "the user's settings": (
        "SELECT name, value FROM information_schema.df_settings",
        "StreamingTableExec has no serialised form",
    ),
    "recursive cte": (
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT * FROM r",
        "WorkTableExec has no serialised form",
    ),
}


@pytest.mark.parametrize("sql", SAME.values(), ids=SAME.keys())
def test_same_answer_as_datafusion(ctx, dctx, sql):
    _same(ctx, dctx, sql)


@pytest.mark.parametrize(("sql", "why"), SAME_ON_ONE_NODE.values(), ids=SAME_ON_ONE_NODE.keys())
def test_same_answer_on_one_node_saying_why(ctx, dctx, sql, why):
    plan = _same(ctx, dctx, sql, distributed=False)
    assert why in (plan.single_node or plan.final.reason), plan.final.reason


def test_share_of_total_runs_distributed(ctx, dctx):
    plan = _same(ctx, dctx, SAME["share of total"])
    assert plan.is_distributed and not plan.single_node


def test_unserialisable_nodes_say_which_and_why(dctx):
    plan = dctx.sql(SAME_ON_ONE_NODE["recursive cte"][0]).distributed_plan()
    assert plan.in_memory and "has no serialised form" in plan.single_node


def test_a_subquery_of_several_rows_fails_as_datafusion_does(dctx):
    with pytest.raises(QueryFailed, match="Scalar subquery returned more than one row"):
        dctx.sql("SELECT a, (SELECT category FROM sales) FROM t").to_arrow_table()


def test_errors_are_query_failed_with_datafusion_s_message(dctx):
    with pytest.raises(QueryFailed, match="No field named nosuch"):
        dctx.sql("SELECT nosuch FROM t")
    with pytest.raises(QueryFailed, match="Divide by zero"):  # raised by the head stage
        dctx.sql("SELECT a, sum(b) / 0 FROM t GROUP BY a").to_arrow_table()


def _settings(ctx: SessionContext) -> dict[str, str]:
    rows = ctx.sql("SELECT name, value FROM information_schema.df_settings").to_pylist()
    return {row["name"]: row["value"] for row in rows}


@pytest.mark.not_a_distributed_run  # compares the user's own context before and after
def test_wrapping_leaves_the_user_s_context_as_it_was():
    ctx = _context()
    before = _settings(ctx)
    share = SAME["share of total"]
    expected = ctx.sql(share).to_arrow_table()
    with DistributedContext(ctx, **forced_distribution(query_timeout=60)) as dctx:
        dctx.sql(share).to_arrow_table()
        dctx.sql("SELECT count(*) FROM t").to_arrow_table()
    assert _settings(ctx) == before
    assert_tables_equal(ctx.sql(share).to_arrow_table(), expected, sql=share)


def test_the_user_s_settings_apply_to_the_next_query():
    ctx = _context()
    with DistributedContext(ctx, **forced_distribution(query_timeout=60)) as dctx:
        # subqueries planned as joins, as the user asked
        dctx.sql("SET datafusion.optimizer.enable_physical_uncorrelated_scalar_subquery = false")
        plan = _same(ctx, dctx, SAME_ON_ONE_NODE["subquery in a filter"][0], distributed=False)
        assert "ScalarSubqueryExec" not in {node.name for s in plan.stages for node in s.root.walk()}
        dctx.sql("RESET datafusion.optimizer.enable_physical_uncorrelated_scalar_subquery")
        plan = _same(ctx, dctx, SAME_ON_ONE_NODE["subquery in a filter"][0], distributed=False)
        assert "ScalarSubqueryExec" in {node.name for s in plan.stages for node in s.root.walk()}
        # the library overrides target_partitions per query, whatever the user set
        dctx.sql("SET datafusion.execution.target_partitions = 1")
        assert _same(ctx, dctx, "SELECT a, count(*) FROM t GROUP BY a").is_distributed


def test_insert_into_a_memory_table_runs_once(ctx):
    local = SessionContext()
    local.sql("CREATE TABLE m (x INT)").collect()
    with DistributedContext(local) as dctx:
        dctx.sql("INSERT INTO m VALUES (1), (2)").to_arrow_table()
    assert local.sql("SELECT x FROM m ORDER BY x").to_pydict() == {"x": [1, 2]}


def test_a_panic_inside_datafusion_is_a_query_failure():
    panic = type("PanicException", (BaseException,), {})  # what pyo3 raises for a Rust panic
    failure = as_query_failure(panic("index out of bounds"))
    assert isinstance(failure, QueryFailed) and "index out of bounds" in str(failure)
    interrupt = KeyboardInterrupt()
    assert as_query_failure(interrupt) is interrupt


def test_partition_columns_of_many_files_cross_an_exchange(tmp_path):
    """A hive-partitioned table's partition column is dictionary encoded, one dictionary per
    file: an exchange file gathering several files' batches must still hold them."""
    ctx = SessionContext(SessionConfig().with_target_partitions(4))
    path = tmp_path / "t"
    ctx.sql(
        "COPY (SELECT i % 10 AS part, 'k-' || i AS k, i AS v FROM generate_series(0, 9) t(i) ORDER BY k) "
        f"TO '{path}' STORED AS PARQUET PARTITIONED BY (part)"
    ).collect()
    ctx.sql(f"CREATE EXTERNAL TABLE t STORED AS PARQUET PARTITIONED BY (part) LOCATION '{path}'").collect()
    with DistributedContext(ctx, **forced_distribution(query_timeout=60, embedded_workers=3)) as dctx:
        for sql in ("SELECT part, k, v FROM t ORDER BY k", "SELECT part, count(*) FROM t GROUP BY part"):
            df = dctx.sql(sql)
            assert_tables_equal(df.to_arrow_table(), ctx.sql(sql).to_arrow_table(), sql=sql)
            assert_ran_distributed(df)


def test_file_partitions_declared_as_hash_partitioning_stay_on_one_node(tmp_path):
    """With `preserve_file_partitions`, a scan declares hash partitioning by its files'
    partition values; DataFusion 55 joins that wrongly with a side repartitioned for another
    partition count (the cluster's), so such plans run as the user's context plans them."""
    ctx = SessionContext(SessionConfig().with_target_partitions(3))
    for table, column, keys in (("fact", "f_dkey", "ABC"), ("dim", "d_dkey", "ABCD")):
        for key in keys:
            ctx.sql(
                f"COPY (SELECT * FROM (VALUES (1, '{key.lower()}'), (2, 'x')) v(n, s)) "
                f"TO '{tmp_path}/{table}/{column}={key}/data.parquet' STORED AS PARQUET"
            ).collect()
    for table, column in (("fact", "f_dkey"), ("dim", "d_dkey")):
        ctx.sql(
            f"CREATE EXTERNAL TABLE {table} STORED AS PARQUET PARTITIONED BY ({column}) "
            f"LOCATION '{tmp_path}/{table}/'"
        ).collect()
    ctx.sql("SET datafusion.optimizer.preserve_file_partitions = 1").collect()
    sql = "SELECT f_dkey, count(*) FROM fact JOIN dim ON f_dkey = d_dkey GROUP BY f_dkey"
    with DistributedContext(ctx, **forced_distribution(query_timeout=60)) as dctx:
        plan = dctx.sql(sql).distributed_plan()
        assert "preserve_file_partitions" in plan.single_node
        df = dctx.sql(sql)
        assert_tables_equal(df.to_arrow_table(), ctx.sql(sql).to_arrow_table(), sql=sql)
        assert_ran_on_one_node(df)


def test_delete_and_update_count_the_rows_they_change():
    """A memory table's DELETE and UPDATE act when DataFusion plans them: planned once."""
    local = SessionContext()
    local.sql("CREATE TABLE m (x INT, y VARCHAR) AS VALUES (1, 'a'), (2, 'b'), (3, 'c')").collect()
    with DistributedContext(local) as dctx:
        assert dctx.sql("DELETE FROM m WHERE x > 1").to_pylist() == [{"count": 2}]
        assert dctx.sql("UPDATE m SET y = 'z' WHERE x = 1").to_pylist() == [{"count": 1}]
    assert local.sql("SELECT x, y FROM m").to_pylist() == [{"x": 1, "y": "z"}]


def test_json_array_files_stay_on_one_node_and_ndjson_is_distributed(tmp_path):
    """DataFusion's serialisation drops a JSON table's array format: such scans run on one
    node; newline-delimited files (the default) distribute."""
    ctx = SessionContext(SessionConfig().with_target_partitions(4))
    rows = [{"a": i, "b": f"s{i % 3}"} for i in range(40)]
    for kind in ("array", "ndjson"):
        (tmp_path / kind).mkdir()
        for part in range(2):
            chunk = rows[part * 20 : (part + 1) * 20]
            text = json.dumps(chunk) if kind == "array" else "\n".join(json.dumps(r) for r in chunk)
            (tmp_path / kind / f"part-{part}.json").write_text(text)
    ctx.sql(
        f"CREATE EXTERNAL TABLE arr STORED AS JSON OPTIONS ('format.newline_delimited' 'false') "
        f"LOCATION '{tmp_path}/array/'"
    ).collect()
    ctx.sql(f"CREATE EXTERNAL TABLE nd STORED AS JSON LOCATION '{tmp_path}/ndjson/'").collect()
    with DistributedContext(ctx, **forced_distribution(query_timeout=60)) as dctx:
        for table in ("arr", "nd"):
            sql = f"SELECT b, count(*), sum(a) FROM {table} GROUP BY b"
            plan = dctx.sql(sql).distributed_plan()
            assert ("array format" in plan.single_node) == (table == "arr")
            assert plan.is_distributed == (table == "nd")
            df = dctx.sql(sql)
            assert_tables_equal(df.to_arrow_table(), ctx.sql(sql).to_arrow_table(), sql=sql)
            (assert_ran_distributed if table == "nd" else assert_ran_on_one_node)(df)


def test_an_exchange_below_a_use_of_a_subquery_value_stays_in_its_stage(ctx, dctx):
    """The partial aggregate uses the subquery's value, which DataFusion computes in the
    ScalarSubqueryExec above the final aggregate: the shuffle between them is not cut."""
    plan = _same(ctx, dctx, SAME_ON_ONE_NODE["subquery in an aggregate"][0], distributed=False)
    assert any("scalar subquery's value" in stage.reason for stage in plan.stages)
