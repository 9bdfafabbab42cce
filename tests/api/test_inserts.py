"""INSERT INTO, CREATE TABLE AS and DataFrame.write_table give exactly single-node DataFusion's
result: a listing table over a local folder is written by the tasks (staged, then committed),
a memory table on one node; the count returned and the table read back are DataFusion's."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from datafusion import DataFrameWriteOptions, SessionContext, udf

from datafusion_distributed import DistributedContext, QueryFailed
from datafusion_distributed.api.write_statements import table_reference
from datafusion_distributed.coordinator.writes import STAGING_FOLDER
from datafusion_distributed.test_utils.compare import assert_tables_equal
from datafusion_distributed.test_utils.distribution import assert_ran_distributed, assert_ran_on_one_node
from datafusion_distributed.test_utils.forced import forced_distribution
from datafusion_distributed.test_utils.tpch import register_tpch

COLUMNS = (
    "l_orderkey BIGINT, l_linenumber INT, l_returnflag VARCHAR, l_extendedprice DECIMAL(15, 2), "
    "l_shipdate DATE, l_comment VARCHAR"
)
SELECT = """
    SELECT l_orderkey, l_linenumber, l_returnflag, l_extendedprice, l_shipdate,
           CASE WHEN l_linenumber = 1 THEN NULL ELSE l_comment END AS l_comment
    FROM lineitem WHERE l_quantity > 10
"""
# a hive-partitioned table has its partition columns last
PARTITIONED_LAST = (
    f"SELECT l_orderkey, l_linenumber, l_extendedprice, l_shipdate, l_comment, l_returnflag FROM ({SELECT})"
)


@pytest.fixture(scope="module")
def dctx(tpch_sf001):
    with DistributedContext(**forced_distribution()) as dctx:
        register_tpch(dctx, tpch_sf001)
        yield dctx


@pytest.fixture
def single(tpch_sf001) -> SessionContext:
    """Single-node DataFusion over the same data, with no table of another test."""
    ctx = SessionContext()
    register_tpch(ctx, tpch_sf001)
    return ctx


def files_under(folder) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(root, name), folder)
        for root, _, names in os.walk(folder)
        for name in names
    )


def create_listing_table(ctx, name: str, folder, file_format: str, partition_by: str | None) -> None:
    partitioned = f"PARTITIONED BY ({partition_by})" if partition_by else ""
    options = "OPTIONS ('format.has_header' 'true')" if file_format == "CSV" else ""
    ctx.sql(
        f"CREATE EXTERNAL TABLE {name} ({COLUMNS}) STORED AS {file_format} {partitioned} "
        f"LOCATION '{folder}/' {options}"
    ).collect()


def table_rows(ctx, name: str) -> pa.Table:
    """The table's rows, its columns in the order it was created with."""
    return ctx.sql(
        f"SELECT l_orderkey, l_linenumber, l_returnflag, l_extendedprice, l_shipdate, l_comment FROM {name}"
    ).to_arrow_table()


@pytest.mark.parametrize("file_format", ["PARQUET", "CSV", "JSON"])
@pytest.mark.parametrize("partition_by", [None, "l_returnflag"])
def test_insert_into_a_listing_table_is_written_by_the_tasks(
    dctx, single, tmp_path, file_format, partition_by
):
    name = f"t_{file_format.lower()}_{partition_by or 'flat'}"
    create_listing_table(dctx, name, tmp_path / "dist", file_format, partition_by)
    create_listing_table(single, name, tmp_path / "single", file_format, partition_by)
    select = PARTITIONED_LAST if partition_by else SELECT
    first = f"INSERT INTO {name} SELECT * FROM ({select}) WHERE l_orderkey < 100"
    assert dctx.sql(first).to_arrow_table() == single.sql(first).to_arrow_table()
    before = files_under(tmp_path / "dist")

    insert = f"INSERT INTO {name} {select}"
    explained = dctx.sql(insert).explain_string()
    assert f"write: {file_format.lower()} files into {(tmp_path / 'dist').as_uri()}/" in explained
    count = dctx.sql(insert).to_arrow_table()
    assert_ran_distributed(dctx)
    assert count == single.sql(insert).to_arrow_table()
    assert count.column(0)[0].as_py() > 0

    after = files_under(tmp_path / "dist")
    assert set(before) < set(after), "the files already in the table were not kept"
    assert not any(STAGING_FOLDER in path for path in after)
    new = [os.path.basename(path) for path in set(after) - set(before)]
    assert len({name.split("-")[1] for name in new}) > 1, f"one task wrote every file: {new}"
    if partition_by:
        assert all(path.startswith(f"{partition_by}=") for path in after)
    expected = table_rows(single, name)
    assert (
        expected.num_rows
        == count.column(0)[0].as_py()
        + single.sql(f"SELECT count(*) FROM ({select}) WHERE l_orderkey < 100")
        .to_arrow_table()
        .column(0)[0]
        .as_py()
    )
    assert_tables_equal(table_rows(dctx, name), expected)


