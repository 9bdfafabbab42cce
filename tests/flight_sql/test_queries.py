"""Queries, statements, parameters and metadata through the ADBC Flight SQL driver, each answer
compared with single-node DataFusion, each query shown to have run as several tasks."""

from __future__ import annotations

import concurrent.futures

import pyarrow as pa
import pytest

from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed
from datafusion_distributed.test_utils.tpch import TPCH_TABLES, tpch_query
from tests.flight_sql.conftest import connect

QUERIES = [1, 3, 5, 6, 10, 12, 18]


def _context_of(server, before: set[int]):
    """The context of the one session opened since `before` (ids of the contexts then)."""
    (found,) = [c for c in server.sessions.contexts() if id(c) not in before]
    return found


def _opened(server) -> set[int]:
    return {id(c) for c in server.sessions.contexts()}


@pytest.mark.parametrize("number", QUERIES)
def test_tpch_through_adbc_equals_single_node(tpch_server, single_node_sf001, number):
    before = _opened(tpch_server)
    with connect(tpch_server) as conn, conn.cursor() as cursor:
        cursor.execute(tpch_query(number))
        got = cursor.fetch_arrow_table()
        assert_ran_distributed(_context_of(tpch_server, before))
    assert_tables_equal(
        got, single_node_sf001.sql(tpch_query(number)).to_arrow_table(), sql=tpch_query(number)
    )


def test_eight_clients_at_once_each_get_their_own_answer(tpch_server, single_node_sf001):
    def run(number: int) -> pa.Table:
        with connect(tpch_server) as conn, conn.cursor() as cursor:
            cursor.execute(tpch_query(number))
            return cursor.fetch_arrow_table()

    numbers = [1, 3, 5, 6, 10, 12, 14, 19]
    with concurrent.futures.ThreadPoolExecutor(len(numbers)) as pool:
        answers = list(pool.map(run, numbers))
    for number, got in zip(numbers, answers, strict=True):
        assert_tables_equal(
            got, single_node_sf001.sql(tpch_query(number)).to_arrow_table(), sql=tpch_query(number)
        )
    for dctx in tpch_server.sessions.contexts():
        if dctx.engine.history.read(len):
            assert_ran_distributed(dctx)


def test_parameters_bind_to_dollar_placeholders(tpch_server, single_node_sf001):
    sql = (
        "SELECT l_returnflag, count(*) AS n, sum(l_quantity) AS q FROM lineitem "
        "WHERE l_quantity > $1 AND l_shipmode <> $2 GROUP BY l_returnflag ORDER BY l_returnflag"
    )
    before = _opened(tpch_server)
    with connect(tpch_server) as conn, conn.cursor() as cursor:
        cursor.execute(sql, parameters=(10, "AIR"))
        got = cursor.fetch_arrow_table()
        assert_ran_distributed(_context_of(tpch_server, before))
        cursor.execute(sql, parameters=(45, "MAIL"))
        again = cursor.fetch_arrow_table()
    assert_tables_equal(got, single_node_sf001.sql(sql, param_values={"1": 10, "2": "AIR"}).to_arrow_table())
    assert_tables_equal(
        again, single_node_sf001.sql(sql, param_values={"1": 45, "2": "MAIL"}).to_arrow_table()
    )
    assert sum(again.column("n").to_pylist()) < sum(got.column("n").to_pylist())


def test_ddl_and_settings_stay_in_the_client_s_own_session(tpch_server):
    with connect(tpch_server) as first, connect(tpch_server) as second:
        with first.cursor() as cursor:
            cursor.execute("CREATE VIEW mine AS SELECT n_name FROM nation WHERE n_regionkey = 1")
            cursor.execute("SET distributed.bytes_per_partition = 12345")
            cursor.execute("SELECT count(*) AS n FROM mine")
            assert cursor.fetchall() == [(5,)]
            cursor.execute("SHOW distributed.bytes_per_partition")
            assert cursor.fetchall() == [("distributed.bytes_per_partition", "12345")]
        with second.cursor() as cursor:
            with pytest.raises(Exception, match="mine.*not found"):
                cursor.execute("SELECT * FROM mine")
            cursor.execute("SHOW distributed.bytes_per_partition")
            assert cursor.fetchall() == [("distributed.bytes_per_partition", "1")]


def test_an_update_statement_answers_the_rows_it_wrote(tpch_server, tmp_path):
    with connect(tpch_server) as conn, conn.cursor() as cursor:
        cursor.execute(f"CREATE EXTERNAL TABLE copy (k BIGINT) STORED AS PARQUET LOCATION '{tmp_path}/'")
        cursor.adbc_statement.set_sql_query("INSERT INTO copy SELECT n_nationkey FROM nation")
        assert cursor.adbc_statement.execute_update() == 25
        cursor.execute("SELECT count(*) FROM copy")
        assert cursor.fetchall() == [(25,)]


def test_bad_sql_is_an_error_naming_the_cause_and_the_server_keeps_serving(tpch_server):
    with connect(tpch_server) as conn, conn.cursor() as cursor:
        with pytest.raises(Exception, match="INVALID_ARGUMENT.*SELEC"):
            cursor.execute("SELEC 1")
        with pytest.raises(Exception, match="no_such_table.*not found"):
            cursor.execute("SELECT * FROM no_such_table")
        with pytest.raises(Exception, match="Divide by zero"):
            cursor.execute("SELECT 1 / (n_nationkey - n_nationkey) FROM nation")
            cursor.fetchall()
        cursor.execute("SELECT count(*) FROM nation")
        assert cursor.fetchall() == [(25,)]


def test_metadata_calls_list_the_session_s_tables_with_their_schemas(tpch_server, single_node_sf001):
    with connect(tpch_server) as conn:
        info = conn.adbc_get_info()
        assert info["vendor_name"] == "datafusion-distributed"
        assert "BASE TABLE" in conn.adbc_get_table_types()
        objects = conn.adbc_get_objects(depth="all", catalog_filter="datafusion").read_all().to_pylist()
        (catalog,) = objects
        public = next(s for s in catalog["catalog_db_schemas"] if s["db_schema_name"] == "public")
        tables = {
            t["table_name"]: [c["column_name"] for c in t["table_columns"]]
            for t in public["db_schema_tables"]
        }
        assert tables["nation"] == single_node_sf001.table("nation").schema().names
        assert set(tables) == set(TPCH_TABLES)
        assert conn.adbc_get_table_schema("region") == single_node_sf001.table("region").schema()
        filtered = conn.adbc_get_objects(depth="tables", db_schema_filter="pub%", table_name_filter="p%")
        filtered = filtered.read_all().to_pylist()
        names = {
            t["table_name"] for c in filtered for s in c["catalog_db_schemas"] for t in s["db_schema_tables"]
        }
        assert names == {"part", "partsupp"}
