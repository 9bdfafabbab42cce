"""All 22 TPC-H queries on single-node DataFusion, checked against DuckDB on the same files.

Runs at SF 0.01 by default, and also at SF 0.1 with the slow tests (``make test-all``).

This pins down the reference that distributed runs are compared with: the query texts,
the generated data and single-node DataFusion must agree with an independent engine.

The engines differ in ways that do not change the answer, and ``assert_tables_equal``
absorbs them: DuckDB returns ``avg`` of decimals and some decimal divisions as doubles
where DataFusion keeps decimals cut to a fixed scale (Q1 ``avg_*``: DataFusion's
DECIMAL(19,6) truncates 0.05008133... to 0.050081; Q8), sums of integers as DECIMAL(38,0)
where DataFusion has int64 (Q12), ``extract(year ...)`` as int64 where DataFusion has
int32 (Q7-Q9), and strings as ``string`` where DataFusion has ``string_view``.

The one difference the comparison does not absorb is a column name: Q18's last column is
the unaliased ``sum(l_quantity)``, which DataFusion names ``sum(lineitem.l_quantity)``.
The test takes DataFusion's names for that query; the values are still compared.
"""

from __future__ import annotations

import duckdb
import pytest

from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.tpch import TPCH_QUERY_NUMBERS, TPCH_TABLES, tpch_query

# Queries with an unaliased expression column, which each engine names its own way.
ENGINE_NAMED_COLUMNS = {18: "sum(l_quantity)"}


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("sf001", id="sf0.01"),
        pytest.param("sf01", id="sf0.1", marks=pytest.mark.slow),
    ],
)
def scale(request):
    return request.param


@pytest.fixture(scope="module")
def tpch_path(request, scale):
    return request.getfixturevalue(f"tpch_{scale}")


@pytest.fixture(scope="module")
def datafusion_ctx(request, scale):
    return request.getfixturevalue(f"single_node_{scale}")


@pytest.fixture(scope="module")
def duckdb_con(tpch_path):
    con = duckdb.connect()
    for table in TPCH_TABLES:
        files = str(tpch_path / table / "*.parquet").replace("'", "''")
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{files}')")
    yield con
    con.close()


def test_tables_match_row_counts(datafusion_ctx, duckdb_con):
    for table in TPCH_TABLES:
        df_count = datafusion_ctx.sql(f"SELECT count(*) AS n FROM {table}").to_pylist()[0]["n"]
        (duck_count,) = duckdb_con.execute(f"SELECT count(*) FROM {table}").fetchone()
        assert df_count == duck_count > 0, table


@pytest.mark.not_a_distributed_run  # DataFusion against DuckDB
@pytest.mark.parametrize("n", TPCH_QUERY_NUMBERS, ids=lambda n: f"q{n:02d}")
def test_tpch_query_matches_duckdb(n, datafusion_ctx, duckdb_con):
    sql = tpch_query(n)
    actual = datafusion_ctx.sql(sql).to_arrow_table()
    expected = duckdb_con.execute(sql).to_arrow_table()
    assert actual.num_rows > 0, "every TPC-H query returns rows"
    if n in ENGINE_NAMED_COLUMNS:
        assert ENGINE_NAMED_COLUMNS[n] in expected.column_names
        assert len(actual.column_names) == len(expected.column_names)
        expected = expected.rename_columns(actual.column_names)
    assert_tables_equal(actual, expected, sql=sql)