def test_a_failing_insert_leaves_the_table_as_it_was(tpch_sf001, tmp_path):
    def explode(keys: pa.Array) -> pa.Array:
        if pc.max(keys).as_py() > 59_000:  # only the task with the last orders fails
            raise ValueError("the UDF refused its input")
        return keys

    with DistributedContext(**forced_distribution()) as dctx:
        register_tpch(dctx, tpch_sf001)
        dctx.register_udf(udf(explode, [pa.int64()], pa.int64(), "immutable", "explode"))
        create_listing_table(dctx, "t", tmp_path, "PARQUET", None)
        dctx.sql(f"INSERT INTO t SELECT * FROM ({SELECT}) WHERE l_orderkey < 100").collect()
        before, rows = files_under(tmp_path), table_rows(dctx, "t")
        failing = f"INSERT INTO t SELECT explode(l_orderkey), l_linenumber, l_returnflag, l_extendedprice, l_shipdate, l_comment FROM ({SELECT})"
        assert dctx.sql(failing).distributed_plan().write is not None
        with pytest.raises(QueryFailed, match="the UDF refused its input"):
            dctx.sql(failing).collect()
        assert files_under(tmp_path) == before
        assert table_rows(dctx, "t") == rows


@pytest.mark.parametrize("statement", ["INSERT OVERWRITE", "REPLACE INTO"])
def test_overwriting_a_listing_table_fails_as_on_one_node(dctx, single, tmp_path, statement):
    """DataFusion 55 implements neither for listing tables: the table is left as it was."""
    name = f"t_{statement.split()[0].lower()}"
    create_listing_table(dctx, name, tmp_path / "dist", "PARQUET", None)
    create_listing_table(single, name, tmp_path / "single", "PARQUET", None)
    dctx.sql(f"INSERT INTO {name} SELECT * FROM ({SELECT}) WHERE l_orderkey < 100").collect()
    before = files_under(tmp_path / "dist")
    with pytest.raises(Exception, match="Overwrites are not implemented yet for Parquet"):
        single.sql(f"{statement} {name} {SELECT}").collect()
    with pytest.raises(QueryFailed, match="Overwrites are not implemented yet for Parquet"):
        dctx.sql(f"{statement} {name} {SELECT}").collect()
    assert files_under(tmp_path / "dist") == before


def test_insert_into_a_memory_table_runs_on_one_node_with_single_node_results(dctx, single):
    for ctx in (dctx, single):
        ctx.sql(f"CREATE TABLE mem_insert ({COLUMNS})").collect()
        ctx.sql("INSERT INTO mem_insert VALUES (1, 1, 'A', 1.50, DATE '1995-01-01', NULL)").collect()
    insert = f"INSERT INTO mem_insert {SELECT}"
    explained = dctx.sql(insert).explain_string()
    assert "DataSinkExec inserts into a memory table, which lives in the coordinator" in explained
    assert dctx.sql(insert).to_arrow_table() == single.sql(insert).to_arrow_table()
    assert_ran_on_one_node(dctx)
    assert_tables_equal(table_rows(dctx, "mem_insert"), table_rows(single, "mem_insert"))


@pytest.mark.not_a_distributed_run  # DataFusion runs CREATE TABLE AS itself, while planning
def test_create_table_as_runs_once(dctx, single):
    seen: list[int] = []

    def counted(keys: pa.Array) -> pa.Array:
        seen.append(len(keys))
        return keys

    dctx.register_udf(udf(counted, [pa.int64()], pa.int64(), "volatile", "counted"))
    ctas = f"CREATE TABLE ctas AS SELECT counted(l_orderkey) AS l_orderkey, l_linenumber, l_returnflag, l_extendedprice, l_shipdate, l_comment FROM ({SELECT})"
    df = dctx.sql(ctas)
    assert "DataFusion ran this statement (CREATE TABLE [AS]" in df.explain_string()
    assert df.to_pylist() == []
    single.sql(ctas.replace("counted(l_orderkey)", "l_orderkey")).collect()
    expected = table_rows(single, "ctas")
    assert sum(seen) == expected.num_rows  # the source was read once
    assert_tables_equal(table_rows(dctx, "ctas"), expected)  # each row once


def test_create_external_table_as_is_not_sql_datafusion_reads(dctx, tmp_path):
    with pytest.raises(QueryFailed, match="ParserError"):
        dctx.sql(f"CREATE EXTERNAL TABLE e STORED AS PARQUET LOCATION '{tmp_path}/' AS {SELECT}")


def test_write_table_into_a_listing_table_is_written_by_the_tasks(dctx, single, tmp_path):
    create_listing_table(dctx, "wt_listing", tmp_path / "dist", "PARQUET", "l_returnflag")
    create_listing_table(single, "wt_listing", tmp_path / "single", "PARQUET", "l_returnflag")
    for ctx in (dctx, single):
        ctx.sql(f"SELECT * FROM ({PARTITIONED_LAST}) WHERE l_orderkey < 100").write_table("wt_listing")
    before = files_under(tmp_path / "dist")
    assert dctx.sql(PARTITIONED_LAST).write_table("WT_Listing") is None  # DataFusion lowercases the name
    assert_ran_distributed(dctx)
    single.sql(PARTITIONED_LAST).write_table("WT_Listing")

    after = files_under(tmp_path / "dist")
    assert set(before) < set(after)
    new = [os.path.basename(path) for path in set(after) - set(before)]
    assert len({name.split("-")[1] for name in new}) > 1, f"one task wrote every file: {new}"
    assert_tables_equal(table_rows(dctx, "wt_listing"), table_rows(single, "wt_listing"))


def test_write_table_into_a_memory_table_gives_single_node_results(dctx, single):
    source = "SELECT l_orderkey, l_linenumber FROM lineitem WHERE l_quantity > 40"
    for ctx in (dctx, single):
        ctx.sql("CREATE TABLE wt_memory (l_orderkey BIGINT, l_linenumber INT)").collect()
        ctx.sql(source).write_table("wt_memory")
        ctx.sql(source).write_table("wt_memory", DataFrameWriteOptions())
    query = "SELECT * FROM wt_memory"
    assert_tables_equal(dctx.sql(query).to_arrow_table(), single.sql(query).to_arrow_table())
    assert_ran_on_one_node(dctx)  # a memory table, written in the coordinator
    assert (
        dctx.sql("SELECT count(*) FROM wt_memory").to_pylist()
        == single.sql("SELECT count(*) FROM wt_memory").to_pylist()
    )


def test_write_table_refuses_what_datafusion_refuses(dctx, single, tmp_path):
    for ctx, folder in ((dctx, "dist"), (single, "single")):
        create_listing_table(ctx, "wt_refused", tmp_path / folder, "PARQUET", None)
    renamed = "SELECT l_orderkey AS k, l_linenumber, l_returnflag, l_extendedprice, l_shipdate, l_comment FROM lineitem"
    # SQL's INSERT would cast this column; DataFusion's write_table hands it to the sink as it is
    widened = "SELECT l_orderkey, CAST(l_linenumber AS BIGINT) AS l_linenumber, l_returnflag, l_extendedprice, l_shipdate, l_comment FROM lineitem"
    for ctx in (dctx, single):
        with pytest.raises(Exception, match="Incompatible type. Field 'l_linenumber' has type Int32"):
            ctx.sql(widened).write_table("wt_refused")
        with pytest.raises(Exception, match="Inserting query schema mismatch"):
            ctx.sql(renamed).write_table("wt_refused")
        with pytest.raises(Exception, match="No table named 'no_such_table'"):
            ctx.sql(renamed).write_table("no_such_table")
    # DataFusion's own write_table ran (no staging) and failed mid-write: as on one node, the
    # files it had begun are left in the folder
    assert bool(files_under(tmp_path / "dist")) == bool(files_under(tmp_path / "single"))
    assert not any(STAGING_FOLDER in path for path in files_under(tmp_path / "dist"))


@pytest.mark.parametrize(
    ("name", "sql"),
    [
        ("t", '"t"'),
        ("My_Table", '"my_table"'),
        ('"My Table"', '"My Table"'),
        ('public."T"', '"public"."T"'),
        ("datafusion.public.t", '"datafusion"."public"."t"'),
        ("a b", None),
        ("t;", None),
        ("a.b.c.d", None),
    ],
)
def test_table_names_read_as_datafusion_reads_them(name, sql):
    assert table_reference(name) == sql
